-- Sliding window counter in Lua (two keys): the baseline for RL.SLIDING.
--
-- Idea (second seed article, the "hybrid" sliding window): count calls per fixed window in
-- one key per window, and estimate the sliding window as
--   previous_count * (share of the previous window still inside the sliding window)
--   + current_count.
-- Admit if the estimate plus `cost` stays within `limit`; each window key lives two windows.
--
-- KEYS[1] a base name   ARGV: limit, window (seconds), [cost = 1]
-- Reply, shaped like the RL commands': {allowed, remaining, retry_after_ms, reset_after_ms, limit}
--
-- Single-node only: the two window keys, <base>:<window number> and <base>:<number - 1>,
-- are derived inside the script from the server's TIME instead of being passed in KEYS.
-- That is what lets redis-benchmark drive it with one random key per call (each
-- __rand_int__ is randomized separately, so two KEYS could not name the same limiter), but
-- it is not Cluster-safe (undeclared keys). The article passes both keys and a client clock.
--
-- How it differs from RL.SLIDING: two keys (two dict entries, two expiries) per limiter in
-- steady state, float weights, an approximate retry_after when the next window is needed,
-- and no argument validation.

local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3]) or 1

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local number = math.floor(now_ms / window_ms)
local current_key = KEYS[1] .. ':' .. number
local previous_key = KEYS[1] .. ':' .. (number - 1)

local counts = redis.call('MGET', current_key, previous_key)
local current = tonumber(counts[1]) or 0
local previous = tonumber(counts[2]) or 0
local into = (now_ms - number * window_ms) / window_ms   -- 0 <= into < 1
local estimate = previous * (1 - into) + current

local reset_ms = 0
if current > 0 then
  reset_ms = (number + 2) * window_ms - now_ms
elseif previous > 0 then
  reset_ms = (number + 1) * window_ms - now_ms
end

if estimate + cost > limit then
  local retry_ms = -1
  if cost <= limit then
    if previous > 0 and current + cost <= limit then
      -- wait until the previous window's weight has fallen far enough
      local weight = (limit - current - cost) / previous
      retry_ms = math.ceil((1 - weight - into) * window_ms)
    else
      -- approximation: the current window must first become the previous one
      retry_ms = (number + 1) * window_ms - now_ms
    end
    retry_ms = math.max(1, retry_ms)
  end
  return {0, math.max(0, math.floor(limit - estimate)), retry_ms, reset_ms, limit}
end

if redis.call('INCRBY', current_key, cost) == cost then
  redis.call('PEXPIRE', current_key, 2 * window_ms)
end
return {1, math.floor(limit - estimate - cost), 0, (number + 2) * window_ms - now_ms, limit}
