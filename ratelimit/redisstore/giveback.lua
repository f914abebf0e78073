-- giveback.lua returns the departure slot of a leaky_bucket request that
-- gave up waiting, when it is still the last in the queue.
--
-- KEYS[1]  the bucket ('next tail', see decide.lua)
-- ARGV[1]  the request's tail token, as decide.lua stored it
-- ARGV[2]  interval in us
-- ARGV[3]  the request's departure in us when decisions use the caller's
--          clock, else '': the stored next then equals departure+interval
--          exactly when the request is the tail, as in the memory store
-- Reply: 1 when the slot was returned, else 0.
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local nx, tl = string.match(v, '^(%S+)%s*(%S*)$')
nx = tonumber(nx)
local t = tonumber(ARGV[2])
if (tl ~= '' and tl == ARGV[1]) or (ARGV[3] ~= '' and nx == tonumber(ARGV[3]) + t) then
  redis.call('SET', KEYS[1], string.format('%.17g', nx - t), 'KEEPTTL')
  return 1
end
return 0
