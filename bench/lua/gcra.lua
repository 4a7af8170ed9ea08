-- GCRA (generic cell rate algorithm) in Lua: the baseline for CL.THROTTLE.
--
-- Not from the seed articles (they cover token bucket and windows); this is the algorithm
-- redis-cell's CL.THROTTLE uses, written from its definition: store one "theoretical
-- arrival time" (TAT) per key. Each unit of quantity moves the TAT forward by the emission
-- interval (period / count); a call is admitted if the new TAT is at most `burst tolerance`
-- ahead of now, where the tolerance is (max_burst + 1) emission intervals.
--
-- KEYS[1] the TAT (a string)   ARGV: max_burst, count, period (seconds), [quantity = 1]
-- Reply, shaped like CL.THROTTLE's:
--   {limited (0 = admitted), limit, remaining, retry_after_s (-1 if admitted), reset_after_s}
--
-- How it differs from CL.THROTTLE: float microseconds from TIME, the TAT stored as decimal
-- text with a PX expiry, no argument validation.

local max_burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period_us = tonumber(ARGV[3]) * 1000000
local quantity = tonumber(ARGV[4]) or 1

local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local interval = period_us / count
local tolerance = interval * (max_burst + 1)
local limit = max_burst + 1

local tat = tonumber(redis.call('GET', KEYS[1])) or now_us
if tat < now_us then
  tat = now_us
end
local new_tat = tat + interval * quantity
local allow_at = new_tat - tolerance
local ahead = now_us - allow_at

if ahead < 0 then
  local retry_s = -1
  if quantity <= limit then
    retry_s = math.ceil(-ahead / 1000000)
  end
  return {1, limit, 0, retry_s, math.ceil((tat - now_us) / 1000000)}
end

redis.call('SET', KEYS[1], string.format('%.0f', new_tat),
  'PX', math.max(1, math.ceil((new_tat - now_us) / 1000)))
return {0, limit, math.floor(ahead / interval), -1, math.ceil((new_tat - now_us) / 1000000)}
