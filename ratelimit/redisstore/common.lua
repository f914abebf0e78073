-- common.lua: helpers every decision and lease script starts with; the Go
-- side prepends this file to decide.lua and lease.lua, so both round,
-- split and expire as one.

local function trunc(x)
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end

local function fmt(x) return string.format('%.17g', x) end

local function ttl(us, slack)
  return math.max(1, math.ceil(us / 1000)) + slack
end

-- wstart is the aligned window that holds now (floored, like Go's windowStart).
local function wstart(now, w)
  local s = now - (now % w)
  if s > now then s = s - w end
  return s
end

-- ceilmicro rounds ns up to a whole microsecond, as ratelimit.ceilMicro.
local function ceilmicro(ns) return math.ceil(ns / 1000) * 1000 end

local function nums(v)
  local t = {}
  if v then
    for x in string.gmatch(v, '%S+') do t[#t + 1] = x end
  end
  return t
end

-- cretry mirrors ratelimit.counterRetry; el and wn are in ns.
local function cretry(cur, prev, el, wn, target)
  local toend = wn - el
  local wait
  if target <= 0 then
    return 0
  elseif cur >= target then
    local need = wn - target * wn / cur
    wait = toend + trunc(need) + 1
  else
    local e = wn - (target - cur) * wn / prev
    wait = math.min(math.max(trunc(e) + 1 - el, 1), toend)
  end
  return ceilmicro(wait)
end

-- swc_roll moves a sliding_window_counter's windows on to the one that
-- holds now and returns them with the time elapsed in it (ns, below the
-- window) and the previous window's weight, as ratelimit's counter step.
local function swc_roll(st, cur, prev, now, w)
  local start = wstart(now, w)
  if start == st + w then
    st, cur, prev = start, 0, cur
  elseif start > st then
    st, cur, prev = start, 0, 0
  end
  local wn = w * 1000
  local el = math.min(math.max(now - st, 0) * 1000, wn - 1)
  return st, cur, prev, el, wn, prev * (wn - el) / wn
end
