-- Sliding log in Lua (a sorted set of timestamps): the baseline for RL.SLIDINGLOG.
--
-- Idea (second seed article, "sliding window log"; the first calls it exact but memory-
-- hungry): keep one sorted-set entry per admitted unit, scored by its time; on each call
-- drop the entries older than the window, count what is left, and admit if count + cost
-- stays within `limit`.
--
-- KEYS[1] the log (a sorted set)   ARGV: limit, window (seconds), [cost = 1]
-- Reply, shaped like the RL commands': {allowed, remaining, retry_after_ms, reset_after_ms, limit}
--
-- How it differs from RL.SLIDINGLOG: each entry is a ZSET member (a unique string
-- "<sec>.<usec>#<n>" plus a double score, kept in a listpack up to 128 entries and in a
-- skiplist + dict beyond), where the module keeps 8 bytes per unit; timestamps come from
-- TIME in microseconds; no argument validation and no cap on the log size.

local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2]) * 1000000
local cost = tonumber(ARGV[3]) or 1

local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local key = KEYS[1]

redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now_us - window_us))
local used = redis.call('ZCARD', key)

-- Milliseconds until the entry at `rank` (0 = oldest, -1 = newest) leaves the window.
local function ms_until_gone(rank)
  local entry = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  if entry[2] == nil then
    return 0
  end
  return math.max(1, math.ceil((tonumber(entry[2]) + window_us - now_us) / 1000))
end

if used + cost > limit then
  local retry_ms = -1
  if cost <= limit then
    retry_ms = ms_until_gone(used + cost - limit - 1)
  end
  return {0, math.max(0, limit - used), retry_ms, ms_until_gone(-1), limit}
end

local score = string.format('%.0f', now_us)
local entries = {}
for n = used + 1, used + cost do
  entries[#entries + 1] = score
  entries[#entries + 1] = clock[1] .. '.' .. clock[2] .. '#' .. n
end
redis.call('ZADD', key, unpack(entries))
redis.call('PEXPIRE', key, window_us / 1000)
return {1, limit - used - cost, 0, window_us / 1000, limit}
