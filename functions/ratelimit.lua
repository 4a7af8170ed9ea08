#!lua name=ratelimit
-- redis-ratelimit as a Redis Functions library: the module's commands, with its exact
-- arithmetic, for servers that cannot load the module (managed Redis, Valkey services).
--
--   redis-cli -x FUNCTION LOAD REPLACE < functions/ratelimit.lua
--   FCALL rl_tokenbucket 1 key capacity rate [cost] [PARTIAL [MIN m] | MAXWAIT ms]
--
-- One function per command, same arguments, same replies, same errors as the module
-- (README, "Without the module"). Where EVAL is allowed but FUNCTION is not, the same file
-- minus its first line is a script: EVALSHA sha numkeys key ... function_name arg ...
--
-- Exactness. Lua numbers are doubles, exact for integers up to 2^53. The module's instants
-- are Unix nanoseconds (about 2^61), so an instant is held as whole seconds plus
-- nanoseconds, and every computation works on durations relative to the call's `now`,
-- which stay below 2^53. Products that can exceed 2^53 (a count times a window in
-- microseconds) go through `muldiv`, which is exact for any operands below 2^53. Every
-- rounding rule of the module is copied: durations and expiries round up. The few inputs
-- whose arithmetic would leave that range are refused with an error that says so, never
-- computed approximately (see LIBRARY LIMITS below).
--
-- Storage. A limiter is one key of a plain Redis type, expiring at the millisecond the
-- module's key would: a string "<kind> <a> <b> <c> <x>" (written with SET ... PXAT, one
-- command) for the token bucket, windows and GCRA; a string "sl <records><trailer>" for a
-- sliding log (fixed-width records and trailer, read with GETRANGE and written with SETRANGE
-- a few bytes at a time: see "Sliding log" below; a log of the library's first version,
-- "sl <as_of> <t:n,...> - <x>", is read and rewritten in this form); and a sorted set (score
-- = expiry in µs, member = holder) for an in-flight limit. A key of another type, a string
-- that is not a limiter (any the library could not have written: a negative or non-numeric
-- count, a field too long to be exact, a log whose counts do not add up), or one of the
-- module's keys, is refused with WRONGTYPE and left alone.
--
-- Cost. In this interpreter a Lua call, a table, a new string or a number formatted costs
-- hundreds to thousands of instructions, so each command's common case has a fast path
-- (tb_fast, fw_fast, sw_fast, gc_fast, sl_fast, acquire/release on Redis's sorted-set
-- commands) doing the general path's operations inline, in the same order; what it does not
-- handle goes to the general path, which it has not written to. Arguments to redis.call
-- are strings (Redis converts numbers with a 17-digit printf). The most called paths also
-- save calls and tables: TIME read inline, the last parameters compared before the memo,
-- one pcall around each command (no wrapper), one reply table refilled (sl_fast, acquire).
--
-- Clock. The module reads whole milliseconds on Redis 7.0/7.1 and the cached microsecond
-- clock on 7.2+; the library reads TIME once per call and follows the same rule.

-- Loading a library runs with no standard library at hand (string, math, table are
-- absent until a function is called), so the library is built on its first call and kept.
local function build()

local floor, fmod, huge = math.floor, math.fmod, math.huge
local format, sub, byte, find, match = string.format, string.sub, string.byte, string.find, string.match
local concat = table.concat

local TWO53 = 9007199254740992
-- LIBRARY LIMITS: the longest duration in nanoseconds the library computes with (2^52,
-- about 52 days), so that a sum of two such durations is still exact.
local MAX_DURATION_NS = 4503599627370496
local LIBRARY = ' in the ratelimit library (Lua numbers are exact only to 2^53); the module accepts more'

local NS_PER_S = 1000000000
local MAX_REFILL_NS = 3155760000000000000 -- 100 Julian years, as a double (for messages)
local MAX_WINDOW_US = 3155760000000000
local MIN_WINDOW_US = 1000
local MAX_WAIT_MS = 86400000
local MAX_LOG_ENTRIES = 10000 -- the module's ratelimit.max-log-entries default
local MAX_HOLDERS = 1000      -- the module's ratelimit.max-holders default
local MAX_KEYS = 16
local U64_MAX = '18446744073709551615'
local I64_MAX = '9223372036854775807'
local I64_MIN_DIGITS = '9223372036854775808'

local MS_CLOCK = redis.REDIS_VERSION_NUM < 0x070200

-- BEGIN GENERATED: kinds (written by make generate (cargo run -p redis-ratelimit-wire --example generate), from core/src/kinds.rs (kinds!) and wire/src/commands.rs (commands!); do not edit)
-- How errors name each kind, by the tag its keys are stored under.
local NAMES = {
  tb = 'a token bucket',
  sw = 'a sliding window',
  fw = 'a fixed window',
  sl = 'a sliding log',
  gcra = 'a CL.THROTTLE (GCRA)',
  cc = 'an in-flight limit',
}
-- The ALGORITHM words of RL.MULTI, RL.PEEK, RL.REFUND, RL.REGIONAL: their kinds' tags.
local ALGORITHMS = {
  TOKENBUCKET = 'tb',
  SLIDING = 'sw',
  FIXED = 'fw',
  SLIDINGLOG = 'sl',
  GCRA = 'gcra',
  CONCURRENCY = 'cc',
}
local ALGORITHM_NAMES = 'TOKENBUCKET, SLIDING, FIXED, SLIDINGLOG, GCRA or CONCURRENCY'
-- How many parameter arguments each kind takes, in its command and in RL.MULTI.
local PARAM_COUNT = {tb = 2, sw = 2, fw = 2, sl = 2, gcra = 3, cc = 2}
-- END GENERATED: kinds
local WRONG_TYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'

-- Errors -----------------------------------------------------------------------------

-- Raised with a table so that the entry point tells them from bugs.
local function fail(message) error({message}, 0) end

local function quote(value)
  local out = {}
  local n = #value
  for i = 1, (n < 32 and n or 32) do
    local b = byte(value, i)
    out[#out + 1] = (b >= 32 and b < 127) and string.char(b) or '?'
  end
  local text = concat(out)
  if n > 32 then text = text .. '...' end
  return text
end

local function arg_error(name, rule, value)
  if value then fail(format("ERR %s %s (got '%s')", name, rule, quote(value))) end
  fail(format('ERR %s %s', name, rule))
end

local function arity(command) fail(format("ERR wrong number of arguments for '%s' command", command)) end

-- Integer arithmetic on doubles --------------------------------------------------------

local TWO52 = 4503599627370496

-- Below 2^52 the divisions use the VM's `%` (a − floor(a/b) × b, exact there but for a
-- quotient rounded up by one, which they correct: the floored remainder, in [0, b)), which
-- costs no call; beyond, fmod (C's, the sign of a), which is always exact.

-- floor(a / b) for b > 0, exact for integers below 2^53.
local function fdiv(a, b)
  if a < TWO52 and a > -TWO52 and b < TWO52 then
    local r = a % b
    if r >= b then r = r - b elseif r < 0 then r = r + b end
    return (a - r) / b
  end
  local r = fmod(a, b)
  local q = (a - r) / b
  if r < 0 then q = q - 1 end
  return q
end

-- ceil(a / b) for b > 0.
local function cdiv(a, b)
  if a < TWO52 and a > -TWO52 and b < TWO52 then
    local r = a % b
    if r >= b then r = r - b elseif r < 0 then r = r + b end
    if r > 0 then return (a - r) / b + 1 end
    return (a - r) / b
  end
  local r = fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

-- a / b truncated towards zero, b > 0.
local function tdiv(a, b)
  if a < TWO52 and a > -TWO52 and b < TWO52 then
    local r = a % b
    if r >= b then r = r - b elseif r < 0 then r = r + b end
    if a < 0 and r > 0 then return (a - r) / b + 1 end
    return (a - r) / b
  end
  return (a - fmod(a, b)) / b
end

-- floor(a × b / c) and whether it had a remainder, exact for integers 0 ≤ a, b < 2^53,
-- 0 < c < 2^53 whose quotient is below 2^53. Products below 2^53 are exact as they are;
-- larger ones are computed bit by bit, keeping the remainder below c.
local function muldiv(a, b, c)
  local p = a * b
  if p < TWO53 then
    local r = fmod(p, c)
    return (p - r) / c, r > 0
  end
  if a > b then a, b = b, a end
  local bq, br = fdiv(b, c), fmod(b, c)
  local bits = {}
  while a > 0 do
    local bit = fmod(a, 2)
    bits[#bits + 1] = bit
    a = (a - bit) / 2
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q = q + q
    if r >= c - r then r = r - (c - r); q = q + 1 else r = r + r end
    if bits[i] == 1 then
      q = q + bq
      if r >= c - br then r = r - (c - br); q = q + 1 else r = r + br end
    end
  end
  return q, r > 0
end

local function muldiv_ceil(a, b, c)
  local q, rest = muldiv(a, b, c)
  if rest then return q + 1 end
  return q
end

-- Milliseconds, rounded up, in a duration of `d` units of which `per` make a millisecond.
local function ceil_ms(d, per)
  if d <= 0 then return 0 end
  return cdiv(d, per)
end

local function int(x) return format('%d', x) end

-- Instants in nanoseconds: whole seconds and nanoseconds. --------------------------------

-- An instant `rel` ns from (s, n), as (seconds, nanoseconds).
local function shift(s, n, rel)
  local t = n + rel
  local off = fdiv(t, NS_PER_S)
  return s + off, t - off * NS_PER_S
end

local function ns_string(s, n)
  if s == 0 then return int(n) end
  return format('%d%09d', s, n)
end

-- The Unix millisecond, rounded up, of an instant (never 0: 0 would mean no expiry).
local function expiry_ms_ns(s, n)
  local ms = s * 1000 + cdiv(n, 1000000)
  if ms < 1 then return 1 end
  return ms
end

local function expiry_ms_us(us)
  local ms = cdiv(us, 1000)
  if ms < 1 then return 1 end
  return ms
end

-- A stored instant (decimal ns) relative to now (s, n), in ns; nil when it is more than
-- MAX_DURATION_NS away (the caller decides what that means).
local function relative(stored, s, n)
  local len = #stored
  local ss, sn
  if len > 9 then
    ss, sn = tonumber(sub(stored, 1, len - 9)), tonumber(sub(stored, len - 8))
  else
    ss, sn = 0, tonumber(stored)
  end
  local ds = ss - s
  if ds > 4503599 or ds < -4503599 then return nil, ds > 0 end
  return ds * NS_PER_S + (sn - n)
end

local function clock_behind()
  fail('ERR the server clock is more than 52 days behind this limiter\'s state: the ratelimit library cannot compute it exactly (delete the key, or use the module)')
end

-- Numbers, parsed as the module parses them ------------------------------------------------

local function is_digit(b) return b >= 48 and b <= 57 end

local function non_finite(text)
  local t = string.lower(text)
  return t == 'nan' or t == 'inf' or t == 'infinity'
end

-- The module's unsigned_part: nil when fine, else the NumberError name.
local function unsigned_part(text)
  local first = byte(text, 1)
  if first and (is_digit(first) or first == 46) then return nil end
  local unsigned = text
  if first == 45 or first == 43 then unsigned = sub(text, 2) end
  if non_finite(unsigned) then return 'NotFinite' end
  if first == 45 then
    if #unsigned > 0 and not find(unsigned, '[^0-9.eE]') then return 'Negative' end
    return 'Malformed'
  end
  return 'Malformed'
end

local RULES = {
  NotFinite = 'must be a finite number', Negative = 'must be greater than 0',
  Zero = 'must be greater than 0', TooLarge = 'is too large',
}

-- Digits without leading zeros, compared as numbers.
local function strip_zeros(digits)
  local s = string.match(digits, '^0*(.*)$')
  return s
end

local function digits_above(digits, bound)
  if #digits ~= #bound then return #digits > #bound end
  return digits > bound
end

-- parse_positive_integer: the value, or nil and the NumberError.
local function parse_positive(text)
  local problem = unsigned_part(text)
  if problem then return nil, problem end
  local bad = find(text, '[^0-9]')
  local prefix = strip_zeros(bad and sub(text, 1, bad - 1) or text)
  if digits_above(prefix, U64_MAX) then return nil, 'TooLarge' end
  if bad or #text == 0 then return nil, 'Malformed' end
  if prefix == '' then return nil, 'Zero' end
  return prefix
end

-- A positive integer argument: its value (exact), or the module's error; values the module
-- accepts but that are not exact as doubles are refused.
local function positive_integer(name, text)
  local digits, problem = parse_positive(text)
  if not digits then arg_error(name, RULES[problem] or 'must be a positive integer', text) end
  if digits_above(digits, '9007199254740992') then
    arg_error(name, 'must be at most 9007199254740992' .. LIBRARY, text)
  end
  return tonumber(digits)
end

-- parse_integer (CL.THROTTLE's signed arguments).
local function integer(name, text)
  local first = byte(text, 1)
  local negative, digits = false, text
  if first == 45 then negative, digits = true, sub(text, 2)
  elseif first == 43 then digits = sub(text, 2) end
  if non_finite(digits) then arg_error(name, 'must be a finite number', text) end
  if #digits == 0 then arg_error(name, 'must be an integer', text) end
  local bad = find(digits, '[^0-9]')
  local prefix = strip_zeros(bad and sub(digits, 1, bad - 1) or digits)
  if digits_above(prefix, negative and I64_MIN_DIGITS or I64_MAX) then
    arg_error(name, 'is too large', text)
  end
  if bad then arg_error(name, 'must be an integer', text) end
  return (negative and -1 or 1) * (tonumber(prefix) or 0), prefix
end

-- Decimal::parse_positive: significant digits (no leading or trailing zeros) and exponent.
local U128_MAX = '340282366920938463463374607431768211455'
local function parse_decimal(text)
  local problem = unsigned_part(text)
  if problem then return nil, problem end
  local digits, pending, fraction, written = '', 0, 0, 0
  local seen, in_fraction = false, false
  local i, n = 1, #text
  while i <= n do
    local b = byte(text, i)
    if b == 48 then
      pending = pending + 1
      if in_fraction then fraction = fraction + 1 end
      seen = true
    elseif b >= 49 and b <= 57 then
      if pending + 1 > 38 then return nil, 'TooLarge' end
      if digits ~= '' then digits = digits .. string.rep('0', pending) end
      digits = digits .. string.char(b)
      if digits_above(digits, U128_MAX) then return nil, 'TooLarge' end
      pending = 0
      if in_fraction then fraction = fraction + 1 end
      seen = true
    elseif b == 46 and not in_fraction then
      in_fraction = true
    elseif (b == 101 or b == 69) and seen then
      local tail = sub(text, i + 1)
      local sign = byte(tail, 1)
      local negative = sign == 45
      if sign == 45 or sign == 43 then tail = sub(tail, 2) end
      if #tail == 0 then return nil, 'Malformed' end
      if #tail > 6 then return nil, 'TooLarge' end
      if find(tail, '[^0-9]') then return nil, 'Malformed' end
      written = tonumber(tail) * (negative and -1 or 1)
      break
    else
      return nil, 'Malformed'
    end
    i = i + 1
  end
  if not seen then return nil, 'Malformed' end
  if digits == '' then return nil, 'Zero' end
  return digits, written + pending - fraction
end

local function positive_decimal(name, text)
  local digits, exponent = parse_decimal(text)
  if not digits then arg_error(name, RULES[exponent] or 'must be a positive decimal number', text) end
  return digits, exponent
end

-- Whether digits × 10^exponent > 10^power.
local function exceeds_power_of_ten(digits, exponent, power)
  local shift_by = power - exponent
  if shift_by < 0 then return true end
  if #digits ~= shift_by + 1 then return #digits > shift_by + 1 end
  return digits ~= '1' .. string.rep('0', shift_by)
end

-- Seconds as a decimal, in µs rounded up (the module's duration_us).
local function duration_us(name, text)
  local digits, exponent = positive_decimal(name, text)
  local e, us = exponent + 6, nil
  local L = #digits
  if e >= 0 then
    if L + e <= 16 then
      local whole = digits .. string.rep('0', e)
      if not digits_above(whole, '3155760000000000') then us = tonumber(whole) end
    end
  else
    local f = -e
    if L <= f then us = 1
    elseif L - f <= 16 then
      local whole = sub(digits, 1, L - f)
      if not digits_above(whole, '3155759999999999') then us = tonumber(whole) + 1 end
    end
  end
  if us and us < MIN_WINDOW_US then arg_error(name, 'must be at least 0.001 seconds (1 ms)', text) end
  if not us then arg_error(name, 'must be at most 3155760000 seconds (100 years)', text) end
  return us
end

-- Parameters -------------------------------------------------------------------------------
-- A quota is a table {kind, cost, ...}; `with_cost` copies it with another cost.

local function with_cost(q, cost)
  local c = {}
  for key, value in pairs(q) do c[key] = value end
  if cost < 1 then cost = 1 end
  c.cost = cost
  return c
end

local function token_bucket_params(capacity_arg, rate_arg)
  local capacity_digits, problem = parse_positive(capacity_arg)
  if not capacity_digits then
    arg_error('capacity', RULES[problem] or 'must be a positive integer', capacity_arg)
  end
  local capacity = tonumber(capacity_digits)
  local digits, exponent = positive_decimal('rate', rate_arg)
  if exceeds_power_of_ten(digits, exponent, 9) then
    arg_error('rate', 'must be at most 1000000000 tokens per second', rate_arg)
  end
  local too_long = function()
    arg_error('capacity / rate', 'must be at most 100 years (the time an empty bucket takes to refill)')
  end
  -- interval = ceil(10^k / D), k = 9 - exponent ≥ 0.
  local k = 9 - exponent
  local approx = 10 ^ k / tonumber(digits)
  if approx ~= approx or approx * capacity > MAX_REFILL_NS * 1.000001 or (exponent < 0 and -exponent > 29) then
    too_long()
  end
  local library_refusal = function()
    arg_error('capacity / rate', 'must be at most 4503599627370496 ns (52 days)' .. LIBRARY)
  end
  if #digits > 14 or #capacity_digits > 16 then
    if approx * capacity > MAX_REFILL_NS then too_long() end
    if #digits > 14 then arg_error('rate', 'must have at most 14 significant digits' .. LIBRARY, rate_arg) end
    library_refusal()
  end
  local d = tonumber(digits)
  local q, r, interval = 0, 0, nil
  for i = 0, k do
    r = r * 10 + (i == 0 and 1 or 0)
    local digit = fdiv(r, d)
    q = q * 10 + digit
    r = r - digit * d
    if q > TWO53 then break end
  end
  if q <= TWO53 then interval = q + (r > 0 and 1 or 0) end
  local refill = interval and interval * capacity
  if not refill or refill > MAX_DURATION_NS then
    if approx * capacity > MAX_REFILL_NS then too_long() end
    library_refusal()
  end
  local interval_s = int(interval)
  return {kind = 'tb', capacity = capacity, interval = interval, interval_s = interval_s,
          tail = ' ' .. interval_s .. ' - -', refill = refill, cost = 1, max_wait = 0}
end

local function window_params(kind, limit_arg, window_arg)
  local limit_digits, problem = parse_positive(limit_arg)
  if not limit_digits then arg_error('limit', RULES[problem] or 'must be a positive integer', limit_arg) end
  local window = duration_us('window', window_arg)
  local limit = tonumber(limit_digits)
  if kind == 'sl' then
    if digits_above(limit_digits, tostring(MAX_LOG_ENTRIES)) then
      arg_error('limit', format('must be at most %d (the ratelimit.max-log-entries setting)', MAX_LOG_ENTRIES), limit_arg)
    end
  elseif digits_above(limit_digits, '4294967295') then
    arg_error('limit', 'must be at most 4294967295', limit_arg)
  end
  -- window_ms: the window in milliseconds rounded up, the reset of a log admitting now.
  return {kind = kind, limit = limit, window = window, window_ms = cdiv(window, 1000), cost = 1}
end

local function gcra_params(burst_arg, count_arg, period_arg)
  local max_burst, burst_digits = integer('max_burst', burst_arg)
  local count, count_digits = integer('count', count_arg)
  local period, period_digits = integer('period', period_arg)
  if count == 0 or period == 0 then
    arg_error('count / period', 'must be a non-zero rate of at most 1e9 per second (zero rates are not supported)')
  end
  for _, pair in ipairs({{'max_burst', burst_digits, burst_arg}, {'count', count_digits, count_arg}, {'period', period_digits, period_arg}}) do
    if digits_above(pair[2], '9007199254740992') then
      arg_error(pair[1], 'must be at most 9007199254740992 in magnitude' .. LIBRARY, pair[3])
    end
  end
  -- As redis-cell: (period × 1e9 as f64) / (count as f64), truncated.
  local interval = (period * 1e9) / count
  if interval >= 0 then interval = floor(interval) else interval = -floor(-interval) end
  if interval == 0 then
    arg_error('count / period', 'must be a non-zero rate of at most 1e9 per second (zero rates are not supported)')
  end
  if interval < 0 then arg_error('count and period', 'must have the same sign') end
  if max_burst < 0 then arg_error('max_burst', 'must be at least 0', burst_arg) end
  local tolerance = interval * (max_burst + 1)
  if tolerance > MAX_REFILL_NS then
    arg_error('period / count * (max_burst + 1)', 'must be at most 100 years')
  end
  if tolerance > MAX_DURATION_NS then
    arg_error('period / count * (max_burst + 1)', 'must be at most 4503599627370496 ns (52 days)' .. LIBRARY)
  end
  return {kind = 'gcra', max_burst = max_burst, interval = interval, interval_us = tdiv(interval, 1000),
          tolerance = tolerance, cost = 1}
end

local function concurrency_params(limit_arg, ttl_arg)
  local limit_digits, problem = parse_positive(limit_arg)
  if not limit_digits then arg_error('limit', RULES[problem] or 'must be a positive integer', limit_arg) end
  local ttl_digits, ttl_problem = parse_positive(ttl_arg)
  if not ttl_digits then arg_error('ttl_ms', RULES[ttl_problem] or 'must be a positive integer', ttl_arg) end
  if digits_above(limit_digits, tostring(MAX_HOLDERS)) then
    arg_error('limit', format('must be at most %d (the ratelimit.max-holders setting)', MAX_HOLDERS), limit_arg)
  end
  if digits_above(ttl_digits, '3155760000000') then
    arg_error('ttl_ms', 'must be at most 3155760000000 (100 years)', ttl_arg)
  end
  return {kind = 'cc', limit = tonumber(limit_digits), ttl = tonumber(ttl_digits) * 1000, cost = 1}
end

local function holder_id(id)
  if #id < 1 or #id > 128 then arg_error('holder', 'must be 1 to 128 bytes', id) end
  return id
end

local function quota(kind, a, i)
  if kind == 'tb' then return token_bucket_params(a[i], a[i + 1])
  elseif kind == 'gcra' then return gcra_params(a[i], a[i + 1], a[i + 2])
  elseif kind == 'cc' then return concurrency_params(a[i], a[i + 1])
  elseif kind == 'fw' or kind == 'sw' or kind == 'sl' then return window_params(kind, a[i], a[i + 1])
  end
  -- A kind of the generated table without its twin here: say so, never guess its parameters.
  fail('ERR the Functions library has no twin of kind ' .. kind)
end

local function algorithm(name)
  local kind = ALGORITHMS[string.upper(name)]
  if not kind then
    arg_error('algorithm', 'must be ' .. ALGORITHM_NAMES, name)
  end
  return kind
end

local function upper_is(arg, word) return arg ~= nil and string.upper(arg) == word end

local function is_option(arg) return upper_is(arg, 'PARTIAL') or upper_is(arg, 'MAXWAIT') end

-- PARTIAL [MIN m] after position i (the PARTIAL itself): min and the next position.
local function partial(a, i, cost, command)
  if upper_is(a[i + 1], 'MIN') then
    if a[i + 2] == nil then arity(command) end
    local at_least = positive_integer('MIN', a[i + 2])
    if at_least > cost then arg_error('MIN', 'must be at most the cost', a[i + 2]) end
    return at_least, i + 3
  end
  return 1, i + 1
end

-- The parameters, then [cost], from position i: the quota and the next position.
local function with_cost_arg(kind, a, i, command)
  local count = PARAM_COUNT[kind]
  if #a - i + 1 < count then arity(command) end
  local q = quota(kind, a, i)
  i = i + count
  local cost = a[i]
  if cost ~= nil and not is_option(cost) then
    q.cost = positive_integer('cost', cost)
    i = i + 1
  end
  return q, i
end

local function max_wait(q, wait)
  local too_long = function() arg_error('MAXWAIT', 'must be at most 86400000 ms (1 day)', wait) end
  if q.kind ~= 'tb' then fail('ERR MAXWAIT paces token buckets only (RL.TOKENBUCKET)') end
  local digits, problem = parse_positive(wait)
  local ms
  if digits then ms = digits
  elseif problem == 'Zero' then ms = '0'
  elseif problem == 'TooLarge' then too_long()
  elseif problem == 'Negative' then arg_error('MAXWAIT', 'must be at least 0', wait)
  else arg_error('MAXWAIT', RULES[problem] or 'must be a whole number of milliseconds', wait) end
  if digits_above(ms, tostring(MAX_WAIT_MS)) then too_long() end
  q.max_wait = tonumber(ms) * 1000000
end

-- A single-key call: the quota and the minimum of a partial grant (nil: all or nothing).
local function call_args(kind, a, i, command)
  local q
  q, i = with_cost_arg(kind, a, i, command)
  local min, waited = nil, false
  while a[i] ~= nil do
    local option = a[i]
    if min == nil and upper_is(option, 'PARTIAL') then
      min, i = partial(a, i, q.cost, command)
    elseif not waited and upper_is(option, 'MAXWAIT') then
      if a[i + 1] == nil then arity(command) end
      max_wait(q, a[i + 1])
      waited, i = true, i + 2
    else
      arg_error('option', kind == 'tb' and 'must be PARTIAL [MIN m] or MAXWAIT ms' or 'must be PARTIAL [MIN m]', option)
    end
  end
  if waited and min ~= nil then arg_error('PARTIAL and MAXWAIT', 'must not be combined') end
  if q.cost > TWO53 then arg_error('cost', 'must be at most 9007199254740992' .. LIBRARY) end
  return q, min
end

-- The last parameters each command parsed, remembered as the module remembers them: parsing
-- exactly, digit by digit, costs more than deciding, and a service sends the same parameters
-- call after call. A parsed quota is never changed afterwards (`with_cost` copies it).
-- The last call's arguments (up to three, no keys: a single-key command's common case) are
-- compared first: walking the tree costs more than three string compares.
local MEMO_SIZE = 256
local PARSED = 0 -- the key of a parse result in the tree (arguments are strings)
local function remembered(parse)
  local root, size = {}, 0
  local last_n, last1, last2, last3, last_q, last_min = -1, nil, nil, nil, nil, nil
  return function(a, keys)
    local n = #a
    if n == last_n and keys == nil and a[1] == last1 and a[2] == last2 and a[3] == last3 then
      return last_q, last_min
    end
    -- A tree of the arguments, one level per argument (then the key count, if any).
    local node = root
    for i = 1, #a do
      node = node[a[i]]
      if node == nil then break end
    end
    if node and keys then
      -- Only the key count shapes a parse: key names appear in errors alone, never kept.
      node = node[PARSED + 1]
      node = node and node[#keys]
    end
    local hit = node and node[PARSED]
    local q, min
    if hit then q, min = hit[1], hit[2]
    else
      q, min = parse(a, keys)
      if size >= MEMO_SIZE then root, size = {}, 0 end
      node = root
      for i = 1, #a do
        local next_node = node[a[i]]
        if next_node == nil then next_node = {}; node[a[i]] = next_node end
        node = next_node
      end
      if keys then
        local next_node = node[PARSED + 1]
        if next_node == nil then next_node = {}; node[PARSED + 1] = next_node end
        node = next_node
        next_node = node[#keys]
        if next_node == nil then next_node = {}; node[#keys] = next_node end
        node = next_node
      end
      node[PARSED] = {q, min}
      size = size + 1
    end
    if n <= 3 and keys == nil then last_n, last1, last2, last3, last_q, last_min = n, a[1], a[2], a[3], q, min end
    return q, min
  end
end

-- Reading keys -----------------------------------------------------------------------------

-- A key's limiter: nil (missing), or {kind, a, b, c} (hash kinds) or {kind = 'cc', holders}
-- (holders: {expiry_us, id} in order, expired ones included).
local function refine_wrong_type(key)
  local t = redis.call('TYPE', key)
  t = t.ok or t
  if t == 'ratelimit' then
    fail('WRONGTYPE key holds a limiter of the ratelimit module: call its RL.* command or delete the key')
  end
  return t
end

local function zset_state(reply, key)
  local holders = {}
  for j = 1, #reply, 2 do holders[#holders + 1] = {tonumber(reply[j + 1]), reply[j]} end
  return {kind = 'cc', holders = holders, key = key}
end

-- Sorted sets of the user's. An in-flight limit is a sorted set of plain type, so the library
-- tells its own from a user's only by what its writes leave: every write of one leaves it
-- expiring at its last holder's millisecond (rounded up), its scores whole µs. A sorted set
-- with no expiry is none of them: every in-flight call refuses it with WRONGTYPE, as the
-- module refuses every key of another type (before writing anything; checked where the
-- call reads the key's expiry anyway: rl_acquire's PEXPIREAT ... GT, rl_release's
-- PEXPIRETIME; one more call only where neither is made).
-- One the user gave an expiry is taken for an in-flight limit: a limit of plain types.
local function limit_expiry(key)
  local at = redis.call('PEXPIRETIME', key)
  if at == -1 then fail(WRONG_TYPE) end
  return at
end

-- Whether a sorted set read whole is one of the library's in-flight limits, as far as its
-- scores and expiry tell (the other commands answer WRONGTYPE for any other sorted set,
-- and "key holds an in-flight limit" for one of these, as the module does for its own).
local function own_zset(state)
  local last = 0
  for _, h in ipairs(state.holders) do
    local score = h[1]
    if score ~= floor(score) then return false end
    if score > last then last = score end
  end
  return redis.call('PEXPIRETIME', state.key) == expiry_ms_us(last)
end

-- The sliding log's storage (described with its algorithm, below).
local RECORD = 32
local SL_TRAILER = 98

local NO_X = '----------------'
local function sl_trailer(at, count, dead, base, oldest, x)
  if x == 0 then return format('|%016d%016d%016d%016d%016d ', at, count, dead, base, oldest) .. NO_X end
  return format('|%016d%016d%016d%016d%016d %016d', at, count, dead, base, oldest, x)
end

-- The state of a log from the string s whose trailer starts at p: s is the whole value
-- (`full`) or its last record and trailer (read with GETRANGE from `key`). False when the
-- trailer is not one, nil when field x says the log is gone.
local function sl_state(s, p, full, key, now)
  -- What the library writes: '|', five fields of 16 digits, a space, field x (16 digits or
  -- NO_X), after a last record of 32 digits when there are records; the records' counts
  -- reach at least the count before the first live one. Anything else is not a log.
  if byte(s, p) ~= 124 or find(s, '%D', p + 1) ~= p + 81 or byte(s, p + 81) ~= 32 then return false end
  local count = sub(s, p + 17, p + 32) + 0
  local x = sub(s, p + 82, p + 97)
  if x == NO_X then x = 0
  elseif #x == 16 and not find(x, '%D') then x = x + 0
  else return false end
  if x > 0 and x * 1000 < now.us - now.us % 1000 then return nil end
  local st = {kind = 'sl', as_of = sub(s, p + 1, p + 16) + 0, count = count,
              dead = sub(s, p + 33, p + 48) + 0, base = sub(s, p + 49, p + 64) + 0,
              oldest = sub(s, p + 65, p + 80) + 0, full = full, key = key, t_last = 0, cum_last = 0}
  if st.dead > count then return false end
  if count > 0 then
    if p <= 32 or find(s, '%D', p - 32) ~= p then return false end
    st.t_last, st.cum_last = sub(s, p - 32, p - 17) + 0, sub(s, p - 16, p - 1) + 0
    if st.base > st.cum_last then return false end
  end
  return st
end

-- A whole value that starts with 'sl ': a log, or one of the library's first version
-- ("sl <as_of> <runs t:n,t:n,... or -> - <x>"), converted (and rewritten by its next write).
local function sl_value_state(value, now)
  local n = #value
  if n >= 3 + SL_TRAILER and (n - 3 - SL_TRAILER) % RECORD == 0 then
    local st = sl_state(value, n - SL_TRAILER + 1, value, nil, now)
    if st == false or (st and st.count ~= (n - 3 - SL_TRAILER) / RECORD) then fail(WRONG_TYPE) end
    return st
  end
  local as_of, runs, x = match(value, '^sl (%d+) (%S+) %- (%S+)$')
  if not as_of or (x ~= '-' and find(x, '%D')) then fail(WRONG_TYPE) end
  if x ~= '-' and x * 1000 < now.us - now.us % 1000 then return nil end
  local records, cum, oldest = {}, 0, 0
  for t, units in string.gmatch(runs, '(%d+):(%d+)') do
    cum = cum + units
    if oldest == 0 then oldest = t + 0 end
    records[#records + 1] = format('%016d%016d', t, cum)
  end
  local converted = 'sl ' .. concat(records) .. sl_trailer(as_of, #records, 0, 0, oldest, 0)
  local st = sl_state(converted, #converted - SL_TRAILER + 1, converted, nil, now)
  st.legacy = true
  return st
end

-- Whether `text` is 1 to `most` digits.
local function digits(text, most) return #text <= most and not find(text, '%D') and text ~= '' end

-- Whether fields a, b, c are what the library writes for `kind`: instants in ns (whole
-- seconds, possibly negative, then 9 digits), window starts in µs, counts (at most a
-- window's largest limit, 4294967295: 10 digits), a refill interval of at least 1 ns, '-'
-- for a field the kind does not use. A value the library did not write (a negative count,
-- a field that is not a number, one too long to be exact) is none of its limiters.
local function string_fields(kind, a, b, c)
  if kind == 'fw' then return digits(a, 16) and digits(b, 10) and c == '-' end
  if kind == 'sw' then return digits(a, 16) and digits(b, 10) and digits(c, 10) end
  local instant = #a <= 21 and find(a, '^%-?%d+$') ~= nil
  if kind == 'tb' then return instant and digits(b, 16) and find(b, '[1-9]') ~= nil and c == '-' end
  if kind == 'gcra' then return instant and b == '-' and c == '-' end
  return false
end

-- A limiter in a string: "<kind> <a> <b> <c> <x>", '-' for a field it does not use. Field
-- x is set only on a limiter back to unused at the very millisecond of its write (see
-- `commit`): it is gone once that millisecond has passed. A string that does not parse as
-- one the library writes is not a limiter (WRONGTYPE, as the module answers for any string).
local function string_state(value, now)
  local b1, b2, b3 = byte(value, 1, 3)
  if b1 == 115 and b2 == 108 and b3 == 32 then return sl_value_state(value, now) end
  local kind, a, b, c, x = string.match(value, '^(%l+) (%S+) (%S+) (%S+) (%S+)$')
  if not kind or not string_fields(kind, a, b, c) or (x ~= '-' and not digits(x, 16)) then
    fail(WRONG_TYPE)
  end
  if x ~= '-' then
    x = tonumber(x)
    if x * 1000 < now.us - fmod(now.us, 1000) then return nil end
  else
    x = nil
  end
  return {kind = kind, a = a, b = b, c = c, x = x}
end

-- The limiter of a string key's GET reply (as `open` reads it): the fast paths read the key
-- themselves and come here for everything they do not handle.
local function string_reply_state(key, reply, now)
  if not reply then return nil end
  if not reply.err then return string_state(reply, now) end
  if refine_wrong_type(key) == 'zset' then
    return zset_state(redis.call('ZRANGE', key, '0', '-1', 'WITHSCORES'), key)
  end
  fail(WRONG_TYPE)
end

-- Opens a key, expecting `kind` (which only chooses the read tried first).
local function open(key, kind, now)
  if kind == 'cc' then
    local reply = redis.pcall('ZRANGE', key, '0', '-1', 'WITHSCORES')
    if not reply.err then
      if #reply == 0 then return nil end
      limit_expiry(key)
      return zset_state(reply, key)
    end
    if refine_wrong_type(key) ~= 'string' then fail(WRONG_TYPE) end
    return string_state(redis.call('GET', key), now)
  end
  return string_reply_state(key, redis.pcall('GET', key), now)
end

-- Opens a sliding log reading only its last record and trailer (GETRANGE): a value shorter
-- than those is whole (any kind's), anything else goes through `open`.
-- (Arguments to redis.call are strings: Redis converts a number with a printf of 17 digits,
-- which costs more than `format`.)
local SL_TAIL = tostring(-(SL_TRAILER + RECORD))
local function sl_read(key) return redis.pcall('GETRANGE', key, SL_TAIL, '-1') end

local function sl_open(key, now, r)
  if not r.err then
    if #r == SL_TRAILER + RECORD then
      local st = sl_state(r, RECORD + 1, nil, key, now)
      if st == nil or (st and st.count > 0) then return st end
    elseif r ~= '' then
      return string_state(r, now)
    end
  end
  return open(key, 'sl', now)
end

local function check_kind(state, kind)
  if state and state.kind ~= kind then
    local held = NAMES[state.kind]
    if not held or (state.kind == 'cc' and not own_zset(state)) then fail(WRONG_TYPE) end
    fail(format('ERR key holds %s, not %s: use the matching command or delete the key', held, NAMES[kind]))
  end
end

-- The algorithms ---------------------------------------------------------------------------
-- Each takes (state, quota, now) where now = {us = Unix µs, s = seconds, n = ns within the
-- second}, and returns a decision {allowed, remaining, retry, reset, limit} (retry: 0 now,
-- -1 never, else ms) and a write (nil: nothing to write). `grantable` gives the most units
-- a call could take.

local Algo = {}

local function decision(allowed, remaining, retry, reset, limit)
  return {allowed and 1 or 0, remaining, retry, reset, limit}
end

-- Token bucket. Instants are ns relative to now; the state is the empty instant and the
-- refill interval of one token.
local TB = {}
Algo.tb = TB

local function tb_view(state, q, now)
  local refill = q.refill
  local empty_at = -refill
  if state then
    local rel, ahead = relative(state.a, now.s, now.n)
    if rel == nil and ahead then clock_behind() end
    if state.b == q.interval_s or (rel and rel >= 0) then
      if rel and rel > empty_at then empty_at = rel end
    else
      -- The rate changed: keep the tokens accrued at the old rate, clamped to the capacity.
      local old = tonumber(state.b)
      local old_full = q.capacity * old
      local elapsed = rel and -rel
      if elapsed == nil then
        if old_full > MAX_DURATION_NS then clock_behind() end
        elapsed = huge
      end
      if elapsed < old_full then
        local rescaled = muldiv(elapsed, q.interval, old)
        if -rescaled > empty_at then empty_at = -rescaled end
      end
    end
  end
  return empty_at
end

local function tb_retry(q, empty_at)
  if q.cost > q.capacity then return -1 end
  local missing = (q.cost * q.interval - q.max_wait) + empty_at
  if missing <= 0 then return 0 end
  local ms = ceil_ms(missing, 1000000)
  if ms < 1 then ms = 1 end
  return ms
end

local function tb_decision(q, allowed, empty_at, retry)
  local remaining = 0
  if empty_at < 0 then remaining = fdiv(-empty_at, q.interval) end
  return decision(allowed, remaining, retry, ceil_ms(empty_at + q.refill, 1000000), q.capacity)
end

local function tb_write(q, empty_at, now)
  local s, n = shift(now.s, now.n, empty_at)
  local es, en = shift(s, n, q.refill)
  return {fields = {'tb', ns_string(s, n), q.interval_s, nil}, expiry = expiry_ms_ns(es, en)}
end

function TB.evaluate(state, q, now)
  local empty_at = tb_view(state, q, now)
  local retry = tb_retry(q, empty_at)
  if retry == 0 then
    empty_at = empty_at + q.cost * q.interval
    return tb_decision(q, true, empty_at, ceil_ms(empty_at, 1000000)), tb_write(q, empty_at, now)
  end
  return tb_decision(q, false, empty_at, retry), nil
end

function TB.refund(state, q, now)
  local before = tb_view(state, q, now)
  local empty_at = before - q.cost * q.interval
  if empty_at < -q.refill then empty_at = -q.refill end
  local refunded = state ~= nil and empty_at < before
  local d = tb_decision(q, refunded, empty_at, tb_retry(q, empty_at))
  return d, refunded and tb_write(q, empty_at, now) or nil
end

function TB.grantable(state, q, up_to, now)
  local within = q.max_wait - tb_view(state, q, now)
  local tokens = 0
  if within > 0 then tokens = fdiv(within, q.interval) end
  if tokens > q.capacity then tokens = q.capacity end
  if tokens > up_to then tokens = up_to end
  return tokens
end

-- Windows (µs). -----------------------------------------------------------------------------

local function window_start(t, w) return t - fmod(t, w) end -- t ≥ 0

-- Sliding window: counts of the previous and current epoch-aligned windows.
local SW = {}
Algo.sw = SW

local function sw_view(state, q, now)
  local w = q.window
  local current_start = window_start(now.us, w)
  local start, previous, current = current_start, 0, 0
  if state then
    local stored_start = window_start(tonumber(state.a), w)
    local p, c = tonumber(state.b), tonumber(state.c)
    if stored_start >= current_start then start, previous, current = stored_start, p, c
    elseif stored_start + w == current_start then previous = c end
  end
  local elapsed = now.us - start
  if elapsed < 0 then elapsed = 0 end
  return {start = start, elapsed = elapsed, previous = previous, current = current, now = now.us, w = w}
end

-- ceil(previous × (W − e) / W): the previous window's weighted share, rounded up.
local function sw_previous_share(v, previous)
  return muldiv_ceil(previous, v.w - v.elapsed, v.w)
end

local function sw_room(q, v, previous, current)
  local room = q.limit - current - sw_previous_share(v, previous)
  if room < 0 then return 0 end
  return room
end

local function sw_admits(q, v, previous, current)
  local room = q.limit - current - q.cost
  if room < 0 then return false end
  -- previous × (W − e) ≤ room × W  ⇔  ceil(previous × (W − e) / W) ≤ room.
  return sw_previous_share(v, previous) <= room
end

local function earliest_elapsed(weight, room, w)
  if weight <= room then return 0 end
  return muldiv_ceil(weight - room, w, weight)
end

local function sw_retry(q, v, previous, current)
  if q.cost > q.limit then return -1 end
  local at
  local room = q.limit - current - q.cost
  if room >= 0 then
    local e = earliest_elapsed(previous, room, v.w)
    if e <= v.elapsed then at = v.now else at = v.start + e end
  else
    at = v.start + v.w + earliest_elapsed(current, q.limit - q.cost, v.w)
  end
  if at <= v.now then return 0 end
  local ms = ceil_ms(at - v.now, 1000)
  if ms < 1 then ms = 1 end
  return ms
end

local function sw_empty_at(v, previous, current)
  if current > 0 then return v.start + 2 * v.w end
  if previous > 0 then return v.start + v.w end
  return nil
end

local function sw_decision(q, v, allowed, previous, current, retry)
  local empty = sw_empty_at(v, previous, current)
  local reset = empty and ceil_ms(empty - v.now, 1000) or 0
  return decision(allowed, sw_room(q, v, previous, current), retry, reset, q.limit)
end

local function sw_write(v, previous, current)
  return {fields = {'sw', int(v.start), int(previous), int(current)},
          expiry = expiry_ms_us(sw_empty_at(v, previous, current) or v.now)}
end

function SW.evaluate(state, q, now)
  local v = sw_view(state, q, now)
  local p, c = v.previous, v.current
  if q.cost <= q.limit and sw_admits(q, v, p, c) then
    c = c + q.cost
    return sw_decision(q, v, true, p, c, 0), sw_write(v, p, c)
  end
  return sw_decision(q, v, false, p, c, sw_retry(q, v, p, c)), nil
end

function SW.refund(state, q, now)
  local v = sw_view(state, q, now)
  local from_current = v.current < q.cost and v.current or q.cost
  local c = v.current - from_current
  local p = v.previous - (q.cost - from_current)
  if p < 0 then p = 0 end
  local refunded = c < v.current or p < v.previous
  local d = sw_decision(q, v, refunded, p, c, sw_retry(q, v, p, c))
  return d, refunded and sw_write(v, p, c) or nil
end

function SW.grantable(state, q, up_to, now)
  local v = sw_view(state, q, now)
  local room = sw_room(q, v, v.previous, v.current)
  if room > up_to then return up_to end
  return room
end

-- Fixed window.
local FW = {}
Algo.fw = FW

local function fw_view(state, q, now)
  local current = window_start(now.us, q.window)
  local start, count = current, 0
  if state then
    local stored_start = window_start(tonumber(state.a), q.window)
    if stored_start >= current then start, count = stored_start, tonumber(state.b) end
  end
  return {start = start, count = count, now = now.us, finish = start + q.window}
end

local function fw_retry(q, v, count)
  if q.cost > q.limit then return -1 end
  if count + q.cost <= q.limit then return 0 end
  local ms = ceil_ms(v.finish - v.now, 1000)
  if ms < 1 then ms = 1 end
  return ms
end

local function fw_decision(q, v, allowed, count, retry)
  local reset = 0
  if count > 0 then reset = ceil_ms(v.finish - v.now, 1000) end
  local remaining = q.limit - count
  if remaining < 0 then remaining = 0 end
  return decision(allowed, remaining, retry, reset, q.limit)
end

local function fw_write(v, count)
  return {fields = {'fw', int(v.start), int(count), nil},
          expiry = expiry_ms_us(count == 0 and v.now or v.finish)}
end

function FW.evaluate(state, q, now)
  local v = fw_view(state, q, now)
  local retry = fw_retry(q, v, v.count)
  if retry == 0 then
    local count = v.count + q.cost
    return fw_decision(q, v, true, count, 0), fw_write(v, count)
  end
  return fw_decision(q, v, false, v.count, retry), nil
end

function FW.refund(state, q, now)
  local v = fw_view(state, q, now)
  local count = v.count - q.cost
  if count < 0 then count = 0 end
  local refunded = count < v.count
  local d = fw_decision(q, v, refunded, count, fw_retry(q, v, count))
  return d, refunded and fw_write(v, count) or nil
end

function FW.grantable(state, q, up_to, now)
  local v = fw_view(state, q, now)
  local left = q.limit - v.count
  if left < 0 then left = 0 end
  if left > up_to then return up_to end
  return left
end

-- Sliding log. The string is "sl " + records + trailer, so that a call reads and writes a few
-- bytes of it, never the whole log: a record (RECORD bytes) is a run of units admitted
-- together, its instant (µs) then the count of units admitted up to and including it (16
-- digits each), oldest first; the trailer (SL_TRAILER bytes) is '|' then, in 16 digits each,
-- the log's instant (the latest call's, which the clock stepping back does not undo), the
-- number of records, how many of the first are expired (dead, kept until a rewrite), the
-- count before the first live record and the first live record's instant; then a space and
-- field x (16 digits, or 16 '-' when unset: last, after a space, as in the other strings).
-- A log with records always has a live one when written: it has none only by expiring.
-- The units in the window are a difference of two counts; the first live record (when the
-- oldest has expired) and the k-th unit are binary searches reading records with GETRANGE;
-- an admitted call writes one record and the trailer with one SETRANGE. The string is
-- rewritten (SET) only when the dead records outnumber the live ones, or a refund drops
-- whole records: O(1) amortized per unit.
local SL = {}
Algo.sl = SL

-- Record i's instant and count.
local function sl_record(v, i)
  if i == v.count then return v.t_last, v.cum_last end
  local o = 3 + (i - 1) * RECORD
  local r
  if v.full then r = sub(v.full, o + 1, o + RECORD) else r = redis.call('GETRANGE', v.key, int(o), int(o + RECORD - 1)) end
  if #r ~= RECORD or find(r, '%D') then fail(WRONG_TYPE) end
  return sub(r, 1, 16) + 0, sub(r, 17, 32) + 0
end

local function sl_view(state, q, now)
  local w = q.window
  local v = {at = now.us, now = now.us, w = w, count = 0, first = 1, base = 0, total = 0,
             oldest = 0, t_last = 0, cum_last = 0}
  if state then
    if state.as_of > v.at then v.at = state.as_of end
    v.count, v.base, v.oldest = state.count, state.base, state.oldest
    v.t_last, v.cum_last, v.full, v.key, v.legacy = state.t_last, state.cum_last, state.full, state.key, state.legacy
    v.total = state.count > 0 and state.cum_last or state.base
    local first = state.dead + 1
    local cutoff = v.at - w
    if first <= v.count and v.oldest <= cutoff then
      -- The first live record: the first after the cutoff (records are in order), found
      -- doubling from the oldest then halving; the count before it is its predecessor's.
      local lo, step, hi = first, 1, nil -- record lo has expired; hi (if any) is live
      while true do
        local j = lo + step
        if j > v.count then break end
        if sl_record(v, j) > cutoff then hi = j break end
        lo, step = j, step * 2
      end
      hi = hi or v.count + 1
      while hi - lo > 1 do
        local mid = floor((lo + hi) / 2)
        if sl_record(v, mid) > cutoff then hi = mid else lo = mid end
      end
      local _, cum = sl_record(v, lo)
      v.base = cum
      v.oldest = 0
      if hi <= v.count then v.oldest = sl_record(v, hi) end
      first = hi
    end
    v.first = first
  end
  v.in_window = v.total - v.base
  -- Counts that do not add up (records written by hand): not a log the library wrote.
  if v.in_window < 0 then fail(WRONG_TYPE) end
  return v
end

-- The record holding unit u (base < u ≤ total): the first whose count reaches it.
local function sl_holding(v, u)
  if u == v.total then return v.count end
  local lo, hi = v.first, v.count
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    local _, cum = sl_record(v, mid)
    if cum >= u then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- The instant of the k-th unit in the window (1-based), nil when there is none.
local function sl_nth(v, k)
  if k < 1 or k > v.in_window then return nil end
  return (sl_record(v, sl_holding(v, v.base + k)))
end

local function sl_until_gone(v, t) return ceil_ms(t + v.w - v.now, 1000) end

local function sl_decision(q, v, allowed, in_window)
  local retry
  if q.cost > q.limit then retry = -1
  else
    local needed = in_window + q.cost - q.limit
    if needed <= 0 then retry = 0
    else
      retry = sl_until_gone(v, sl_nth(v, needed) or v.at)
      if retry < 1 then retry = 1 end
    end
  end
  local newest = sl_nth(v, in_window)
  local remaining = q.limit - in_window
  if remaining < 0 then remaining = 0 end
  return decision(allowed, remaining, retry, newest and sl_until_gone(v, newest) or 0, q.limit)
end

-- The change of a log: `add` units at its instant, or the newest `drop` units taken back
-- (expired records go with either); `commit` makes it (sl_commit).
local function sl_write(v, add, drop, expiry)
  return {log = v, add = add, drop = drop, expiry = expiry}
end

-- Writes a log's change: one SETRANGE (the last record and the trailer) and PEXPIREAT, or a
-- rewrite with SET ... PXAT of the live records. Field x as in `commit`.
local function sl_commit(key, write, now)
  local v, expiry = write.log, write.expiry
  local x = 0
  if expiry * 1000 <= now.us then x, expiry = expiry, expiry + 1 end
  local at, first, count, base = v.at, v.first, v.count, v.base
  local live = count - first + 1
  -- The live records first..last kept as they are, then `tail` (a record) or nothing.
  local last, tail, total, oldest = count, nil, v.total, v.oldest
  if write.drop > 0 then
    total = total - write.drop
    if total <= base then last, live = first - 1, 0
    else
      last = sl_holding(v, total)
      tail = format('%016d%016d', (sl_record(v, last)), total)
      last, live = last - 1, last - first + 1
    end
  else
    total = total + write.add
    if live > 0 and v.t_last == at then last = count - 1
    else live = live + 1 end
    tail = format('%016d%016d', at, total)
    if live == 1 then oldest = at end
  end
  local dead = first - 1
  if live == 0 then
    redis.call('SET', key, 'sl ' .. sl_trailer(at, 0, 0, 0, 0, x), 'PXAT', int(expiry))
    return
  end
  if v.legacy or total >= 1e15 or (dead > 0 and dead >= live) or (write.drop > 0 and last + 1 < count) then
    local kept = ''
    if last >= first then
      local from, to = 3 + (first - 1) * RECORD, 3 + last * RECORD - 1
      if v.full then kept = sub(v.full, from + 1, to + 1) else kept = redis.call('GETRANGE', key, int(from), int(to)) end
    end
    if total >= 1e15 then
      -- Counts stay below 2^53 (and 16 digits): renumbered from 0, once in a very long while.
      local records = {}
      for i = 1, #kept / RECORD do
        local o = (i - 1) * RECORD
        records[i] = sub(kept, o + 1, o + 16) .. format('%016d', sub(kept, o + 17, o + 32) - base)
      end
      tail = sub(tail, 1, 16) .. format('%016d', total - base)
      kept, total, base = concat(records), total - base, 0
    end
    redis.call('SET', key, 'sl ' .. kept .. (tail or '') .. sl_trailer(at, live, 0, base, oldest, x),
               'PXAT', int(expiry))
    return
  end
  if v.count == 0 and not v.key and not v.full then
    -- A new log.
    redis.call('SET', key, 'sl ' .. tail .. sl_trailer(at, 1, 0, base, oldest, x), 'PXAT', int(expiry))
    return
  end
  redis.call('SETRANGE', key, int(3 + last * RECORD),
             (tail or '') .. sl_trailer(at, last + (tail and 1 or 0), dead, base, oldest, x))
  redis.call('PEXPIREAT', key, int(expiry))
end

function SL.evaluate(state, q, now)
  local v = sl_view(state, q, now)
  local in_window = v.in_window
  if q.cost > q.limit or in_window + q.cost > q.limit then
    return sl_decision(q, v, false, in_window), nil
  end
  local d = decision(true, q.limit - in_window - q.cost, 0, sl_until_gone(v, v.at), q.limit)
  return d, sl_write(v, q.cost, 0, expiry_ms_us(v.at + v.w))
end

function SL.refund(state, q, now)
  local v = sl_view(state, q, now)
  local in_window = v.in_window
  local back = q.cost < in_window and q.cost or in_window
  local after = in_window - back
  local d = sl_decision(q, v, back > 0, after)
  if back == 0 then return d, nil end
  local newest = sl_nth(v, after)
  return d, sl_write(v, 0, back, expiry_ms_us(newest and newest + v.w or v.at))
end

function SL.grantable(state, q, up_to, now)
  local v = sl_view(state, q, now)
  local left = q.limit - v.in_window
  if left < 0 then left = 0 end
  if left > up_to then return up_to end
  return left
end

-- GCRA (CL.THROTTLE): the theoretical arrival time, in ns relative to now.
local GC = {}
Algo.gcra = GC

local function gc_tat(state, now)
  if not state then return 0 end
  local rel, ahead = relative(state.a, now.s, now.n)
  if rel == nil then
    if ahead then clock_behind() end
    return 0
  end
  if rel < 0 then return 0 end
  return rel
end

local function gc_increment(q)
  local quantity = q.quantity or q.cost
  return q.interval * quantity
end

local function gc_judge(q, tat, increment)
  local diff = (q.tolerance - tat) - increment
  if diff < 0 then
    local retry = nil
    if increment <= q.tolerance then retry = -diff end
    return {limited = true, new_tat = tat, retry = retry, ttl = tat}
  end
  local new_tat = tat + increment
  if new_tat < 0 then new_tat = 0 end
  return {limited = false, new_tat = new_tat, ttl = new_tat}
end

-- redis-cell's remaining (whole µs of the slack over whole µs of the interval, truncated),
-- at most the limit. Below a µs of interval redis-cell divides by zero; the module's
-- checked division gives i64::MAX (then the limit) for a positive slack.
local function gc_remaining(q, ttl)
  local next_ns = q.tolerance - ttl
  if next_ns <= -q.interval then return 0 end
  local next_us = tdiv(next_ns, 1000)
  local interval_us = q.interval_us
  local limit = q.max_burst + 1
  if interval_us == 0 then
    if next_us > 0 then return limit end
    if next_us < 0 then return -9223372036854775808 end
    return 0
  end
  local remaining = tdiv(next_us, interval_us)
  if remaining > limit then return limit end
  return remaining
end

local function gc_decision(q, allowed, j, ttl)
  local retry = 0
  if j.limited then
    if j.retry then
      retry = ceil_ms(j.retry, 1000000)
      if retry < 1 then retry = 1 end
    else retry = -1 end
  end
  local remaining = gc_remaining(q, ttl)
  if remaining < 0 then remaining = 0 end
  return decision(allowed, remaining, retry, ceil_ms(ttl, 1000000), q.max_burst + 1)
end

local function gc_write(tat, now)
  local s, n = shift(now.s, now.n, tat)
  return {fields = {'gcra', ns_string(s, n), nil, nil}, expiry = expiry_ms_ns(s, n)}
end

-- redis-cell's whole seconds: Duration::as_seconds_f64 truncated, plus one when at least a
-- millisecond is left over.
local function cell_seconds(ns)
  local seconds = tdiv(ns, NS_PER_S)
  local nanos = ns - seconds * NS_PER_S
  local whole = seconds + nanos / 1e9
  if whole >= 0 then whole = floor(whole) else whole = -floor(-whole) end
  if tdiv(nanos, 1000000) > 0 then whole = whole + 1 end
  return whole
end

function GC.throttle(state, q, now)
  local tat = gc_tat(state, now)
  local j = gc_judge(q, tat, gc_increment(q))
  local cell = {j.limited and 1 or 0, q.max_burst + 1, gc_remaining(q, j.ttl),
                j.retry and cell_seconds(j.retry) or -1, cell_seconds(j.ttl)}
  local d = gc_decision(q, not j.limited, j, j.ttl)
  local write = nil
  if not j.limited and j.new_tat ~= tat then write = gc_write(j.new_tat, now) end
  return d, write, cell
end

function GC.evaluate(state, q, now)
  local d, write = GC.throttle(state, q, now)
  return d, write
end

function GC.refund(state, q, now)
  local before = gc_tat(state, now)
  local increment = gc_increment(q)
  local back = increment > 0 and increment or 0
  local tat = before - back
  if tat < 0 then tat = 0 end
  local refunded = tat < before
  local d = gc_decision(q, refunded, gc_judge(q, tat, increment), tat)
  return d, refunded and gc_write(tat, now) or nil
end

function GC.grantable(state, q, up_to, now)
  local slack = q.tolerance - gc_tat(state, now)
  local fits = tdiv(slack, q.interval)
  if fits < 0 then fits = 0 end
  if fits > up_to then return up_to end
  return fits
end

-- In-flight limit: holders {expiry_us, id} sorted by expiry.
local CC = {}
Algo.cc = CC

local function cc_view(state, q, now)
  local live = {}
  local expired = 0
  local own = nil
  if state then
    for _, h in ipairs(state.holders) do
      if h[1] > now.us then
        live[#live + 1] = h
        if q.holder and h[2] == q.holder then own = #live end
      else
        expired = expired + 1
      end
    end
  end
  return {live = live, own = own, expired = expired, now = now.us}
end

-- The k-th live expiry (1-based), skipping the holder at index `skip`.
local function cc_nth(v, k, skip)
  if k < 1 then return nil end
  local index = k
  if skip and skip <= index then index = index + 1 end
  local h = v.live[index]
  return h and h[1]
end

local function cc_count(v, skip) return #v.live - (skip and 1 or 0) end

local function cc_retry(q, v, skip)
  local live = cc_count(v, skip)
  if live < q.limit then return 0 end
  local expiry = cc_nth(v, live - q.limit + 1, skip)
  if not expiry then return -1 end
  local ms = ceil_ms(expiry - v.now, 1000)
  if ms < 1 then ms = 1 end
  return ms
end

local function cc_decision(q, v, allowed, live, last, retry)
  local remaining = q.limit - live
  if remaining < 0 then remaining = 0 end
  return decision(allowed, remaining, retry, last and ceil_ms(last - v.now, 1000) or 0, q.limit)
end

local function cc_admits(q, v) return (q.holder ~= nil and v.own ~= nil) or #v.live < q.limit end

function CC.evaluate(state, q, now)
  local v = cc_view(state, q, now)
  local admitted = cc_admits(q, v)
  if not (q.holder and admitted) then
    local retry
    if q.holder and v.own then retry = 0 else retry = cc_retry(q, v, nil) end
    return cc_decision(q, v, admitted, #v.live, cc_nth(v, #v.live, nil), retry), nil
  end
  local expires = v.now + q.ttl
  if v.own and v.live[v.own][1] > expires then expires = v.live[v.own][1] end
  local live = cc_count(v, v.own) + 1
  local last = cc_nth(v, cc_count(v, v.own), v.own)
  if not last or last < expires then last = expires end
  local d = cc_decision(q, v, true, live, last, 0)
  return d, {zadd = {expires, q.holder}, expired = v.expired, now = v.now, expiry = expiry_ms_us(last)}
end

-- Releases the caller's slot (RL.RELEASE): the decision, and the write when it held one.
function CC.refund(state, q, now)
  local v = cc_view(state, q, now)
  if not (q.holder and v.own) then
    local retry
    if q.holder and v.own then retry = 0 else retry = cc_retry(q, v, nil) end
    return cc_decision(q, v, false, #v.live, cc_nth(v, #v.live, nil), retry), nil
  end
  local skip = v.own
  local left = cc_count(v, skip)
  local last = cc_nth(v, left, skip)
  local d = cc_decision(q, v, true, left, last, cc_retry(q, v, skip))
  return d, {zrem = q.holder, expired = v.expired, now = v.now, left = left,
             expiry = expiry_ms_us(last or v.now)}
end

function CC.grantable(state, q, up_to, now)
  if cc_admits(q, cc_view(state, q, now)) then return up_to end
  return 0
end

-- Writing ----------------------------------------------------------------------------------

-- Writes a decision's change: the limiter's string with its absolute expiry in one SET.
-- A limiter back to unused at this very millisecond expires, in the module, at `now`: Redis
-- keeps such a key until the millisecond ends (a key expires strictly after its instant),
-- which a clock stepping back can observe. An expiry of `now` would delete the key at once,
-- so the library keeps it one millisecond more and records in field x the instant it is
-- really gone (`string_state` reads it so).
local function commit(key, write, state, now)
  if write.log then return sl_commit(key, write, now) end
  if write.fields then
    local f = write.fields
    local expiry = write.expiry
    local x = '-'
    if expiry * 1000 <= now.us then
      x = int(expiry)
      expiry = expiry + 1
    end
    local value = f[1] .. ' ' .. f[2] .. ' ' .. (f[3] or '-') .. ' ' .. (f[4] or '-') .. ' ' .. x
    redis.call('SET', key, value, 'PXAT', int(expiry))
    return
  end
  if write.expired > 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', int(write.now)) end
  if write.zadd then
    redis.call('ZADD', key, int(write.zadd[1]), write.zadd[2])
  elseif write.left == 0 then
    redis.call('DEL', key)
    return
  else
    redis.call('ZREM', key, write.zrem)
  end
  redis.call('PEXPIREAT', key, int(write.expiry))
end

-- The token bucket's fast path: a missing key, or a bucket written at this very rate with no
-- field x (nearly every call), decided and written with inline arithmetic: the operations of
-- `grant` with TB.grantable and TB.evaluate, in the same order, without their calls, tables
-- and field parsing (a Lua call or a table costs hundreds of instructions, a C call or a new
-- string more). `value` is the key's GET reply. Returns the reply, or nil when the call is
-- not one of these (another kind, a rate change, the clock far off, a write at this very
-- millisecond): the general path then decides, having written nothing.
-- `write`: true writes an admitted call's state, false does not (a peek), DEFER returns it
-- (the value and the expiry for SET ... PXAT, RL.MULTI's fast path), nil when it is not the
-- plain SET.
local DEFER = {}
local function tb_fast(key, value, q, min, now, write)
  local refill, interval = q.refill, q.interval
  local empty_at = -refill
  if value then
    if value.err then return nil end
    -- 'tb ', field a (the empty instant, ns) up to the first space, then this very rate, '-'
    -- and '-' (q.tail). Plain finds and subs: a pattern match costs several times more.
    local b1, b2, b3 = byte(value, 1, 3)
    if b1 ~= 116 or b2 ~= 98 or b3 ~= 32 then return nil end
    -- Field a's digits (an anchored match, the cheapest form), then this very rate: any
    -- other byte, or a negative instant, goes to the general path, which checks every field.
    local _, p = find(value, '^%d+', 4)
    if not p or p < 13 or sub(value, p + 1) ~= q.tail then return nil end
    p = p + 1
    -- `relative`, its strings coerced by arithmetic (one conversion, no call).
    local ds = sub(value, 4, p - 10) - now.s
    if ds > 4503599 or ds < -4503599 then return nil end
    local rel = ds * NS_PER_S + (sub(value, p - 9, p - 1) - now.n)
    if rel > empty_at then empty_at = rel end
  end
  local capacity, max_wait_ns = q.capacity, q.max_wait
  local units = q.cost
  if min ~= nil then
    local within = max_wait_ns - empty_at
    local tokens = 0
    if within > 0 then tokens = fdiv(within, interval) end
    if tokens > capacity then tokens = capacity end
    if tokens > units then tokens = units end
    if tokens >= min then units = tokens else units = min end
  end
  local retry = 0
  if units > capacity then retry = -1
  else
    local missing = (units * interval - max_wait_ns) + empty_at
    if missing > 0 then
      retry = cdiv(missing, 1000000)
      if retry < 1 then retry = 1 end
    end
  end
  -- The divisions below are fdiv's and cdiv's, inline: every dividend and divisor here is
  -- below 2^52 (an admitted bucket is at most MAXWAIT in debt; refill ≤ 2^52).
  local allowed, r = 0, 0
  if retry == 0 then
    allowed = 1
    empty_at = empty_at + units * interval
    if empty_at > 0 then
      r = empty_at % 1000000
      if r >= 1000000 then r = r - 1000000 elseif r < 0 then r = r + 1000000 end
      retry = (empty_at - r) / 1000000
      if r > 0 then retry = retry + 1 end
    end
  end
  local remaining, full, reset = 0, empty_at + refill, 0
  if empty_at < 0 then
    r = -empty_at % interval
    if r >= interval then r = r - interval elseif r < 0 then r = r + interval end
    remaining = (-empty_at - r) / interval
  end
  if full > 0 then
    r = full % 1000000
    if r >= 1000000 then r = r - 1000000 elseif r < 0 then r = r + 1000000 end
    reset = (full - r) / 1000000
    if r > 0 then reset = reset + 1 end
  end
  if allowed == 1 and write then
    -- shift(now, empty_at), then shift by refill and expiry_ms_ns.
    local t = now.n + empty_at
    r = t % NS_PER_S
    if r >= NS_PER_S then r = r - NS_PER_S elseif r < 0 then r = r + NS_PER_S end
    local s, n = now.s + (t - r) / NS_PER_S, r
    t = n + refill
    r = t % NS_PER_S
    if r >= NS_PER_S then r = r - NS_PER_S elseif r < 0 then r = r + NS_PER_S end
    local ms = (s + (t - r) / NS_PER_S) * 1000
    t = r % 1000000
    if t >= 1000000 then t = t - 1000000 elseif t < 0 then t = t + 1000000 end
    ms = ms + (r - t) / 1000000
    if t > 0 then ms = ms + 1 end
    if s <= 0 or ms * 1000 <= now.us then
      if write == DEFER then return nil end
      commit(key, {fields = {'tb', ns_string(s, n), q.interval_s, nil}, expiry = ms < 1 and 1 or ms}, nil, now)
    elseif write == DEFER then
      return {allowed, remaining, retry, reset, capacity}, format('tb %d%09d %s - -', s, n, q.interval_s), format('%d', ms)
    else
      redis.call('SET', key, format('tb %d%09d %s - -', s, n, q.interval_s), 'PXAT', format('%d', ms))
    end
  end
  if min ~= nil and allowed == 0 then units = 0 end
  return {min ~= nil and units or allowed, remaining, retry, reset, capacity}
end


-- The windows' and GCRA's fast paths, as tb_fast: a missing key or a limiter stored with no
-- field x, parsed by one anchored match, decided inline; nil sends the call to the general
-- path. A denied call builds the general path's view and asks its functions (it writes
-- nothing, so it is not worth a copy of them).

-- The start of t's window of w µs, t ≥ 0 (window_start without fmod's call).
local function aligned(t, w)
  local r = t % w
  if r >= w then r = r - w elseif r < 0 then r = r + w end
  return t - r
end

local function fw_fast(key, value, q, min, now, write)
  local w, limit, us = q.window, q.limit, now.us
  local start, count = aligned(us, w), 0
  if value then
    if value.err then return nil end
    local a, b = match(value, '^fw (%d+) (%d+) %- %-$')
    -- Longer fields than the library writes: the general path refuses them.
    if not a or #a > 16 or #b > 10 then return nil end
    local stored_start = aligned(a + 0, w)
    if stored_start >= start then start, count = stored_start, b + 0 end
  end
  local finish = start + w
  local units = q.cost
  if min ~= nil then
    local left = limit - count
    if left < 0 then left = 0 end
    if left > units then left = units end
    if left >= min then units = left else units = min end
  end
  local retry, allowed = 0, 0
  if units > limit then retry = -1
  elseif count + units > limit then
    retry = cdiv(finish - us, 1000)
    if retry < 1 then retry = 1 end
  else
    allowed, count = 1, count + units
    if write then
      redis.call('SET', key, format('fw %d %d - -', start, count), 'PXAT', format('%d', expiry_ms_us(finish)))
    end
  end
  local reset, remaining = 0, limit - count
  if count > 0 then reset = cdiv(finish - us, 1000) end
  if remaining < 0 then remaining = 0 end
  if min ~= nil and allowed == 1 then allowed = units end
  return {allowed, remaining, retry, reset, limit}
end

local function sw_fast(key, value, q, min, now, write)
  local w, limit, us = q.window, q.limit, now.us
  local start, previous, current = aligned(us, w), 0, 0
  if value then
    if value.err then return nil end
    local a, b, c = match(value, '^sw (%d+) (%d+) (%d+) %-$')
    if not a or #a > 16 or #b > 10 or #c > 10 then return nil end
    local stored_start = aligned(a + 0, w)
    if stored_start >= start then start, previous, current = stored_start, b + 0, c + 0
    elseif stored_start + w == start then previous = c + 0 end
  end
  local elapsed = us - start
  if elapsed < 0 then elapsed = 0 end
  -- sw_previous_share (0 without a call when the previous window is empty).
  local share = 0
  if previous > 0 then share = muldiv_ceil(previous, w - elapsed, w) end
  local units = q.cost
  if min ~= nil then
    local room = limit - current - share
    if room < 0 then room = 0 end
    if room > units then room = units end
    if room >= min then units = room else units = min end
  end
  if units > limit or limit - current - units < 0 or share > limit - current - units then
    if units ~= q.cost then q = with_cost(q, units) end
    local v = {start = start, elapsed = elapsed, previous = previous, current = current, now = us, w = w}
    local d = sw_decision(q, v, false, previous, current, sw_retry(q, v, previous, current))
    if min ~= nil then d[1] = 0 end
    return d
  end
  current = current + units
  local empty = start + 2 * w
  if write then
    redis.call('SET', key, format('sw %d %d %d -', start, previous, current), 'PXAT', format('%d', expiry_ms_us(empty)))
  end
  local remaining = limit - current - share
  if remaining < 0 then remaining = 0 end
  return {min ~= nil and units or 1, remaining, 0, cdiv(empty - us, 1000), limit}
end

local function gc_fast(key, value, q, now)
  local tat = 0
  if value then
    if value.err then return nil end
    local b1, b2, b3, b4, b5 = byte(value, 1, 5)
    if b1 ~= 103 or b2 ~= 99 or b3 ~= 114 or b4 ~= 97 or b5 ~= 32 then return nil end -- 'gcra '
    local _, p = find(value, '^%d+', 6)
    if not p or p < 15 or sub(value, p + 1) ~= ' - - -' then return nil end
    p = p + 1
    local ds = sub(value, 6, p - 10) - now.s
    if ds > 4503599 or ds < -4503599 then return nil end
    local rel = ds * NS_PER_S + (sub(value, p - 9, p - 1) - now.n)
    if rel > 0 then tat = rel end
  end
  local increment, tolerance = q.interval * q.quantity, q.tolerance
  local diff = (tolerance - tat) - increment
  local ttl, retry = tat, nil
  if diff < 0 then
    if increment <= tolerance then retry = -diff end
  else
    ttl = tat + increment
    if ttl < 0 then ttl = 0 end
    if ttl ~= tat then
      local t = now.n + ttl
      local off = fdiv(t, NS_PER_S)
      local s, n = now.s + off, t - off * NS_PER_S
      local ms = expiry_ms_ns(s, n)
      if s <= 0 or ms * 1000 <= now.us then
        commit(key, {fields = {'gcra', ns_string(s, n), nil, nil}, expiry = ms}, nil, now)
      else
        redis.call('SET', key, format('gcra %d%09d - - -', s, n), 'PXAT', format('%d', ms))
      end
    end
  end
  return {diff < 0 and 1 or 0, q.max_burst + 1, gc_remaining(q, ttl),
          retry and cell_seconds(retry) or -1, cell_seconds(ttl)}
end


-- The sliding log's fast path, as tb_fast: a log whose oldest live record is still in the
-- window (nothing to search or drop) and no field x, from its last record and trailer (`r`,
-- GETRANGE), admitted inline with one SETRANGE of its last record and trailer (the fields
-- it does not change copied as they are) and PEXPIREAT. nil: the general path decides. Its
-- reply is one table, refilled by each call (Redis reads it before the next call).
local SL_REPLY = {0, 0, 0, 0, 0}
local function sl_fast(key, r, q, min, now, write)
  -- 130: RECORD + SL_TRAILER (an error reply, a table, has length 0); every field digits
  -- and field x NO_X, as the library writes them (one anchored match: about 3 us, the price
  -- of never reading a log written by hand; anything else goes to the general path, which
  -- refuses what the library could not have written).
  if #r ~= 130 or byte(r, 33) ~= 124 or byte(r, 114) ~= 32 or byte(r, 115) ~= 45
      or not find(r, '^%d+|%d+ %-+$') then
    return nil
  end
  local count, oldest = sub(r, 50, 65) + 0, sub(r, 98, 113) + 0
  local at, w, limit = now.us, q.window, q.limit
  -- Instants as 16 digits compare as their numbers: the log's instant and the last record's
  -- are compared so, and the call's formatted once for the record and the trailer.
  local at_s, as_of_s = format('%016d', at), sub(r, 34, 49)
  if as_of_s > at_s then at, at_s = as_of_s + 0, as_of_s end
  -- A stored log with records has a live one, the oldest (`sl_commit`).
  if count < 1 or oldest <= at - w then return nil end
  local total = sub(r, 17, 32) + 0
  local in_window = total - sub(r, 82, 97)
  if in_window < 0 then return nil end
  local units = q.cost
  if min ~= nil then
    local left = limit - in_window
    if left < 0 then left = 0 end
    if left > units then left = units end
    if left >= min then units = left else units = min end
  end
  if units > limit or in_window + units > limit then return nil end
  -- cdiv(at + w − now, 1000) and expiry_ms_us(at + w), inline (both positive, below 2^53).
  local gone, r_us = at + w, 0
  r_us = gone % 1000
  if r_us >= 1000 then r_us = r_us - 1000 elseif r_us < 0 then r_us = r_us + 1000 end
  local expiry = (gone - r_us) / 1000
  if r_us > 0 then expiry = expiry + 1 end
  -- At now (the clock not stepped back), until_gone is the window: q.window_ms.
  local reset = q.window_ms
  if at ~= now.us then
    local until_gone = gone - now.us
    r_us = until_gone % 1000
    if r_us >= 1000 then r_us = r_us - 1000 elseif r_us < 0 then r_us = r_us + 1000 end
    reset = (until_gone - r_us) / 1000
    if r_us > 0 then reset = reset + 1 end
  end
  if write then
    if sub(r, 1, 16) == at_s then
      redis.call('SETRANGE', key, format('%d', 3 + (count - 1) * RECORD),
                 at_s .. format('%016d|', total + units) .. at_s .. sub(r, 50))
    else
      redis.call('SETRANGE', key, format('%d', 3 + count * RECORD),
                 at_s .. format('%016d|%s%016d', total + units, at_s, count + 1) .. sub(r, 66))
    end
    redis.call('PEXPIREAT', key, format('%d', expiry))
  end
  local d = SL_REPLY
  d[1], d[2], d[3], d[4], d[5] = min ~= nil and units or 1, limit - in_window - units, 0, reset, limit
  return d
end

-- Grants -----------------------------------------------------------------------------------

-- core::grant::evaluate: all or nothing (min nil), or the most units from min to the cost.
local function grant(state, q, min, now)
  local algo = Algo[q.kind]
  local units = q.cost
  if min ~= nil then
    local grantable = algo.grantable(state, q, q.cost, now)
    if grantable >= min then units = grantable else units = min end
  end
  if units ~= q.cost then q = with_cost(q, units) end
  local d, write = algo.evaluate(state, q, now)
  if d[1] == 0 then units = 0 end
  return units, d, write
end

-- One table for every call's reading (a call never outlives the next): allocating costs more
-- than the fields. TIME's strings are coerced by arithmetic (`+ 0`: one conversion, no call).
local NOW = {us = 0, s = 0, n = 0}
local function now_reading()
  local t = redis.call('TIME')
  local s, us = t[1] + 0, t[2] + 0
  if MS_CLOCK then us = us - us % 1000 end
  NOW.us, NOW.s, NOW.n = s * 1000000 + us, s, us * 1000
  return NOW
end

local function first_field(units, d, min)
  if min ~= nil then d[1] = units end
  return d
end

-- The commands -----------------------------------------------------------------------------

local function single_key(keys, command)
  if #keys ~= 1 then arity(command) end
  return keys[1]
end

local FAST = {tb = tb_fast, fw = fw_fast, sw = sw_fast}

local function limiter_command(kind, command)
  local parse = remembered(function(a) return call_args(kind, a, 1, command) end)
  local fast = FAST[kind]
  return function(keys, a)
    if #keys ~= 1 or #a < 2 then arity(command) end
    local key = keys[1]
    -- now_reading and single_key, inline: these are the commands called most.
    local t = redis.call('TIME')
    local s, us = t[1] + 0, t[2] + 0
    if MS_CLOCK then us = us - us % 1000 end
    local now = NOW
    now.us, now.s, now.n = s * 1000000 + us, s, us * 1000
    local q, min = parse(a)
    local state
    if fast then
      local value = redis.pcall('GET', key)
      local reply = fast(key, value, q, min, now, true)
      if reply then return reply end
      state = string_reply_state(key, value, now)
    elseif kind == 'sl' then
      local r = redis.pcall('GETRANGE', key, SL_TAIL, '-1') -- sl_read
      local reply = sl_fast(key, r, q, min, now, true)
      if reply then return reply end
      state = sl_open(key, now, r)
    else
      state = open(key, kind, now)
    end
    check_kind(state, kind)
    local units, d, write = grant(state, q, min, now)
    if write then commit(key, write, state, now) end
    return first_field(units, d, min)
  end
end

local peek_args = remembered(function(a)
  local kind = algorithm(a[1])
  if kind == 'cc' then
    if #a ~= 2 then arity('rl.peek') end
    local limit_digits, problem = parse_positive(a[2])
    if not limit_digits then arg_error('limit', RULES[problem] or 'must be a positive integer', a[2]) end
    if digits_above(limit_digits, tostring(MAX_HOLDERS)) then
      arg_error('limit', format('must be at most %d (the ratelimit.max-holders setting)', MAX_HOLDERS), a[2])
    end
    return {kind = 'cc', limit = tonumber(limit_digits), ttl = 1000, cost = 1}, nil
  end
  return call_args(kind, a, 2, 'rl.peek')
end)

local function peek(keys, a)
  local key = single_key(keys, 'rl.peek')
  if #a < 2 then arity('rl.peek') end
  local now = now_reading()
  local q, min = peek_args(a)
  local kind = q.kind
  local fast = FAST[kind]
  local state
  if fast then
    local value = redis.pcall('GET', key)
    local reply = fast(key, value, q, min, now, false)
    if reply then return reply end
    state = string_reply_state(key, value, now)
  elseif kind == 'sl' then
    local r = sl_read(key)
    local reply = sl_fast(key, r, q, min, now, false)
    if reply then return reply end
    state = sl_open(key, now, r)
  else
    state = open(key, kind, now)
  end
  check_kind(state, kind)
  local units, d = grant(state, q, min, now)
  return first_field(units, d, min)
end

local refund_args = remembered(function(a)
  local kind = algorithm(a[1])
  if kind == 'cc' then fail('ERR in-flight slots are given back with RL.RELEASE key holder') end
  local q, i = with_cost_arg(kind, a, 2, 'rl.refund')
  if a[i] ~= nil then arity('rl.refund') end
  return q
end)

local function refund(keys, a)
  local key = single_key(keys, 'rl.refund')
  if #a < 3 then arity('rl.refund') end
  local now = now_reading()
  local q = refund_args(a)
  local kind = q.kind
  local state
  if kind == 'sl' then state = sl_open(key, now, sl_read(key)) else state = open(key, kind, now) end
  check_kind(state, kind)
  local d, write = Algo[kind].refund(state, q, now)
  if write then commit(key, write, state, now) end
  return d
end

local throttle_args = remembered(function(a)
  local quantity, quantity_digits = 1, '1'
  if #a == 4 then quantity, quantity_digits = integer('quantity', a[4])
  elseif #a ~= 3 then arity('cl.throttle') end
  local q = gcra_params(a[1], a[2], a[3])
  if digits_above(quantity_digits, '9007199254740992') then
    arg_error('quantity', 'must be at most 9007199254740992 in magnitude' .. LIBRARY, a[4])
  end
  q.quantity = quantity
  return q
end)

local function throttle(keys, a)
  local key = single_key(keys, 'cl.throttle')
  if #a < 3 then arity('cl.throttle') end
  local now = now_reading()
  local q = throttle_args(a)
  local value = redis.pcall('GET', key)
  local reply = gc_fast(key, value, q, now)
  if reply then return reply end
  local state = string_reply_state(key, value, now)
  check_kind(state, 'gcra')
  local _, write, cell = GC.throttle(state, q, now)
  if write then commit(key, write, state, now) end
  return cell
end

-- The general path of an in-flight call: every holder read into Lua (open), decided by CC.
local function cc_general(key, q, now, release_only)
  local state = open(key, 'cc', now)
  check_kind(state, 'cc')
  if release_only then
    local _, write = CC.refund(state, q, now)
    if write then commit(key, write, state, now) return 1 end
    return 0
  end
  local d, write = CC.evaluate(state, q, now)
  if write then commit(key, write, state, now) end
  return d
end

-- The highest score of a sorted set (its last holder's expiry), nil when it is empty.
local function last_score(key)
  local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  return top[2] and top[2] + 0
end

local acquire_args = remembered(function(a) return concurrency_params(a[1], a[2]) end)

-- The last limit and ttl RL.ACQUIRE parsed (its holder differs call after call, so the
-- memo is asked with a table of those two: built only when they change).
local acquired_limit, acquired_ttl, acquired_q = nil, nil, nil
-- An admitted call's reply: one table, refilled by each call (Redis reads it before the next).
local CC_REPLY = {1, 0, 0, 0, 0}

-- RL.ACQUIRE: Redis does the sorted-set work (CC.evaluate's decision, without reading every
-- holder into Lua): ZSCORE finds the caller, ZCARD less the expired holders (ZCOUNT up to
-- now, which walks only those) counts the live ones, and only a denial reads the holder whose
-- expiry frees a slot. An admitted call sets the key's expiry, removes the expired holders
-- (if any: a renewal, admitted whatever their count, without counting them first,
-- ZREMRANGEBYSCORE's reply counting them instead of ZCOUNT's), then adds or renews the
-- caller. The key expires with its last holder: every write of an in-flight limit leaves it
-- expiring at its last expiry's millisecond (rounded up), so on a key that keeps holders
-- PEXPIREAT ... GT is that write, and when it moves the expiry the caller's is the last (a
-- later millisecond than every other's); only when it does not (a holder in the same or a
-- later millisecond: other ttls, the clock stepped back, or a sorted set of the user's,
-- which has no expiry) is the expiry read, then the last holder. A key that is not a sorted
-- set goes the general way (its errors).
local function acquire(keys, a)
  if #keys ~= 1 or #a ~= 3 then arity('rl.acquire') end
  local key = keys[1]
  -- now_reading, inline.
  local t = redis.call('TIME')
  local s, within = t[1] + 0, t[2] + 0
  if MS_CLOCK then within = within - within % 1000 end
  local us = s * 1000000 + within
  local now = NOW
  now.us, now.s, now.n = us, s, within * 1000
  local q
  if a[1] == acquired_limit and a[3] == acquired_ttl then q = acquired_q
  else
    q = acquire_args({a[1], a[3]})
    acquired_limit, acquired_ttl, acquired_q = a[1], a[3], q
  end
  local holder = a[2]
  if #holder < 1 or #holder > 128 then holder_id(holder) end
  local own = redis.pcall('ZSCORE', key, holder)
  if own and own.err then
    return cc_general(key, {kind = 'cc', limit = q.limit, ttl = q.ttl, holder = holder, cost = 1}, now)
  end
  local limit = q.limit
  local us_s = format('%d', us)
  if own then
    own = own + 0
    if own <= us then own = nil end
  end
  local live, expired = redis.call('ZCARD', key), 0
  -- A new holder counts the expired ones (a ZCOUNT costs less than a ZREMRANGEBYSCORE that
  -- finds nothing); a renewal, admitted whatever the count, removes them below, once the
  -- key is known to be an in-flight limit.
  local exists = live > 0
  if exists and not own then
    expired = redis.call('ZCOUNT', key, '-inf', us_s)
    live = live - expired
  end
  if not own and live >= limit then
    -- Nothing is written; a sorted set of the user's is WRONGTYPE (limit_expiry).
    limit_expiry(key)
    -- cc_retry: the (live − limit + 1)-th live expiry frees a slot.
    local rank = int(expired + live - limit)
    local next_free = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
    local retry = ceil_ms(next_free[2] - us, 1000)
    if retry < 1 then retry = 1 end
    return {0, 0, retry, ceil_ms(last_score(key) - us, 1000), limit}
  end
  local ttl = q.ttl
  local expires = us + ttl
  -- The key's expiry (expiry_ms_us) and the reply's reset (ceil_ms) for the caller's expiry.
  local expiry, reset
  if own and own > expires then
    expires = own
    expiry, reset = expiry_ms_us(own), ceil_ms(own - us, 1000)
  else
    -- Inline: ttl is whole milliseconds, so only now's microseconds round up.
    local r = us % 1000 -- as in fdiv (us is below 2^52)
    if r >= 1000 then r = r - 1000 elseif r < 0 then r = r + 1000 end
    expiry, reset = (us - r + ttl) / 1000, ttl / 1000
    if r > 0 then expiry = expiry + 1 end
  end
  -- The key's expiry first, before any write: on a key that keeps holders, PEXPIREAT ... GT
  -- is the write (the caller's expiry is then the last: a later millisecond than every
  -- other's); when it does not move the expiry, PEXPIRETIME tells a later holder's from a
  -- sorted set of the user's, which has none (WRONGTYPE, nothing written). A key whose
  -- holders have all expired is asked the same before they are removed.
  local moved = 1
  if own or live > 0 then
    moved = redis.call('PEXPIREAT', key, format('%d', expiry), 'GT')
    if moved == 0 then limit_expiry(key) end
  elseif exists then
    limit_expiry(key)
  end
  if own then
    expired = redis.call('ZREMRANGEBYSCORE', key, '-inf', us_s)
    live = live - expired
  elseif expired > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', us_s)
  end
  -- The holders the key keeps through the write (the live ones, the caller's slot included).
  local kept = live
  if own then live = live - 1 end
  redis.call('ZADD', key, format('%d', expires), holder)
  -- After the write the last expiry is the caller's or a later holder's: CC.evaluate's `last`.
  if kept == 0 then
    -- A new key (or one whose holders had all expired, deleted with them): the caller's.
    redis.call('PEXPIREAT', key, format('%d', expiry))
  elseif moved == 0 then
    local last = last_score(key)
    reset = ceil_ms(last - us, 1000)
    redis.call('PEXPIREAT', key, format('%d', expiry_ms_us(last)))
  end
  local remaining = limit - live - 1
  if remaining < 0 then remaining = 0 end
  local d = CC_REPLY
  d[1], d[2], d[3], d[4], d[5] = 1, remaining, 0, reset, limit
  return d
end

-- RL.RELEASE, as RL.ACQUIRE: ZSCORE finds the caller; a live caller's slot is removed with
-- the expired holders, and the key then expires with its last holder (or is gone with it).
-- Every write of an in-flight limit leaves the key expiring with its last holder, so when
-- the caller is not the last the expiry stands and is not written again: the caller is not
-- when the key expires in a later millisecond than the caller's expiry (PEXPIRETIME, an
-- integer, costs less than reading the last holder); only otherwise is the last holder read.
local function release(keys, a)
  if #keys ~= 1 or #a ~= 1 then arity('rl.release') end
  local key = keys[1]
  local holder = a[1]
  if #holder < 1 or #holder > 128 then holder_id(holder) end
  -- now_reading, inline.
  local t = redis.call('TIME')
  local s, within = t[1] + 0, t[2] + 0
  if MS_CLOCK then within = within - within % 1000 end
  local us = s * 1000000 + within
  local now = NOW
  now.us, now.s, now.n = us, s, within * 1000
  local own = redis.pcall('ZSCORE', key, holder)
  if own and own.err then
    return cc_general(key, {kind = 'cc', limit = 1, ttl = 1000, holder = holder, cost = 1}, now, true)
  end
  -- Nothing to release: none on a missing key, WRONGTYPE on a sorted set of the user's.
  if not own then
    if redis.call('PEXPIRETIME', key) == -1 then fail(WRONG_TYPE) end
    return 0
  end
  own = own + 0
  if own <= us then
    limit_expiry(key)
    return 0
  end
  -- Not the last holder when the key expires after the caller's millisecond, rounded up:
  -- ceil(own / 1000) < e, that is (e − 1) × 1000 ≥ own (e is a whole millisecond).
  local top = nil
  if (limit_expiry(key) - 1) * 1000 < own then top = redis.call('ZRANGE', key, '-1', '-1') end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', us))
  redis.call('ZREM', key, holder)
  if not top or top[1] ~= holder then return 1 end
  local last = last_score(key)
  if last then redis.call('PEXPIREAT', key, int(expiry_ms_us(last))) end
  return 1
end

-- RL.MULTI: the binding limit (core::multi::bind).
local function wait_rank(retry)
  if retry == -1 then return 1, 0 end
  return 0, retry
end

local function rank_above(a, b)
  local a1, a2 = wait_rank(a)
  local b1, b2 = wait_rank(b)
  if a1 ~= b1 then return a1 > b1 end
  return a2 > b2
end

local function bind(decisions, costs)
  local allowed = true
  local reset = 0
  for _, d in ipairs(decisions) do
    if d[1] == 0 then allowed = false end
    if d[4] > reset then reset = d[4] end
  end
  local binding
  if allowed then
    local fewest
    for i, d in ipairs(decisions) do
      local left = fdiv(d[2], costs[i] < 1 and 1 or costs[i])
      if fewest == nil or left < fewest then binding, fewest = i, left end
    end
  else
    for i, d in ipairs(decisions) do
      if d[1] == 0 and (binding == nil or rank_above(d[3], decisions[binding][3])) then binding = i end
    end
  end
  local chosen = decisions[binding]
  local retry = chosen[3]
  if allowed then
    retry = decisions[1][3]
    for _, d in ipairs(decisions) do
      if rank_above(d[3], retry) then retry = d[3] end
    end
  end
  return binding, {allowed and 1 or 0, chosen[2], retry, reset, chosen[5]}
end

local multi_args = remembered(function(a, keys)
  local count = #keys
  local quotas, i = {}, 1
  for index = 1, count do
    local name = a[i]
    if name == nil then arity('rl.multi') end
    local ok, result = pcall(function()
      local kind = algorithm(name)
      if #a - i < PARAM_COUNT[kind] then return 'arity' end
      return quota(kind, a, i + 1)
    end)
    if not ok then
      if type(result) == 'table' and result[1] then
        local code, detail = string.match(result[1], '^(%S+) (.*)$')
        fail(format("%s limit of key '%s': %s", code, quote(keys[index]), detail))
      end
      error(result, 0)
    end
    if result == 'arity' then arity('rl.multi') end
    quotas[index] = result
    i = i + 1 + PARAM_COUNT[result.kind]
  end
  local cost, weights, min, holder = 1, {}, nil, nil
  local cost_given, weights_given, partial_given = false, false, false
  for index = 1, count do weights[index] = 1 end
  while a[i] ~= nil do
    local option = a[i]
    if not cost_given and upper_is(option, 'COST') then
      if a[i + 1] == nil then arity('rl.multi') end
      cost = positive_integer('cost', a[i + 1])
      cost_given, i = true, i + 2
    elseif not weights_given and upper_is(option, 'WEIGHTS') then
      if #a - i < count then arity('rl.multi') end
      for index = 1, count do weights[index] = positive_integer('weight', a[i + index]) end
      weights_given, i = true, i + 1 + count
    elseif holder == nil and upper_is(option, 'HOLDER') then
      if a[i + 1] == nil then arity('rl.multi') end
      holder, i = holder_id(a[i + 1]), i + 2
    elseif not partial_given and upper_is(option, 'PARTIAL') then
      if upper_is(a[i + 1], 'MIN') then
        if a[i + 2] == nil then arity('rl.multi') end
        min, i = positive_integer('MIN', a[i + 2]), i + 3
      else
        min, i = 1, i + 1
      end
      partial_given = true
    else
      arg_error('option', 'must be COST c, WEIGHTS w1 ... wN, HOLDER id or PARTIAL [MIN m]', option)
    end
  end
  local holder_used = false
  for _, q in ipairs(quotas) do
    if q.kind == 'cc' then
      if holder == nil then fail("ERR a CONCURRENCY limit needs HOLDER id: the caller's id for its slot") end
      q.holder = holder
      holder_used = true
    end
  end
  if holder ~= nil and not holder_used then
    fail('ERR HOLDER id is for CONCURRENCY limits, and this call has none')
  end
  if min ~= nil and min > cost then arg_error('MIN', 'must be at most the cost', int(min)) end
  for _, w in ipairs(weights) do
    if w * cost > TWO53 then
      if w * cost >= 18446744073709551616 then arg_error('cost * weight', 'is too large') end
      arg_error('cost * weight', 'must be at most 9007199254740992' .. LIBRARY)
    end
  end
  local buckets = true
  for _, q in ipairs(quotas) do if q.kind ~= 'tb' then buckets = false end end
  return {quotas = quotas, cost = cost, weights = weights, min = min, buckets = buckets}
end)

local function multi(keys, a)
  local count = #keys
  if count + #a + 2 < 6 then arity('rl.multi') end
  if count == 0 then arg_error('numkeys', 'must be greater than 0', '0') end
  if count > MAX_KEYS then arg_error('numkeys', 'must be at most 16', tostring(count)) end
  for i = 2, count do
    for j = 1, i - 1 do
      if keys[i] == keys[j] then
        fail(format("ERR key '%s' is given twice: each key takes one limit", quote(keys[i])))
      end
    end
  end
  local now = now_reading()
  local parsed = multi_args(a, keys)
  local quotas, cost, weights, min = parsed.quotas, parsed.cost, parsed.weights, parsed.min
  if parsed.buckets and min == nil then
    -- Token buckets only, all or nothing: tb_fast decides each key; when every key is
    -- admitted (and on its fast path) the writes are made, else the general path below
    -- decides from the start (it has written nothing).
    local decisions, values, expiries, costs = {}, {}, {}, {}
    local admitted = true
    for index = 1, count do
      local q = quotas[index]
      if q.cost ~= cost * weights[index] then q = with_cost(q, cost * weights[index]) end
      local d, value, expiry = tb_fast(keys[index], redis.pcall('GET', keys[index]), q, nil, now, DEFER)
      if not (d and value) then admitted = false break end
      decisions[index], values[index], expiries[index], costs[index] = d, value, expiry, q.cost
    end
    if admitted then
      local binding, d = bind(decisions, costs)
      for index = 1, count do redis.call('SET', keys[index], values[index], 'PXAT', expiries[index]) end
      d[6] = binding - 1
      d[7] = decisions
      return d
    end
  end
  -- Open every key, then evaluate every limit against one clock reading.
  local states = {}
  for index = 1, count do states[index] = open(keys[index], quotas[index].kind, now) or false end
  local units = cost
  if min ~= nil then
    local all_can_give = cost
    for index = 1, count do
      local q = quotas[index]
      local state = states[index] or nil
      check_kind(state, q.kind)
      local gives = fdiv(Algo[q.kind].grantable(state, with_cost(q, cost * weights[index]), cost * weights[index], now), weights[index])
      if gives < all_can_give then all_can_give = gives end
    end
    units = all_can_give > min and all_can_give or min
  end
  local decisions, writes, costs = {}, {}, {}
  for index = 1, count do
    local q = with_cost(quotas[index], units * weights[index])
    local state = states[index] or nil
    check_kind(state, q.kind)
    decisions[index], writes[index] = Algo[q.kind].evaluate(state, q, now)
    costs[index] = q.kind == 'cc' and 1 or q.cost
  end
  local binding, d = bind(decisions, costs)
  if d[1] == 0 then
    -- Nothing is charged: the reset is every limit's as it stands.
    local reset = 0
    for index = 1, count do
      local as_it_stands = decisions[index][4]
      if decisions[index][1] == 1 then
        local q = with_cost(quotas[index], huge)
        local unchanged = Algo[q.kind].evaluate(states[index] or nil, q, now)
        as_it_stands = unchanged[4]
      end
      if as_it_stands > reset then reset = as_it_stands end
    end
    d[4] = reset
    units = 0
  else
    for index = 1, count do
      if writes[index] then commit(keys[index], writes[index], states[index] or nil, now) end
    end
  end
  if min ~= nil then d[1] = units end
  d[6] = binding - 1
  d[7] = decisions
  return d
end

-- Regions: RL.REGIONAL and RL.REGIONLEASE --------------------------------------------------
-- A region's lease is a plain string of its units left (canonical decimal digits, at most
-- 10^15), expiring at the lease's end (PXAT): the module's exact form, so either side reads
-- the other's. A regional call decides from its floor, then from the live lease, and writes
-- exactly one of them (an in-flight call: its holder in the floor, the lease only read).

local MAX_LEASE_UNITS = '1000000000000000'
local NOT_A_LEASE = 'ERR the lease key holds a string that is not a lease (units with an expiry)'
local MAX_EXPIRY_MS = '4611686018427'

-- The lease in `key`: nil (missing), or {units, end_us}; WRONGTYPE for another type or one
-- of the library's limiters, an error for any other string.
local function lease_read(key)
  local value = redis.pcall('GET', key)
  if not value then return nil end
  if type(value) == 'table' then fail(WRONG_TYPE) end
  local canonical = value == '0' or (string.match(value, '^[1-9]%d*$') ~= nil and not digits_above(value, MAX_LEASE_UNITS))
  if not canonical then
    local kind = string.match(value, '^(%l+) ')
    if kind and NAMES[kind] then fail(WRONG_TYPE) end
    fail(NOT_A_LEASE)
  end
  local end_ms = redis.call('PEXPIRETIME', key)
  if end_ms < 0 then fail(NOT_A_LEASE) end
  return {units = tonumber(value), end_us = end_ms * 1000, end_ms = end_ms}
end

local function live_units(lease, now)
  if lease and now.us < lease.end_us then return lease.units end
  return 0
end

local regional_args = remembered(function(a)
  local kind = algorithm(a[1])
  local q, i = with_cost_arg(kind, a, 2, 'rl.regional')
  if a[i] ~= nil then arg_error('option', 'must not follow the cost', a[i]) end
  return q
end)

-- An in-flight floor: CONCURRENCY limit holder ttl_ms, RL.ACQUIRE's arguments (not
-- remembered whole: the holder changes call after call; its limit and ttl are, as
-- RL.ACQUIRE's).
local function regional_in_flight_args(a)
  if #a ~= 4 then arity('rl.regional') end
  local p = acquire_args({a[2], a[4]})
  return {kind = 'cc', limit = p.limit, ttl = p.ttl, holder = holder_id(a[3]), cost = 1}
end

-- An in-flight call of a region (the module's core::regional::admit_in_flight): every holder
-- of the region lives in the floor's key. On the floor while the other holders are fewer
-- than its limit (a live holder renews); else on the live lease while they are fewer than
-- the limit plus the lease's units (its slots, holders of home's pool) and the caller's
-- expiry is no later than the lease's end; the holder is written either way, the lease only
-- read. The reply's fields 2-5 are the floor's own call when it admitted, else the floor as
-- it stands; field 7 the leased slots still free.
local function regional_in_flight(floor_key, state, lease, q, now)
  local v = cc_view(state, q, now)
  local others = cc_count(v, v.own)
  local expires = now.us + q.ttl
  if v.own and v.live[v.own][1] > expires then expires = v.live[v.own][1] end
  local live = lease ~= nil and now.us < lease.end_us
  local why, by
  if others < q.limit then
    why, by = 'floor', q
  elseif not live then
    why = 'home_unreachable'
  elseif others < q.limit + lease.units and expires <= lease.end_us then
    why, by = 'lease', {kind = 'cc', limit = q.limit + lease.units, ttl = q.ttl, holder = q.holder, cost = 1}
  else
    why = 'lease_exhausted'
  end
  local d = CC.evaluate(state, {kind = 'cc', limit = q.limit, ttl = q.ttl, cost = 1}, now)
  if by then
    local taken, write = CC.evaluate(state, by, now)
    if why == 'floor' then d = taken end
    commit(floor_key, write, state, now)
  end
  local after = others
  if by or v.own then after = after + 1 end
  local free = 0
  if live then
    free = q.limit + lease.units - after
    if free < 0 then free = 0 end
    if free > lease.units then free = lease.units end
  end
  return {by and 1 or 0, d[2], d[3], d[4], d[5], why, free}
end

local function regional(keys, a)
  if #keys ~= 2 or #a < 3 then arity('rl.regional') end
  local floor_key, lease_key = keys[1], keys[2]
  if floor_key == lease_key then
    fail('ERR RL.REGIONAL needs two keys: the floor\'s limiter and the lease (the same key was given twice)')
  end
  local now = now_reading()
  local q
  if upper_is(a[1], 'CONCURRENCY') then q = regional_in_flight_args(a) else q = regional_args(a) end
  local kind = q.kind
  local state
  if kind == 'sl' then state = sl_open(floor_key, now, sl_read(floor_key)) else state = open(floor_key, kind, now) end
  local lease = lease_read(lease_key)
  check_kind(state, kind)
  if kind == 'cc' then return regional_in_flight(floor_key, state, lease, q, now) end
  local _, d, write = grant(state, q, nil, now)
  local left = live_units(lease, now)
  if d[1] == 1 then
    if write then commit(floor_key, write, state, now) end
    return {1, d[2], d[3], d[4], d[5], 'floor', left}
  end
  if lease == nil or now.us >= lease.end_us then
    return {0, d[2], d[3], d[4], d[5], 'home_unreachable', 0}
  end
  if left < q.cost then
    return {0, d[2], d[3], d[4], d[5], 'lease_exhausted', left}
  end
  left = left - q.cost
  redis.call('SET', lease_key, int(left), 'PXAT', int(lease.end_ms))
  return {1, d[2], d[3], d[4], d[5], 'lease', left}
end

local function region_lease(keys, a)
  local key = single_key(keys, 'rl.regionlease')
  if #a ~= 2 then arity('rl.regionlease') end
  local now = now_reading()
  local units_arg, end_arg = a[1], a[2]
  local units, problem = parse_positive(units_arg)
  if problem == 'Zero' then
    units = '0'
  elseif problem == 'Negative' then
    arg_error('units', 'must be at least 0', units_arg)
  elseif problem == 'NotFinite' then
    arg_error('units', 'must be a finite number', units_arg)
  elseif problem == 'Malformed' then
    arg_error('units', 'must be a whole number of units', units_arg)
  end
  if problem == 'TooLarge' or digits_above(units, MAX_LEASE_UNITS) then
    arg_error('units', 'must be at most ' .. MAX_LEASE_UNITS, units_arg)
  end
  local end_ms, end_problem = parse_positive(end_arg)
  if end_problem == 'TooLarge' or (end_ms and digits_above(end_ms, MAX_EXPIRY_MS)) then
    arg_error('expires_at_ms', 'must be at most ' .. MAX_EXPIRY_MS .. ' (2116-02-20)', end_arg)
  end
  if not end_ms then arg_error('expires_at_ms', RULES[end_problem] or 'must be a positive integer', end_arg) end
  if tonumber(end_ms) * 1000 <= now.us then
    arg_error('expires_at_ms', "must be after the server's time (the lease would have ended)", end_arg)
  end
  local replaced = live_units(lease_read(key), now)
  redis.call('SET', key, units, 'PXAT', end_ms)
  return replaced
end

-- Registration -----------------------------------------------------------------------------

return {
  rl_tokenbucket = limiter_command('tb', 'rl.tokenbucket'),
  rl_sliding = limiter_command('sw', 'rl.sliding'),
  rl_fixed = limiter_command('fw', 'rl.fixed'),
  rl_slidinglog = limiter_command('sl', 'rl.slidinglog'),
  cl_throttle = throttle,
  rl_multi = multi,
  rl_acquire = acquire,
  rl_release = release,
  rl_peek = peek,
  rl_refund = refund,
  rl_regional = regional,
  rl_regionlease = region_lease,
}
end

local commands = nil

-- What a command raised, as its reply: an error raised with `fail` (a table holding the
-- message) or by redis.call (a table with `err`) is the command's error reply; anything
-- else is a bug, re-raised for Redis to report. The callers run the command under pcall
-- themselves, not through a wrapper: one Lua call less on every call.
local function raised(result)
  if type(result) == 'table' then
    if result[1] then return redis.error_reply(result[1]) end
    if result.err then return result end
  end
  error(result, 0)
end

if redis.register_function then
  local function register(name, flags)
    redis.register_function{
      function_name = name,
      callback = function(keys, args)
        if commands == nil then commands = build() end
        local ok, result = pcall(commands[name], keys, args)
        if ok then return result end
        return raised(result)
      end,
      flags = flags,
    }
  end
  register('rl_tokenbucket', {})
  register('rl_sliding', {})
  register('rl_fixed', {})
  register('rl_slidinglog', {})
  register('cl_throttle', {})
  register('rl_multi', {})
  register('rl_acquire', {})
  -- As the module's RL.RELEASE, RL.PEEK and RL.REFUND: they free or read, so they run under
  -- maxmemory (noeviction) too, and in-flight slots and refunds are not lost to it.
  register('rl_release', {'allow-oom'})
  register('rl_peek', {'no-writes', 'allow-oom'})
  register('rl_refund', {'allow-oom'})
  register('rl_regional', {})
  register('rl_regionlease', {})
else
  -- Loaded as a script: EVALSHA sha numkeys key ... function_name arg ...
  commands = build()
  local command = commands[ARGV[1] or '']
  if command == nil then
    return redis.error_reply("ERR the first argument must name one of the ratelimit library's functions (rl_tokenbucket, rl_sliding, rl_fixed, rl_slidinglog, cl_throttle, rl_multi, rl_acquire, rl_release, rl_peek, rl_refund, rl_regional, rl_regionlease)")
  end
  local ok, result = pcall(command, KEYS, {unpack(ARGV, 2)})
  if ok then return result end
  return raised(result)
end
