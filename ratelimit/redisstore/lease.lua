-- lease.lua hands one instance a batch of a bucket's budget (sync: lease),
-- takes back what it did not use and hears what it spent, atomically. The
-- instance spends the batch locally until the reply's validity ends; see
-- "Leases" in README.md for why admissions never exceed the policy's.
-- Absolute times are whole microseconds, as in decide.lua; common.lua, sent
-- in front of this file, holds the helpers both scripts use.
--
-- KEYS[1]   the bucket: fixed_window 'start count' and sliding_window_counter
--           'start cur prev' strings as decide.lua keeps them; token_bucket
--           a hash (below)
-- ARGV[1]   decision time in us, or '' for the server's TIME
-- ARGV[2]   extra TTL in ms added to every PEXPIRE (virtual clocks)
-- ARGV[3]   algorithm (1 token_bucket, 3 fixed_window, 5 sliding_window_counter)
-- ARGV[4]   limit
-- ARGV[5]   window us
-- ARGV[6]   interval us
-- ARGV[7]   burst
-- ARGV[8]   want: units asked for (0 takes none)
-- ARGV[9]   units given back, unspent
-- ARGV[10]  window start in us the given-back units were counted in
--           (fixed_window, sliding_window_counter)
-- ARGV[11]  token_bucket: units spent since the lease's last call
-- ARGV[12]  token_bucket: the lease's field, 'o:' .. the instance's id ..
--           '/' .. the lease's; '' for a look (Peek), which writes nothing
-- ARGV[13]  token_bucket: how long a grant may be spent, us
-- ARGV[14]  token_bucket: admitted units refunded (count_status) after
--           they were reported spent
-- ARGV[15]  token_bucket: the units the lease holds, besides those this
--           call reports, or '' (a give-back of a lease that is gone)
--
-- Reply: {granted, now_us, valid_us, mark, remaining, retry_us, reset_us}:
-- the units granted; the script's time; how long from now the instance
-- may spend them (to the window's end, or the token_bucket holding's
-- expiry); the window start they are counted in (0 for token_bucket);
-- what the bucket has left after the grant; when granted is short of want
-- (or 0), how long until a unit may be free (0 otherwise); how long until
-- the bucket is whole.
--
-- token_bucket hash: 'l' the level in us of refill (tokens x interval),
-- 't' its time in us, and per lease 'o:ID/N' = 'units expiry_us': units
-- leased and not yet reported spent or given back. The refill is capped
-- at burst minus every instance's outstanding units, so the level plus
-- the units leased and unspent never exceed the burst.

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local slack = tonumber(ARGV[2])
local alg = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local w = tonumber(ARGV[5])
local t = tonumber(ARGV[6])
local burst = tonumber(ARGV[7])
local want = tonumber(ARGV[8])
local back = tonumber(ARGV[9])
local mark = tonumber(ARGV[10])
local k = KEYS[1]

if alg == 3 then
  local v = nums(redis.call('GET', k))
  local st, cnt = tonumber(v[1] or '0'), tonumber(v[2] or '0')
  if back > 0 and mark == st then cnt = math.max(cnt - back, 0) end
  local start = wstart(now, w)
  if start > st then st, cnt = start, 0 end
  -- A clock that steps back keeps counting into the newest window.
  local e = st + w
  local g = math.max(math.min(want, limit - cnt), 0)
  cnt = cnt + g
  if g > 0 or back > 0 then
    redis.call('SET', k, fmt(st) .. ' ' .. fmt(cnt), 'PX', ttl(e - now, slack))
  end
  local retry = 0
  if g < want or g == 0 then retry = e - now end
  local reset = e - now
  if cnt == 0 then reset = 0 end
  return {g, now, e - now, st, limit - cnt, retry, reset}
end

if alg == 5 then
  local v = nums(redis.call('GET', k))
  local st, cur, prev = tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')
  if back > 0 then
    if mark == st then
      cur = math.max(cur - back, 0)
    elseif mark == st - w then
      prev = math.max(prev - back, 0)
    end
  end
  local el
  st, cur, prev, el = swc_roll(st, cur, prev, now, w)
  -- As the per-request step: a unit is admitted while cur + weight <
  -- limit, so ceil(limit - cur - weight) of them fit (swc_room, exact).
  -- The weight only falls until the window ends, which is when the grant
  -- must be spent.
  local room = swc_room(limit, cur, prev, el, w)
  local g = 0
  if room > 0 then g = math.min(want, room) end
  cur = cur + g
  if g > 0 or back > 0 then
    redis.call('SET', k, fmt(st) .. ' ' .. fmt(cur) .. ' ' .. fmt(prev), 'PX', ttl(st + 2 * w - now, slack))
  end
  local retry = 0
  if g < want or g == 0 then retry = cretry(cur, prev, el, w, limit) end
  local rem = room - g
  local reset = creset(cur, prev, el, w)
  return {g, now, st + w - now, st, rem, retry, reset}
end

-- token_bucket
local spent = tonumber(ARGV[11])
local me = ARGV[12]
-- A look (Peek) computes the reply as any call would but writes nothing:
-- it makes no bucket, and what it would clean up the next call does.
local look = me == ''
local lttl = tonumber(ARGV[13])
local cap = burst * t
local h = redis.call('HGETALL', k)
local level, at
local out = 0 -- every instance's outstanding units
local mine, mine_e = 0, 0
local fields = {}
for i = 1, #h, 2 do
  local f, val = h[i], h[i + 1]
  if f == 'l' then
    level = tonumber(val)
  elseif f == 't' then
    at = tonumber(val)
  else
    local x = nums(val)
    local o, e = tonumber(x[1]), tonumber(x[2])
    out = out + o
    fields[#fields + 1] = {f, o, e}
    if f == me then mine, mine_e = o, e end
  end
end
if level == nil then level, at = cap, now end
-- Refill first, under the cap that held since the last call: units
-- reported spent or expired now free room only from now on.
if now > at then
  local room = cap - out * t
  if level < room then level = math.min(level + (now - at), room) end
  at = now
end
local maxe = 0
for _, e in ipairs(fields) do
  if e[3] <= now then
    if not look then redis.call('HDEL', k, e[1]) end
    if e[1] == me then mine, mine_e = 0, 0 end
  elseif e[1] ~= me then
    maxe = math.max(maxe, e[3])
  end
end
local sp = math.min(spent, mine)
mine = mine - sp
local gb = math.min(back, mine)
mine = mine - gb
level = level + gb * t
-- Units the lease does not hold were granted by a call whose reply it
-- never had (the timeout passed, the script ran all the same): they are
-- spent nowhere, and counted on, renewed with the lease's later grants,
-- they would keep the refill below the burst for as long as the lease
-- lives. Dropped as spent, their room refills from now on. (Only the
-- lease's own calls write its field, one at a time, so what it holds as
-- the call leaves is all the field may still count.)
local have = tonumber(ARGV[15] or '')
if have ~= nil then mine = math.min(mine, have) end
local outNow = mine
for _, e in ipairs(fields) do
  if e[3] > now and e[1] ~= me then outNow = outNow + e[2] end
end
local refunds = tonumber(ARGV[14] or '0')
if refunds > 0 then
  -- A refund undoes an admission, as RefundTokenBucket does, within
  -- the cap.
  level = math.max(level, math.min(level + refunds * t, cap - outNow * t))
end
local g = math.max(math.min(want, math.floor(level / t)), 0)
level = level - g * t
mine = mine + g
-- A grant renews the instance's whole holding, never shortening it: a
-- grant may be shorter than the one before (a steady lease's lasts up to
-- 10s, a slower one's 1s), and an instance whose reply is lost spends
-- what it held until the expiry it last heard.
local valid = 0
if g > 0 then
  mine_e = math.max(mine_e, now + lttl)
end
if look then
  -- want, back, spent and refunds are 0: nothing to record.
elseif mine > 0 then
  valid = mine_e - now
  redis.call('HSET', k, me, fmt(mine) .. ' ' .. fmt(mine_e))
  maxe = math.max(maxe, mine_e)
else
  redis.call('HDEL', k, me)
end
if not look then
  redis.call('HSET', k, 'l', fmt(level), 't', fmt(at))
  -- Fresh once every lease has expired and the level has refilled.
  redis.call('PEXPIRE', k, ttl(math.max(maxe - now, 0) + (cap - level), slack))
end
local retry = 0
if (g < want or g == 0) and level < t then retry = t - level end
return {g, now, valid, 0, math.floor(level / t), retry, cap - level}
