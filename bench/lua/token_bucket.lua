-- Token bucket in Lua: the baseline for RL.TOKENBUCKET.
--
-- Idea (first seed article, "Distributed Rate Limiting in Microservices"): keep two hash
-- fields per bucket (tokens, time of the last update), take the time from the server with
-- TIME so every client shares one clock, refill lazily for the elapsed time, take `cost`
-- tokens if they are there, and let the key expire once the bucket would be full again.
--
-- KEYS[1] the bucket (a hash)   ARGV: capacity, rate (tokens per second), [cost = 1]
-- Reply, shaped like RL.TOKENBUCKET's so both send the same amount back:
--   {allowed, remaining, retry_after_ms, reset_after_ms, capacity}
--
-- How it differs from RL.TOKENBUCKET:
--   * Lua numbers are doubles: tokens and timestamps are floats (fractional tokens are kept
--     as decimal text in the hash), the module uses integer nanosecond arithmetic.
--   * Three extra commands per admitted call (TIME, HMGET, HSET + PEXPIRE) each go through
--     redis.call argument conversion; the module reads the clock and the value directly.
--   * A denied call writes nothing here (like the module); the article's version rewrites
--     both fields on every call.
--   * No argument validation beyond tonumber(): bad input gives Lua errors or nonsense.

local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3]) or 1

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000

local stored = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(stored[1]) or capacity
local last_ms = tonumber(stored[2]) or now_ms
if now_ms > last_ms then
  tokens = math.min(capacity, tokens + (now_ms - last_ms) * rate / 1000)
end

if tokens < cost then
  local retry_ms = -1
  if cost <= capacity then
    retry_ms = math.max(1, math.ceil((cost - tokens) * 1000 / rate))
  end
  local reset_ms = math.ceil((capacity - tokens) * 1000 / rate)
  return {0, math.floor(tokens), retry_ms, reset_ms, capacity}
end

tokens = tokens - cost
local reset_ms = math.max(1, math.ceil((capacity - tokens) * 1000 / rate))
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now_ms)
redis.call('PEXPIRE', KEYS[1], reset_ms)
return {1, math.floor(tokens), 0, reset_ms, capacity}
