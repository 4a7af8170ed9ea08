-- Several token buckets, all or nothing, in Lua: the baseline for RL.MULTI over token buckets.
--
-- Idea: a request usually counts against several limits at once (global, plan, user).
-- Calling token_bucket.lua once per limit charges the earlier buckets for a request a later
-- one denies, so the honest script does it in one call: one TIME for every bucket, each
-- bucket decided as token_bucket.lua decides it, and `cost` tokens taken from every bucket
-- only if every bucket has them; otherwise nothing is written.
--
-- KEYS: the N buckets (hashes)   ARGV: capacity_1, rate_1, ..., capacity_N, rate_N, [cost = 1]
-- Reply, shaped like RL.MULTI's so both send the same amount back:
--   {allowed, remaining, retry_after_ms, reset_after_ms, capacity, binding, per_limit}
--   The first five are the binding bucket's, except reset_after_ms, the largest of all;
--   binding is its 0-based index; per_limit holds each bucket's own
--   {allowed, remaining, retry_after_ms, reset_after_ms, capacity}, as if it were alone.
--   The binding bucket is RL.MULTI's: when admitted, the one with the fewest calls of this
--   cost left; when denied, the denying one with the longest wait (never = -1 is longest);
--   the lowest index on ties.
--
-- How it differs from RL.MULTI over token buckets:
--   * Floats, as in token_bucket.lua; the module uses integer nanosecond arithmetic.
--   * N HMGETs, and when admitted N HSETs and N PEXPIREs, each through redis.call argument
--     conversion; the module opens each key once and replicates one command for the call.
--   * Token buckets only; no WEIGHTS, no PARTIAL.
--   * No argument validation beyond tonumber(): bad input gives Lua errors or nonsense, and
--     a key given twice is read twice and charged twice (RL.MULTI refuses it).

local count = #KEYS
local cost = tonumber(ARGV[2 * count + 1]) or 1

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000

local per_limit, left, all_allowed = {}, {}, true
for i = 1, count do
  local capacity = tonumber(ARGV[2 * i - 1])
  local rate = tonumber(ARGV[2 * i])
  local stored = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local tokens = tonumber(stored[1]) or capacity
  local last_ms = tonumber(stored[2]) or now_ms
  if now_ms > last_ms then
    tokens = math.min(capacity, tokens + (now_ms - last_ms) * rate / 1000)
  end
  if tokens < cost then
    all_allowed = false
    local retry_ms = -1
    if cost <= capacity then
      retry_ms = math.max(1, math.ceil((cost - tokens) * 1000 / rate))
    end
    local reset_ms = math.ceil((capacity - tokens) * 1000 / rate)
    per_limit[i] = {0, math.floor(tokens), retry_ms, reset_ms, capacity}
  else
    left[i] = tokens - cost
    local reset_ms = math.max(1, math.ceil((capacity - left[i]) * 1000 / rate))
    per_limit[i] = {1, math.floor(left[i]), 0, reset_ms, capacity}
  end
end

local function wait(reply)
  if reply[3] < 0 then
    return math.huge
  end
  return reply[3]
end

local binding, reset_ms = nil, 0
for i, reply in ipairs(per_limit) do
  reset_ms = math.max(reset_ms, reply[4])
  if all_allowed then
    if not binding or math.floor(reply[2] / cost) < math.floor(per_limit[binding][2] / cost) then
      binding = i
    end
  elseif reply[1] == 0 and (not binding or wait(reply) > wait(per_limit[binding])) then
    binding = i
  end
end

if all_allowed then
  for i = 1, count do
    redis.call('HSET', KEYS[i], 'tokens', left[i], 'ts', now_ms)
    redis.call('PEXPIRE', KEYS[i], per_limit[i][4])
  end
end

local bound = per_limit[binding]
return {bound[1], bound[2], bound[3], reset_ms, bound[5], binding - 1, per_limit}
