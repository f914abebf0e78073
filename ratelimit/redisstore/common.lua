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

-- Exact products. Lua numbers are doubles, whole only up to 2^53, and a
-- count times a window in microseconds goes past that (a count of 751 and
-- a window of 100 years do), where a product rounds. The functions below
-- take whole numbers in [0, 2^53) and never round: a product that may not
-- fit is worked out in limbs of 24 bits.
local LIMB = 16777216 -- 2^24

local function limbs(x)
  local x0 = x % LIMB
  x = (x - x0) / LIMB
  local x1 = x % LIMB
  return x0, x1, (x - x1) / LIMB
end

-- mulcmp is the sign of a*b - c*d: -1, 0 or 1.
local function mulcmp(a, b, c, d)
  local p, q = a * b, c * d
  if p < 9007199254740992 and q < 9007199254740992 then
    -- Both exact: a product of 2^53 or more never rounds below 2^53.
    if p < q then return -1 elseif p > q then return 1 end
    return 0
  end
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local c0, c1, c2 = limbs(c)
  local d0, d1, d2 = limbs(d)
  -- The limbs of a*b - c*d (each below 2^51 in size: exact), then
  -- carried so that all but the top one lie in [0, 2^24).
  local r1 = a0 * b0 - c0 * d0
  local r2 = a0 * b1 + a1 * b0 - c0 * d1 - c1 * d0
  local r3 = a0 * b2 + a1 * b1 + a2 * b0 - c0 * d2 - c1 * d1 - c2 * d0
  local r4 = a1 * b2 + a2 * b1 - c1 * d2 - c2 * d1
  local r5 = a2 * b2 - c2 * d2
  local k = math.floor(r1 / LIMB)
  r1, r2 = r1 - k * LIMB, r2 + k
  k = math.floor(r2 / LIMB)
  r2, r3 = r2 - k * LIMB, r3 + k
  k = math.floor(r3 / LIMB)
  r3, r4 = r3 - k * LIMB, r4 + k
  k = math.floor(r4 / LIMB)
  r4, r5 = r4 - k * LIMB, r5 + k
  if r5 < 0 then return -1 end
  if r5 > 0 or r4 > 0 or r3 > 0 or r2 > 0 or r1 > 0 then return 1 end
  return 0
end

-- floormuldiv is floor(a*b/c), for c > 0 and a quotient below 2^53: the
-- float estimate, off by a few units at most, corrected exactly.
local function floormuldiv(a, b, c)
  local q = math.floor(a * (b / c))
  while q > 0 and mulcmp(q, c, a, b) > 0 do q = q - 1 end
  while mulcmp(q + 1, c, a, b) <= 0 do q = q + 1 end
  return q
end

-- ceilmuldiv is ceil(a*b/c), as floormuldiv.
local function ceilmuldiv(a, b, c)
  local q = floormuldiv(a, b, c)
  if mulcmp(q, c, a, b) < 0 then q = q + 1 end
  return q
end

-- swc_room mirrors ratelimit.counterRoom: how many requests fit below
-- limit at once, ceil(limit - cur - prev*(w-el)/w) when positive, else 0
-- (a request is rejected). The same in microseconds as in nanoseconds:
-- the fraction does not change with the unit.
local function swc_room(limit, cur, prev, el, w)
  if cur >= limit then return 0 end
  return math.max(limit - cur - floormuldiv(prev, w - el, w), 0)
end

-- cretry mirrors ratelimit.counterRetry in whole microseconds: el is the
-- time elapsed in the window and w the window, both in us. Go computes in
-- ns and rounds up to a whole us; a ceiling of a ceiling being the
-- ceiling of the whole, the same in us gives the same.
local function cretry(cur, prev, el, w, target)
  if target <= 0 then
    return 0
  elseif cur >= target then
    return (w - el) + (w - ceilmuldiv(target, w, cur)) + 1
  elseif target - cur >= prev then
    return 1
  end
  return math.min(math.max(w - ceilmuldiv(target - cur, w, prev) + 1 - el, 1), w - el)
end

-- creset is how long until a sliding_window_counter's budget is whole
-- again, cur + prev*(1-f) < 1, as ratelimit's counterReset; 0 when it is.
local function creset(cur, prev, el, w)
  if cur == 0 and swc_room(1, 0, prev, el, w) == 1 then return 0 end
  return cretry(cur, prev, el, w, 1)
end

-- swc_roll moves a sliding_window_counter's windows on to the one that
-- holds now and returns them with the time elapsed in it (us, below the
-- window), as ratelimit's counter step.
local function swc_roll(st, cur, prev, now, w)
  local start = wstart(now, w)
  if start == st + w then
    st, cur, prev = start, 0, cur
  elseif start > st then
    st, cur, prev = start, 0, 0
  end
  return st, cur, prev, math.min(math.max(now - st, 0), w - 1)
end
