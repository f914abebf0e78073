-- reset.lua makes a bucket fresh: it deletes its state, its sliding log's
-- settled time and its block, and counts the reset in KEYS[1] .. ':g',
-- which decide.lua hands out with every unit that may be settled, so that
-- a unit taken before the reset is not settled against the fresh bucket.
-- The count is kept for an hour past the last reset, longer than any
-- request waits for its answer (an unsettled hold runs out within ten
-- minutes); once it is gone the count is 0 again, as for a bucket never
-- reset, and a unit stamped with it (there is none left by then) would
-- settle again.
--
-- KEYS[1]  the bucket (decide.lua's KEYS[i]; the other keys share its tag)
local k = KEYS[1]
redis.call('DEL', k, k .. ':s', k .. ':b')
redis.call('INCR', k .. ':g')
redis.call('PEXPIRE', k .. ':g', 3600000)
return 1
