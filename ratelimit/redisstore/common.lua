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

local function nums(v)
  local t = {}
  if v then
    for x in string.gmatch(v, '%S+') do t[#t + 1] = x end
  end
  return t
end

-- floor1000 is floor(x / 1000) for a whole number x, exactly: Lua numbers
-- are doubles, and beyond 2^53 (104 days in ns) x / 1000 rounds, and so
-- would x + 1. Above that x is split into h * 2^20 + l, both exact, and
-- h * 2^20 is h * 1048 * 1000 + h * 576.
local function floor1000(x)
  if x < 0 then return math.floor(x / 1000) end -- only ever clamped to 1
  if x >= 9007199254740992 then
    local l = math.fmod(x, 1048576)
    local h = (x - l) / 1048576
    return h * 1048 + floor1000(h * 576 + l)
  end
  local r = math.fmod(x, 1000)
  return (x - r) / 1000
end

-- cretry mirrors ratelimit.counterRetry in whole microseconds: el is the
-- time elapsed in the window and w the window, both in us. Go computes in
-- ns and rounds up to a whole us; the float steps below are its own, and
-- the integer ones are done in us so that they stay exact for any window.
local function cretry(cur, prev, el, w, target)
  local wn = w * 1000
  if target <= 0 then
    return 0
  elseif cur >= target then
    -- ceilMicro(toEnd + int64(need) + 1), toEnd a whole number of us.
    local need = wn - target * wn / cur
    return (w - el) + floor1000(trunc(need)) + 1
  end
  -- ceilMicro(min(max(int64(e) + 1 - elapsed, 1), toEnd)).
  local e = wn - (target - cur) * wn / prev
  return math.min(math.max(floor1000(trunc(e)) + 1 - el, 1), w - el)
end

-- swc_roll moves a sliding_window_counter's windows on to the one that
-- holds now and returns them with the time elapsed in it (us, below the
-- window) and the previous window's weight, as ratelimit's counter step:
-- prev * float64(w - elapsed) / float64(w) on nanoseconds, each product
-- by 1000 rounded once as Go's conversion does.
local function swc_roll(st, cur, prev, now, w)
  local start = wstart(now, w)
  if start == st + w then
    st, cur, prev = start, 0, cur
  elseif start > st then
    st, cur, prev = start, 0, 0
  end
  local el = math.min(math.max(now - st, 0), w - 1)
  return st, cur, prev, el, w, prev * ((w - el) * 1000) / (w * 1000)
end
