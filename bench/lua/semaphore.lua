-- Counting semaphore on a sorted set, in Lua: the baseline for RL.ACQUIRE.
--
-- Idea (Redis in Action's "fair semaphore", 6.3, and Stripe's concurrent-requests
-- limiter): one sorted set per semaphore, one member per holder scored by the instant it
-- expires. A call first drops the expired holders (ZREMRANGEBYSCORE), then admits a holder
-- that is already in the set (renewing it) or, while fewer than `limit` holders remain, a
-- new one (ZADD); the key's expiry follows its latest holder. Time comes from the server's
-- TIME, so every client shares one clock (Stripe's script takes the client's).
--
-- KEYS[1] the semaphore (a sorted set: holder -> expiry in Unix ms)
-- ARGV: limit, holder, ttl_ms (the holder expires ttl_ms after its last acquire)
-- Reply, shaped like RL.ACQUIRE's so both send the same amount back:
--   {allowed, free slots after the call, retry_after_ms, reset_after_ms, limit}
--   A denied call's retry_after_ms is when enough holders will have expired to admit it;
--   reset_after_ms is when the last holder expires (the key's expiry).
--
-- How it differs from RL.ACQUIRE:
--   * Whole milliseconds (the module keeps microseconds); a holder expiring at t is live
--     strictly before t, as in the module.
--   * Up to seven commands per call (TIME, ZREMRANGEBYSCORE, ZCARD, ZSCORE, ZRANGE, ZADD,
--     PEXPIREAT), each through redis.call argument conversion; the module opens the key
--     once and decides on its own list.
--   * Memory: a ZSET member (id string, double score, listpack up to 128 holders, then a
--     skiplist node and a dict entry each); the module keeps 9 + id length bytes a holder.
--   * Renewing keeps the later expiry, as the module does (a shorter ttl never shortens).
--   * No argument validation beyond tonumber(), no cap on the limit.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local holder = ARGV[2]
local ttl_ms = tonumber(ARGV[3])

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
local live = redis.call('ZCARD', key)
local own = tonumber(redis.call('ZSCORE', key, holder))

-- The expiry of the holder at `rank` (0 = earliest, -1 = latest), or nil if there is none.
local function expiry_at(rank)
  local entry = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  return tonumber(entry[2])
end

local last = expiry_at(-1)
if not own and live >= limit then
  -- live - limit + 1 holders must expire first, the earliest first.
  local retry_ms = math.max(1, expiry_at(live - limit) - now_ms)
  return {0, 0, retry_ms, last - now_ms, limit}
end

local expires_ms = math.max(now_ms + ttl_ms, own or 0)
if not own then
  live = live + 1
end
last = math.max(last or 0, expires_ms)
redis.call('ZADD', key, expires_ms, holder)
redis.call('PEXPIREAT', key, last)
return {1, math.max(0, limit - live), 0, last - now_ms, limit}
