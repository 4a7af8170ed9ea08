-- Token bucket with a maximum wait (pacing) in Lua: the baseline for
-- RL.TOKENBUCKET ... MAXWAIT ms.
--
-- Idea: token_bucket.lua, but a call that finds too few tokens is not refused outright: if
-- the missing tokens refill within `max_wait_ms`, it is admitted now and told how long to
-- wait, and the bucket goes into debt (negative tokens), so later callers queue behind it.
-- With capacity 1 this is a leaky bucket used as a queue (nginx's limit_req with burst).
--
-- KEYS[1] the bucket (a hash)   ARGV: capacity, rate (tokens per second), cost, max_wait_ms
-- Reply, shaped like RL.TOKENBUCKET ... MAXWAIT's:
--   {allowed, remaining, retry_after_ms, reset_after_ms, capacity}
--   admitted with tokens there: retry_after_ms 0; admitted with a wait: remaining 0 and
--   retry_after_ms the wait; denied (the wait would exceed max_wait_ms): retry_after_ms is
--   when a call would fit within max_wait_ms (-1 if the cost exceeds the capacity).
--
-- How it differs from RL.TOKENBUCKET ... MAXWAIT:
--   * Floats, as in token_bucket.lua (fractional and negative token counts kept as decimal
--     text in the hash); the module keeps one integer instant in nanoseconds.
--   * TIME, HMGET, then HSET + PEXPIRE when admitted, each through redis.call; the module
--     reads the clock and its 16-byte state directly.
--   * No argument validation beyond tonumber().

local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3]) or 1
local max_wait_ms = tonumber(ARGV[4]) or 0

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000

local stored = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(stored[1]) or capacity
local last_ms = tonumber(stored[2]) or now_ms
if now_ms > last_ms then
  tokens = math.min(capacity, tokens + (now_ms - last_ms) * rate / 1000)
end

local wait_ms = 0
if tokens < cost then
  wait_ms = (cost - tokens) * 1000 / rate
  if cost > capacity or wait_ms > max_wait_ms then
    local retry_ms = -1
    if cost <= capacity then
      retry_ms = math.max(1, math.ceil(wait_ms - max_wait_ms))
    end
    local reset_ms = math.ceil((capacity - tokens) * 1000 / rate)
    return {0, math.max(0, math.floor(tokens)), retry_ms, reset_ms, capacity}
  end
end

tokens = tokens - cost
local reset_ms = math.max(1, math.ceil((capacity - tokens) * 1000 / rate))
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now_ms)
redis.call('PEXPIRE', KEYS[1], reset_ms)
return {1, math.max(0, math.floor(tokens)), math.ceil(wait_ms), reset_ms, capacity}
