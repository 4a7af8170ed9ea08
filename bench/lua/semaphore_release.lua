-- Release of a sorted-set semaphore holder, in Lua: the baseline for RL.RELEASE.
--
-- Idea: the other half of semaphore.lua. Drop the expired holders, then remove the caller's
-- (ZREM); Redis deletes the key with its last member, so an empty semaphore leaves nothing.
--
-- KEYS[1] the semaphore (semaphore.lua's sorted set)   ARGV: holder
-- Reply, like RL.RELEASE's: 1 if that holder was live and is released, 0 otherwise.
--
-- How it differs from RL.RELEASE: three commands (TIME, ZREMRANGEBYSCORE, ZREM) through
-- redis.call; the key keeps the expiry semaphore.lua last gave it (the latest holder's
-- expiry, possibly the released holder's), where the module moves it to the last live
-- holder's, so a released semaphore's key can outlive its holders until then.

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
return redis.call('ZREM', KEYS[1], ARGV[1])
