-- reset.lua makes a bucket fresh: it deletes its state, its sliding log's
-- settled time and its block, and gives it a new identity in
-- KEYS[1] .. ':g' (see decide.lua), so that a unit taken before the reset
-- is not settled against the fresh bucket. The identity is kept for an
-- hour past the last unit taken under it, longer than any request waits
-- for its answer; once it is gone a bucket has none, until the next unit
-- a limit that settles takes makes one.
--
-- KEYS[1]  the bucket (decide.lua's KEYS[i]; the other keys share its tag)
-- ARGV[1]  a token unique to this call, that the new identity is made of
local k = KEYS[1]
redis.call('DEL', k, k .. ':s', k .. ':b')
local id = tonumber(string.sub(redis.sha1hex(ARGV[1] .. '|' .. k), 1, 13), 16) + 1
redis.call('SET', k .. ':g', string.format('%.17g', id), 'PX', 3600000)
return 1
