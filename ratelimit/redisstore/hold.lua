-- hold.lua keeps a leaky_bucket's next departure on Redis no earlier than
-- a given time: when Redis comes back after the local fallback decided
-- for a while, the requests the fallback queued are still leaving, and
-- the shared schedule must start after them.
--
-- KEYS[1]  the bucket ('next tail', see decide.lua)
-- ARGV[1]  decision time in us, or '' for the server's TIME
-- ARGV[2]  how long from that time, in us, no departure may be scheduled
-- ARGV[3]  extra TTL in ms (virtual clocks)
-- Reply: 1 when the schedule moved, else 0.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local hold = now + tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
if v and tonumber(string.match(v, '^(%S+)')) >= hold then return 0 end
-- No tail token: the request that was the tail no longer is.
redis.call('SET', KEYS[1], string.format('%.17g', hold), 'PX', math.max(1, math.ceil((hold - now) / 1000)) + tonumber(ARGV[3]))
return 1
