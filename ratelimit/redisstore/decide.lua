-- decide.lua applies one request to every limit of a route, atomically. Each
-- step below mirrors the Step function of the same algorithm in package
-- ratelimit line for line; only the units differ. Absolute times are whole
-- microseconds (Lua numbers are doubles: exact up to 2^53 us, year 2255);
-- durations handed back are whole microseconds too (the Go side makes them
-- nanoseconds: a double holds every microsecond count of a span up to
-- MaxSpan exactly, but not the same span in nanoseconds beyond 104 days),
-- and sliding_window_counter decides in whole numbers, exactly, as Go does
-- (see swc_room in common.lua).
--
-- KEYS[i]   the bucket of limit i; a sliding_window_log limit also has
--           KEYS[i] .. ':s' (same hash tag) holding its settled time, and a
--           limit that blocks has KEYS[i] .. ':b' holding the end of its
--           block; both are built from KEYS[i] here, so all keys of a limit
--           share a slot.
-- ARGV[1]   decision time in us, or '' for the server's TIME
-- ARGV[2]   extra TTL in ms added to every PEXPIRE (virtual clocks)
-- ARGV[3]   token unique to this call: sliding log members are token:i
-- ARGV[4]   tail token of a leaky_bucket request: the caller's time in ns
-- ARGV[5]   mode: '1' decide (take one), '0' look (take none), 'j' judge
--           (decide, take none), 'u' undo, 'r' refund (count_status), 'k'
--           keep (end a token_bucket hold, the unit stays spent)
-- ARGV[6]   undo: the time in us of the decision being undone
-- ARGV[6+11*(i-1)+1..11] per limit: algorithm (ratelimit.Algorithm: 1
--           token, 2 leaky, 3 fixed, 4 sliding log, 5 sliding counter),
--           limit, window us, interval us, burst, tolerance us, shadow
--           (1/0), undo ('-': keep; to give back, the window start the
--           decision's reply named, the TAT or next departure it wrote in
--           us, or 1 for a sliding log; to refund or keep, the mark the
--           reply named, or its hold mark for a held token), block us (0:
--           the limit does not block), hold (1/0: the limit's units may be
--           settled, ratelimit.Policy.Hold, and a token_bucket's takes are
--           held; to refund or keep, whether the unit was), generation
--           (to refund or keep, the one the decision's reply named; else
--           '-')
--
-- KEYS[i] .. ':g' holds the identity of bucket i: a random number made
-- when a limit that may settle first takes a unit from it, and made anew
-- by each reset (see reset.lua). A unit is settled only against the
-- identity it was taken under, so neither a reset nor a Redis that lost
-- its data (a restart without persistence, FLUSHALL, a failover to a
-- replica behind) lets a unit taken before be settled against a fresh
-- bucket that never counted it: the fresh bucket has no identity, or
-- another one.
--
-- Reply: {now_us, then per limit: allowed, remaining, retry_us, reset_us,
-- delay_us, mark in us, blocked (1/0), hold mark, generation} (all 0 in
-- modes 'r' and 'k'). The
-- generation is the bucket's identity when a limit that may settle took
-- a unit, else 0. The mark names the unit
-- an admitted request took, for a refund (-1 when it took none, since a
-- window longer than the time since 1970 starts at 0): the
-- window start it was counted in (fixed_window, sliding_window_counter),
-- the TAT after it (token_bucket), the score of its log entry
-- (sliding_window_log); 0 for leaky_bucket. The hold mark of a held token
-- is its epoch plus one (see tb_load), 0 when the token is not held.
-- common.lua, sent in front of this file, holds the helpers it shares
-- with lease.lua.

-- token_bucket ---------------------------------------------------------

local function tb_step(p, tat0, held, now, n)
  local t = p.t
  local cap = p.burst * t
  local tat = math.max(tat0, now + held * t)
  local nt = tat + n * t
  if nt - now > cap then
    return tat0, {0, math.max(trunc((cap - (tat - now)) / t), 0), (nt - cap - now), (tat - now), 0}
  end
  local used = nt - now
  local retry = 0
  if used > 0 then
    local r = used % t
    if r ~= 0 then retry = r else retry = t end
  end
  return nt, {1, trunc((cap - used) / t), retry, used, 0, nt}
end

-- leaky_bucket ---------------------------------------------------------

local function lb_step(p, nx, now, n)
  local t, tol = p.t, p.tol
  local depart = math.max(nx, now)
  local wait = depart - now
  local slack = tol % t
  if n > 0 and wait > tol then
    return nx, {0, 0, (wait - tol), wait - slack, 0}
  end
  local nxt = depart + n * t
  local delay = 0
  if n > 0 then delay = wait end
  local rem, retry = 0, 0
  local reset = math.max(nxt - now - slack, 0)
  local free = tol - (nxt - now)
  if free < 0 then
    retry = -free
  elseif nxt > now then
    rem = math.floor(free / t) + 1
    retry = t - free % t
    if rem >= p.cap then retry = 0 end
  else
    rem = p.cap
  end
  return nxt, {1, rem, retry, reset, delay}
end

-- fixed_window ---------------------------------------------------------

local function fw_step(p, st, cnt, now, n)
  local start = wstart(now, p.w)
  if start > st then st, cnt = start, 0 end
  local e = st + p.w
  if cnt + n > p.limit then
    return st, cnt, {0, 0, (e - now), (e - now), 0, st}
  end
  cnt = cnt + n
  local reset = (e - now)
  if cnt == 0 then reset = 0 end
  return st, cnt, {1, p.limit - cnt, reset, reset, 0, st}
end

-- sliding_window_counter ----------------------------------------------

local function swc_step(p, st, cur, prev, now, n)
  local w = p.w
  local el
  st, cur, prev, el = swc_roll(st, cur, prev, now, w)
  local room = swc_room(p.limit, cur, prev, el, w)
  if n > 0 and room == 0 then
    return st, cur, prev, {0, 0, cretry(cur, prev, el, w, p.limit), creset(cur, prev, el, w), 0, st}
  end
  cur = cur + n
  local rem, retry = math.max(room - n, 0), 0
  if rem > 0 then
    retry = cretry(cur, prev, el, w, p.limit - rem)
  else
    retry = cretry(cur, prev, el, w, p.limit)
  end
  local reset = creset(cur, prev, el, w)
  if rem == p.limit then reset = 0 end
  return st, cur, prev, {1, rem, retry, reset, 0, st}
end

-- sliding_window_log ---------------------------------------------------
-- The log is a sorted set of accepted requests scored by time; KEYS[i]..':s'
-- holds settled (see ratelimit.SlidingLogState). Entries at or before a
-- cutoff are dropped with ZREMRANGEBYSCORE, even by a look (n = 0), as
-- the memory store's Peek does: the settled time they leave behind decides
-- later late arrivals.

local function zat(k, cutoff, i)
  local r = redis.call('ZRANGEBYSCORE', k, '(' .. fmt(cutoff), '+inf', 'WITHSCORES', 'LIMIT', i, 1)
  return tonumber(r[2])
end

local function znewest(k)
  local r = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  if #r == 0 then return nil end
  return tonumber(r[2])
end

local function zdrop(k, sk, cutoff, w, now, slack)
  local r = redis.call('ZREVRANGEBYSCORE', k, fmt(cutoff), '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #r > 0 then
    redis.call('ZREMRANGEBYSCORE', k, '-inf', fmt(cutoff))
    local settled = tonumber(r[2]) + w
    redis.call('SET', sk, fmt(settled), 'PX', ttl(math.max(settled, now) + w - now, slack))
  end
end

local function zcount(k, cutoff)
  return redis.call('ZCOUNT', k, '(' .. fmt(cutoff), '+inf')
end

-- swl_step decides one limit, pushing member when it admits n > 0. It
-- returns the decision and whether it pushed.
local function swl_step(p, k, now, n, member, slack)
  local w = p.w
  local sk = k .. ':s'
  local newest = znewest(k)
  local pushed = false
  if newest and now < newest then
    -- stepLate: a request that arrives before the newest entry.
    local total = redis.call('ZCARD', k)
    local count = zcount(k, now - w)
    local oldest = zat(k, now - w, 0)
    local reset = (newest + w - now)
    local settled = tonumber(redis.call('GET', sk) or '0')
    if now < settled or count + n > p.limit then
      local alive = zcount(k, newest - w)
      local retry = newest
      local kk = alive + n - p.limit
      if kk > 0 then
        local r = redis.call('ZRANGE', k, total - alive + math.min(kk - 1, alive - 1), total - alive + math.min(kk - 1, alive - 1), 'WITHSCORES')
        retry = tonumber(r[2]) + w
      end
      return {0, 0, (retry - now), reset, 0}, false
    end
    if n > 0 then
      zdrop(k, sk, now - w, w, now, slack)
      redis.call('ZADD', k, fmt(newest), member)
      local x = ttl(newest + w - now, slack)
      redis.call('PEXPIRE', k, x)
      redis.call('PEXPIRE', sk, x)
      pushed = true
    end
    return {1, p.limit - count - n, (oldest + w - now), reset, 0, newest}, pushed
  end
  if n > 0 then
    local settled = tonumber(redis.call('GET', sk) or '0')
    if now < settled then
      -- Late behind entries that are gone: nothing tells how many of them
      -- its window holds, and any later retry arrives in order.
      return {0, 0, (settled - now), (settled - now), 0}, false
    end
  end
  local cutoff = now - w
  if newest then zdrop(k, sk, cutoff, w, now, slack) end
  local cnt = 0
  if newest then cnt = zcount(k, cutoff) end
  if cnt + n > p.limit then
    local idx = math.min(cnt + n - p.limit - 1, cnt - 1)
    return {0, 0, (zat(k, cutoff, idx) + w - now), (newest + w - now), 0}, false
  end
  if n > 0 then
    redis.call('ZADD', k, fmt(now), member)
    local x = ttl(w, slack)
    redis.call('PEXPIRE', k, x)
    redis.call('PEXPIRE', sk, x)
    pushed = true
    newest = now
  end
  cnt = cnt + n
  local retry, reset = 0, 0
  if cnt > 0 then
    retry = (zat(k, cutoff, 0) + w - now)
    reset = (newest + w - now)
  end
  return {1, p.limit - cnt, retry, reset, 0, now}, pushed
end

-- dispatch ---------------------------------------------------------------

local mode = ARGV[5]
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local slack = tonumber(ARGV[2])
local token = ARGV[3]
local tail = ARGV[4]

local function param(i)
  local b = 6 + (i - 1) * 11
  local p = {
    alg = tonumber(ARGV[b + 1]), limit = tonumber(ARGV[b + 2]), w = tonumber(ARGV[b + 3]),
    t = tonumber(ARGV[b + 4]), burst = tonumber(ARGV[b + 5]), tol = tonumber(ARGV[b + 6]),
    shadow = ARGV[b + 7] == '1', flag = ARGV[b + 8] ~= '-', start = tonumber(ARGV[b + 8]),
    block = tonumber(ARGV[b + 9]), hold = ARGV[b + 10] == '1', gen = tonumber(ARGV[b + 11]),
  }
  p.cap = 1 + math.floor(p.tol / p.t)
  return p
end

-- IDENT_TTL is how long (ms) a bucket's identity outlives the last unit
-- taken under it: longer than any request waits for its answer (an
-- unsettled hold runs out within ten minutes). Each take refreshes it.
local IDENT_TTL = 3600000

-- ident returns bucket k's identity for a unit taken now, making one when
-- the bucket has none: from this call's token, unique to the call, so a
-- bucket made again after its data was lost never gets the identity it
-- had (nor 0, the identity of no bucket).
local function ident(k)
  local gk = k .. ':g'
  local g = redis.call('GET', gk)
  if g then
    redis.call('PEXPIRE', gk, IDENT_TTL + slack)
    return tonumber(g)
  end
  local id = tonumber(string.sub(redis.sha1hex(token .. '|' .. k), 1, 13), 16) + 1
  redis.call('SET', gk, fmt(id), 'PX', IDENT_TTL + slack)
  return id
end

-- current reports whether the unit of limit i to settle was taken in the
-- bucket as it is: no reset, and no loss of Redis's data, came between.
-- A unit that carries no identity (0: taken by a limit that does not
-- settle) settles against a bucket that has none either.
local function current(i)
  local p = param(i)
  return p.gen == nil or p.gen == tonumber(redis.call('GET', KEYS[i] .. ':g') or '0')
end

-- scalar state: token_bucket 'tat', leaky_bucket 'next tail',
-- fixed_window 'start count', sliding_window_counter 'start cur prev'. A
-- missing key is the zero state. Keys expire once their state equals a
-- fresh one, as the memory store sweeps idle buckets.
local function load(k)
  local v = nums(redis.call('GET', k))
  return tonumber(v[1] or '0'), v[2], v[3]
end

-- Held tokens (ratelimit.Policy.Hold, see ratelimit.TokenBucketState)
-- are counted by epoch of HOLD_EPOCH us: a token_bucket holding units is
-- 'tat epoch cur prev', cur the holds taken in that epoch and prev those
-- of the one before. A hold still open once the epoch after its own has
-- ended is kept, as at the time that is found: its instance went away
-- without settling it, and a bucket is never held down for longer than two
-- epochs. An open request is settled long before (its answer ends it).
local HOLD_EPOCH = 300000000

-- tb_save writes bucket k's state s. It lives until the bucket is full,
-- or, while it holds units, until its holds would run out and refill.
local function tb_save(p, k, s)
  local held = s.cur + s.prev
  if held == 0 then
    redis.call('SET', k, fmt(s.tat), 'PX', ttl(s.tat - now, slack))
    return
  end
  local till = math.max(s.tat, (s.ep + 2) * HOLD_EPOCH + held * p.t)
  redis.call('SET', k, fmt(s.tat) .. ' ' .. fmt(s.ep) .. ' ' .. fmt(s.cur) .. ' ' .. fmt(s.prev), 'PX', ttl(till - now, slack))
end

-- tb_load reads token_bucket limit p's bucket k as it stands at now.
local function tb_load(p, k)
  local v = nums(redis.call('GET', k))
  local s = {tat = tonumber(v[1] or '0'), ep = math.floor(now / HOLD_EPOCH),
    cur = tonumber(v[3] or '0'), prev = tonumber(v[4] or '0')}
  if s.cur + s.prev == 0 then return s end
  local ep = tonumber(v[2])
  if ep >= s.ep then
    s.ep = ep -- a clock that steps back keeps the newest epoch
    return s
  end
  -- Holds that ran out are kept: the bucket first stands where they
  -- held it, as ratelimit.SettleTokenBucket brings it. That is written at
  -- once, even by a look, so that their refill starts now, once.
  s.tat = math.max(s.tat, now + (s.cur + s.prev) * p.t)
  if ep == s.ep - 1 then
    s.cur, s.prev = 0, s.cur
  else
    s.cur, s.prev = 0, 0
  end
  tb_save(p, k, s)
  return s
end

-- tb_settle ends the hold of a token that bucket k held since the epoch
-- mark - 1 names: refund gives it back, otherwise it stays spent. Mirrors
-- ratelimit.SettleTokenBucket; a hold that ran out was kept already.
local function tb_settle(p, k, mark, refund)
  local s = tb_load(p, k)
  local at = mark - 1
  if not ((at == s.ep and s.cur > 0) or (at == s.ep - 1 and s.prev > 0)) then
    return
  end
  s.tat = math.max(s.tat, now + (s.cur + s.prev) * p.t)
  if at == s.ep then s.cur = s.cur - 1 else s.prev = s.prev - 1 end
  if refund then s.tat = s.tat - p.t end
  tb_save(p, k, s)
end

-- takeback gives back one request that limit i took at time at (us): the
-- inverse of the step's write, applied to the state as it now stands, so
-- that several give-backs on one bucket compose. oldtail, for a
-- leaky_bucket limit, is the tail token to restore when this request is
-- still the tail. Counters are given back only while their window is
-- still the one the decision counted in (p.start), and a token_bucket's
-- TAT or a leaky_bucket's next departure only while it is still the one
-- the decision wrote (p.start): after a later request's take, moving it
-- back would hand that request's place to a third. Unless inscript: then
-- the step's write is known to be the latest.
local function takeback(i, at, oldtail, inscript)
  local p, k = param(i), KEYS[i]
  if p.alg == 4 then
    redis.call('ZREM', k, token .. ':' .. i)
    return
  end
  local v = nums(redis.call('GET', k))
  if v[1] == nil then return end
  local a = tonumber(v[1])
  if (p.alg == 1 or p.alg == 2) and not inscript and a ~= p.start then
    return
  end
  if p.alg == 1 then
    v[1] = fmt(a - p.t)
    -- The hold it took, in the newest epoch that holds any. (In mode
    -- 'u' a later settle may have moved the TAT: then the hold stays
    -- until its epochs run out, holding the bucket lower, never higher.)
    local cur, prev = tonumber(v[3] or '0'), tonumber(v[4] or '0')
    if p.hold and cur > 0 then
      v[3] = fmt(cur - 1)
    elseif p.hold and prev > 0 then
      v[4] = fmt(prev - 1)
    end
  elseif p.alg == 2 then
    v[1] = fmt(a - p.t)
    if v[2] and v[2] == tail .. ':' .. fmt(a - p.t - at) then
      v[2] = oldtail
    end
  elseif inscript or a == p.start then
    v[2] = fmt(tonumber(v[2]) - 1)
  else
    return
  end
  redis.call('SET', k, table.concat(v, ' '), 'KEEPTTL')
end

-- blocked returns the end of limit p's block on bucket k (us) while it
-- lasts, else nil. Mirrors ratelimit.BlockedDecision.
local function blocked(p, k)
  if p.block <= 0 then return nil end
  local v = tonumber(redis.call('GET', k .. ':b') or '0')
  if v > now then return v end
  return nil
end

-- startblock starts limit p's block on bucket k after rejection d, as
-- ratelimit.StartBlock does; a shadow limit never blocks.
local function startblock(p, k, d)
  if p.block <= 0 or p.shadow then return end
  -- A full Redis (maxmemory, noeviction) refuses the write; the rejection
  -- stands all the same, and the next request of the spent key is
  -- rejected again, as the caller's fallback would not: it does not know
  -- the key is spent.
  redis.pcall('SET', k .. ':b', fmt(now + p.block), 'PX', ttl(p.block, slack))
  d[3] = math.max(d[3], p.block)
  d[4] = math.max(d[4], p.block)
end

-- algstep applies n requests to limit i and writes the new state. It
-- returns the decision and whether it took anything, with the
-- leaky_bucket tail token it replaced.
local function algstep(p, k, i, n)
  if p.alg == 4 then
    return swl_step(p, k, now, n, token .. ':' .. i, slack)
  end
  if p.alg == 1 then
    local s = tb_load(p, k)
    local nt, d
    nt, d = tb_step(p, s.tat, s.cur + s.prev, now, n)
    if d[1] == 1 and n > 0 then
      s.tat = nt
      if p.hold then
        s.cur = s.cur + n
        d[8] = s.ep + 1
      end
      tb_save(p, k, s)
      return d, true, nil
    end
    return d, false, nil
  end
  local a, b, c = load(k)
  local d
  local took = false
  if p.alg == 2 then
    local nx
    nx, d = lb_step(p, a, now, n)
    if d[1] == 1 and n > 0 then
      redis.call('SET', k, fmt(nx) .. ' ' .. tail .. ':' .. fmt(d[5]), 'PX', ttl(nx - now, slack))
      took = true
    end
  elseif p.alg == 3 then
    local st, cnt
    st, cnt, d = fw_step(p, a, tonumber(b or '0'), now, n)
    if d[1] == 1 and n > 0 then
      redis.call('SET', k, fmt(st) .. ' ' .. fmt(cnt), 'PX', ttl(st + p.w - now, slack))
      took = true
    end
  else
    local st, cur, prev
    st, cur, prev, d = swc_step(p, a, tonumber(b or '0'), tonumber(c or '0'), now, n)
    if d[1] == 1 and n > 0 then
      redis.call('SET', k, fmt(st) .. ' ' .. fmt(cur) .. ' ' .. fmt(prev), 'PX', ttl(st + 2 * p.w - now, slack))
      took = true
    end
  end
  return d, took, b
end

-- step applies n requests to limit i, as algstep, on a bucket that is not
-- blocked; a blocked bucket rejects with nothing taken, and a rejection
-- of n > 0 starts the limit's block.
local function step(i, n)
  local p, k = param(i), KEYS[i]
  local until_ = blocked(p, k)
  if until_ then
    -- Reset is when the budget, which the block leaves as it is, is
    -- whole again, if that is after the block's end (see
    -- ratelimit.entry.blockedLocked).
    local left = (until_ - now)
    local d = algstep(p, k, i, 0)
    return {0, 0, left, math.max(left, d[4]), 0, 0, 1}, false
  end
  local d, took, b = algstep(p, k, i, n)
  if d[1] == 0 and n > 0 then startblock(p, k, d) end
  if not took then
    d[6], d[8] = -1, 0
  elseif p.hold then
    d[9] = ident(k)
  end
  return d, took, b
end

-- refund gives back the unit of limit i that an admitted request took,
-- named by the mark its decision's reply carried (p.start), at now. Each
-- branch mirrors the Refund step of its algorithm in package ratelimit.
local function refund(i)
  local p, k = param(i), KEYS[i]
  if p.alg == 4 then
    local r = redis.call('ZRANGEBYSCORE', k, fmt(p.start), fmt(p.start), 'LIMIT', 0, 1)
    if #r > 0 then redis.call('ZREM', k, r[1]) end
    return
  end
  if p.alg == 1 and p.hold then
    tb_settle(p, k, p.start, true)
    return
  end
  local v = nums(redis.call('GET', k))
  if v[1] == nil then return end
  local a = tonumber(v[1])
  if p.alg == 1 then
    -- A token that was not held, as ratelimit.RefundTokenBucket.
    if a <= now then return end
    v[1] = fmt(math.max(a - p.t, now))
  elseif p.alg == 3 then
    if a ~= p.start or tonumber(v[2]) <= 0 then return end
    v[2] = fmt(tonumber(v[2]) - 1)
  elseif p.alg == 5 then
    if a == p.start and tonumber(v[2]) > 0 then
      v[2] = fmt(tonumber(v[2]) - 1)
    elseif a == p.start + p.w and tonumber(v[3]) > 0 then
      v[3] = fmt(tonumber(v[3]) - 1)
    else
      return
    end
  else
    return
  end
  redis.call('SET', k, table.concat(v, ' '), 'KEEPTTL')
end

local n = #KEYS
local out = {now}
local function put(i, d)
  local b = 1 + (i - 1) * 9
  for j = 1, 9 do out[b + j] = d[j] or 0 end
end

if mode == 'r' then
  -- Give back, for the limits flagged, the unit an admitted request took
  -- (count_status), against this server's time like every decision.
  -- Nothing else is touched, as the memory store's Refund: a look here
  -- would drop the sliding log's entries that left the window and move
  -- its settled time, which decides later late arrivals. Modes 'r' and
  -- 'k' reply zeros for every limit; the caller reads none of it.
  for i = 1, n do
    if param(i).flag and current(i) then refund(i) end
  end
  for i = 1, n do put(i, {}) end
  return out
end

if mode == 'k' then
  -- End, for the limits flagged, the hold of a token an admitted request
  -- took (count_status): it stays spent.
  for i = 1, n do
    local p = param(i)
    if p.flag and p.alg == 1 and p.hold and current(i) then tb_settle(p, KEYS[i], p.start, false) end
  end
  for i = 1, n do put(i, {}) end
  return out
end

if mode == 'u' then
  -- Give back, for the limits flagged, a request decided at ARGV[6] by an
  -- earlier call (cluster mode, where one request's limits span slots).
  -- The last taken first: two limits on one bucket each find the state
  -- their own take left.
  local at = tonumber(ARGV[6])
  for i = n, 1, -1 do
    if param(i).flag then takeback(i, at, nil, false) end
  end
  for i = 1, n do put(i, (step(i, 0))) end
  return out
end

-- Mode 'j' judges: it decides as if taking, then takes nothing, as when
-- a limit decided elsewhere (another slot) has rejected the request.
local cost = 1
if mode == '0' then cost = 0 end
local took, tails = {}, {}
local admitted = mode ~= 'j'
for i = 1, n do
  local d, t, old = step(i, cost)
  put(i, d)
  took[i], tails[i] = t, old
  if d[1] == 0 and ARGV[6 + (i - 1) * 11 + 7] ~= '1' then admitted = false end
end
if not admitted then
  -- Nothing is consumed: give back what the admitting limits took and
  -- report each as it stands without this request, as the memory store
  -- does: the last taken first.
  for i = n, 1, -1 do
    if took[i] then takeback(i, now, tails[i], true) end
  end
  for i = 1, n do
    if took[i] then put(i, (step(i, 0))) end
  end
end
return out
