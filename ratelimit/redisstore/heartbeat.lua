-- heartbeat.lua records that an instance is alive and counts the
-- instances seen alive recently, on the server's clock.
--
-- KEYS[1]  the sorted set of instances, scored by their last beat in us
-- ARGV[1]  the instance's id
-- ARGV[2]  how long a beat counts, us
-- ARGV[3]  '1' to leave (the instance is closing), else '0'
-- Reply: {the number of instances alive, this one included unless
-- leaving; 1 when the instance was not in the set, else 0}. An instance
-- that beat less than ARGV[2] ago and is not in the set was lost with
-- Redis's data (a restart without persistence, FLUSHALL), and so were the
-- others that have not beaten since.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local alive = tonumber(ARGV[2])
local added = 0
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  added = redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - alive))
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * alive / 1000))
return {redis.call('ZCARD', KEYS[1]), added}
