'use strict';
/**
 * The algorithms a limit can use, their parameters, and the two forms they take: the arguments
 * the module's commands expect, and the core's quota (the local fallback runs the same
 * arithmetic as the server).
 *
 * Parameters are checked by the server's rules when a limit is built, with the server's words
 * (`limit must be greater than 0 (got '0')`), so a limit is refused here exactly when the
 * server would refuse it, not on the first request. Integers are BigInt inside; a caller gives
 * numbers, BigInts or decimal text.
 */

const kinds = require('./kinds');
const { AlgorithmError } = require('./errors');

/** A kind of the generated table this client has no twin of: said, never guessed. */
function noTwin(kind) {
  return new AlgorithmError(`the Node.js client has no twin of kind '${kind}'`);
}
const { ConcurrencyParams, MAX_STORED_HOLDERS } = require('./core/concurrency');
const { GcraParams, GcraParamError, emissionIntervalNs } = require('./core/gcra');
const { SlidingLogParams, MAX_STORED_ENTRIES } = require('./core/sliding-log');
const { TokenBucketParams, MAX_REFILL_NS } = require('./core/token-bucket');
const { FixedWindowParams, SlidingWindowParams } = require('./core/windows');
const {
  Decimal,
  NumberError,
  NumberParseError,
  I64_MAX,
  U64_MAX,
  MAX_WINDOW_US,
  MIN_WINDOW_US,
  ceilDiv,
  min,
  max,
  parsePositiveInteger,
} = require('./core/numbers');

const { TOKEN_BUCKET, SLIDING_WINDOW, FIXED_WINDOW, SLIDING_LOG, GCRA, CONCURRENCY, BY_NAME, KINDS } = kinds;

const RULES = {
  [NumberError.MALFORMED]: null,
  [NumberError.NOT_FINITE]: 'must be a finite number',
  [NumberError.NEGATIVE]: 'must be greater than 0',
  [NumberError.ZERO]: 'must be greater than 0',
  [NumberError.TOO_LARGE]: 'is too large',
};

function quote(text) {
  const shown = [...text.slice(0, 32)].map((c) => (c >= ' ' && c <= '~' ? c : '?')).join('');
  return shown + (text.length > 32 ? '...' : '');
}

/** `a, b or c` (the Rust kinds::or_list). */
function orList(names) {
  const items = [...names];
  return items.length === 1 ? items[0] : `${items.slice(0, -1).join(', ')} or ${items[items.length - 1]}`;
}

function refuse(name, rule, got) {
  return new AlgorithmError(`${name} ${rule}${got === undefined ? '' : ` (got '${quote(String(got))}')`}`);
}

/** A positive integer argument, by the server's rule (a BigInt). */
function positiveInteger(name, value) {
  const text = String(value);
  try {
    return parsePositiveInteger(text);
  } catch (error) {
    if (!(error instanceof NumberParseError)) throw error;
    throw refuse(name, RULES[error.kind] || 'must be a positive integer', text);
  }
}

function positiveDecimal(name, text) {
  try {
    return Decimal.parsePositive(text);
  } catch (error) {
    if (!(error instanceof NumberParseError)) throw error;
    throw refuse(name, RULES[error.kind] || 'must be a positive decimal number', text);
  }
}

/**
 * A duration in seconds (a number, a BigInt or decimal text: `60`, `0.25`, `"1.5"`) as whole
 * microseconds (a BigInt); refused when it is not whole microseconds.
 */
function secondsToUs(name, value) {
  if (typeof value === 'bigint') return value * 1000000n;
  if (typeof value === 'number' && !Number.isFinite(value)) throw refuse(name, 'must be a finite number', value);
  if (typeof value !== 'number' && typeof value !== 'string') throw refuse(name, 'must be a number of seconds', value);
  const text = String(value).trim();
  const match = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (match === null || (match[2] === '' && (match[3] === undefined || match[3] === ''))) {
    throw refuse(name, 'must be a number of seconds', text);
  }
  const [, sign, whole, fraction = '', exponentText = '0'] = match;
  const exponent = Number(exponentText) + 6 - fraction.length;
  if (Math.abs(exponent) > 400) throw refuse(name, 'must be whole microseconds', text);
  let digits = BigInt(`${whole}${fraction}` || '0');
  if (exponent >= 0) digits *= 10n ** BigInt(exponent);
  else {
    const scale = 10n ** BigInt(-exponent);
    if (digits % scale !== 0n) throw refuse(name, 'must be whole microseconds', text);
    digits /= scale;
  }
  return sign === '-' ? -digits : digits;
}

function windowUs(name, value) {
  const us = secondsToUs(name, value);
  if (us < MIN_WINDOW_US) throw refuse(name, 'must be at least 0.001 seconds (1 ms)', value);
  if (us > MAX_WINDOW_US) throw refuse(name, 'must be at most 3155760000 seconds (100 years)', value);
  return us;
}

function decimalText(digits, decimals) {
  const text = digits.toString();
  if (decimals === 0) return text;
  const padded = text.padStart(decimals + 1, '0');
  const whole = padded.slice(0, -decimals);
  const fraction = padded.slice(-decimals).replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : whole;
}

/**
 * The shortest decimal rate whose interval, ceil(1e9 / rate), is exactly `intervalNs`
 * (wire::encode's push_rate: what the Rust client sends).
 */
function shortestRate(intervalNs) {
  const wanted = max(intervalNs, 1n);
  let digits = 1000000000n;
  let decimals = 0;
  for (decimals = 0; decimals < 30; decimals += 1) {
    const scaled = 10n ** BigInt(decimals) * 1000000000n;
    digits = ceilDiv(scaled, wanted);
    if (ceilDiv(scaled, digits) === wanted) break;
  }
  return decimalText(digits, Math.min(decimals, 29));
}

/**
 * A refill rate in tokens per second: the decimal text sent to the server (the shortest that
 * gives the same interval, as the Rust client writes it), and the interval of one token the
 * server derives from it, ceil(1e9 / rate) ns.
 */
class Rate {
  constructor(text, intervalNs) {
    this.text = text;
    this.intervalNs = intervalNs;
    Object.freeze(this);
  }

  static perSecond(value) {
    if (typeof value === 'boolean') throw refuse('rate', 'must be a positive decimal number', value);
    const text = String(value);
    const rate = positiveDecimal('rate', text);
    if (rate.exceedsPowerOfTen(9)) throw refuse('rate', 'must be at most 1000000000 tokens per second', text);
    const interval = rate.ceilReciprocal(1000000000n);
    if (interval === null) {
      throw new AlgorithmError('capacity / rate must be at most 100 years (the time an empty bucket takes to refill)');
    }
    const atLeastOne = max(interval, 1n);
    return new Rate(shortestRate(atLeastOne), atLeastOne);
  }

  /** The shortest decimal rate whose derived interval is exactly `intervalNs`. */
  static every(intervalNs) {
    const wanted = max(intervalNs, 1n);
    for (let decimals = 0; decimals < 31; decimals += 1) {
      const digits = ceilDiv(10n ** BigInt(decimals) * 1000000000n, wanted);
      const rate = Rate.perSecond(decimalText(digits, decimals));
      if (rate.intervalNs === wanted) return rate;
    }
    throw new AlgorithmError(`no decimal rate gives one token every ${intervalNs} ns`);
  }

  static per(tokens, periodNs) {
    if (tokens <= 0n || periodNs <= 0n) throw new AlgorithmError(`${tokens} tokens per ${periodNs} ns is not a rate`);
    return Rate.every(ceilDiv(periodNs, tokens));
  }
}

/** An algorithm in the core's integer terms (what the local fallback shares out). */
class Shape {
  constructor(kind, quota, { intervalNs = 0n, windowUs: window = 0n, ttlUs = 0n } = {}) {
    this.kind = kind;
    this.quota = quota;
    this.intervalNs = intervalNs;
    this.windowUs = window;
    this.ttlUs = ttlUs;
    Object.freeze(this);
  }

  /** 1 / replicas of the quota, refilled replicas times slower; null below one unit. */
  share(replicas) {
    const count = BigInt(Math.max(replicas, 1));
    const part = this.quota / count;
    if (part === 0n) return null;
    if (this.kind === TOKEN_BUCKET || this.kind === GCRA) {
      const interval = this.intervalNs * count;
      if (interval > (this.kind === TOKEN_BUCKET ? U64_MAX : I64_MAX)) return null;
      return new Shape(this.kind, part, { intervalNs: interval });
    }
    return new Shape(this.kind, part, { windowUs: this.windowUs, ttlUs: this.ttlUs });
  }

  /** The core's quota for a call of one unit. */
  unitQuota() {
    try {
      if (this.kind === TOKEN_BUCKET) return TokenBucketParams.fromInterval(this.quota, this.intervalNs);
      if (this.kind === FIXED_WINDOW) return FixedWindowParams.new(this.quota, this.windowUs);
      if (this.kind === SLIDING_WINDOW) return SlidingWindowParams.new(this.quota, this.windowUs);
      if (this.kind === SLIDING_LOG) return SlidingLogParams.new(this.quota, this.windowUs);
      if (this.kind === GCRA) return GcraParams.fromInterval(this.quota - 1n, this.intervalNs);
      if (this.kind === CONCURRENCY) return ConcurrencyParams.new(this.quota, this.ttlUs);
    } catch (error) {
      if (error instanceof RangeError) throw new AlgorithmError(`parameters out of range: ${error.message}`);
      throw error;
    }
    throw noTwin(this.kind);
  }

  /**
   * The window the quota applies to, in ns (BigInt): a window's length, the time an empty
   * bucket (or GCRA) takes to refill; 0 for an in-flight limit.
   */
  windowNs() {
    if (this.kind === TOKEN_BUCKET || this.kind === GCRA) return min(this.quota * this.intervalNs, U64_MAX);
    if (this.kind === CONCURRENCY) return 0n;
    return this.windowUs * 1000n;
  }

  /**
   * When at least one unit more than `remaining` is available (the `t` of RateLimit), in ns
   * (BigInt): exact for buckets and fixed windows, reset_after for the sliding algorithms (an
   * upper bound), 0 for an in-flight limit.
   */
  moreInNs(remaining, resetAfterMs) {
    const left = BigInt(remaining);
    if (left >= this.quota || this.kind === CONCURRENCY) return 0n;
    const resetNs = BigInt(resetAfterMs) * 1000000n;
    if (this.kind !== TOKEN_BUCKET && this.kind !== GCRA) return resetNs;
    // The missing units come back one interval apart, the last one at reset_after.
    return max(resetNs - (this.quota - left - 1n) * this.intervalNs, 0n);
  }
}

/** One rate-limiting algorithm with its parameters (the cost is per call). */
class Algorithm {
  constructor(kind, quota, fields = {}) {
    /** The kind's short name (kinds.js, from the Rust kinds! table). */
    this.kind = kind;
    /** The most units it can admit at once: capacity, limit, or GCRA's max_burst + 1 (BigInt). */
    this.quota = quota;
    this.rate = fields.rate || null;
    this.windowUs = fields.windowUs || 0n;
    this.maxBurst = fields.maxBurst || 0n;
    this.count = fields.count || 0n;
    this.periodS = fields.periodS || 0n;
    this.ttlMs = fields.ttlMs || 0n;
    Object.freeze(this);
  }

  /** `capacity` tokens refilled at `rate` per second, or completely over `refill` seconds. */
  static tokenBucket(capacity, { rate, refill } = {}) {
    const tokens = positiveInteger('capacity', capacity);
    if ((rate === undefined || rate === null) === (refill === undefined || refill === null)) {
      throw new AlgorithmError('give either a rate (tokens per second) or a refill time, not both');
    }
    const built =
      rate !== undefined && rate !== null ? Rate.perSecond(rate) : Rate.per(tokens, secondsToUs('refill', refill) * 1000n);
    if (tokens * built.intervalNs > MAX_REFILL_NS) {
      throw new AlgorithmError('capacity / rate must be at most 100 years (the time an empty bucket takes to refill)');
    }
    return new Algorithm(TOKEN_BUCKET, tokens, { rate: built });
  }

  static windowed(kind, limit, window) {
    const count = positiveInteger('limit', limit);
    const us = windowUs('window', window);
    if (kind === SLIDING_LOG) {
      if (count > MAX_STORED_ENTRIES) {
        throw refuse('limit', `must be at most ${MAX_STORED_ENTRIES} (the ratelimit.max-log-entries setting)`, count);
      }
    } else if (count > 4294967295n) {
      throw refuse('limit', 'must be at most 4294967295', count);
    }
    return new Algorithm(kind, count, { windowUs: us });
  }

  /** At most `limit` units per window aligned to the Unix epoch. */
  static fixedWindow(limit, window) {
    return Algorithm.windowed(FIXED_WINDOW, limit, window);
  }

  /** The sliding-window counter: `limit` per window, approximate (see the README). */
  static slidingWindow(limit, window) {
    return Algorithm.windowed(SLIDING_WINDOW, limit, window);
  }

  /** The exact sliding window (one entry per admitted unit). */
  static slidingLog(limit, window) {
    return Algorithm.windowed(SLIDING_LOG, limit, window);
  }

  /** GCRA as CL.THROTTLE: max_burst + 1 at once, `count` per `period` (whole seconds). */
  static gcra(maxBurst, count, period) {
    const periodUs = secondsToUs('period', period);
    if (periodUs <= 0n || periodUs % 1000000n !== 0n) {
      throw new AlgorithmError('a GCRA period is a whole number of seconds (at least 1)');
    }
    const burst = wholeNumber('max_burst', maxBurst);
    if (burst < 0n) throw refuse('max_burst', 'must be at least 0', maxBurst);
    const perPeriod = wholeNumber('count', count);
    const seconds = periodUs / 1000000n;
    try {
      GcraParams.new(burst, perPeriod, seconds);
    } catch (error) {
      if (error instanceof GcraParamError) throw new AlgorithmError(`GCRA parameters refused: ${error.message}`);
      throw error;
    }
    return new Algorithm(GCRA, burst + 1n, { maxBurst: burst, count: perPeriod, periodS: seconds });
  }

  /** At most `limit` requests in flight; a slot never released frees itself after `ttl` seconds. */
  static concurrency(limit, ttl) {
    const count = positiveInteger('limit', limit);
    const ttlUs = secondsToUs('ttl', ttl);
    if (ttlUs % 1000n !== 0n || ttlUs < 1000n) {
      throw new AlgorithmError(`an in-flight ttl is whole milliseconds, at least 1 (got ${ttl})`);
    }
    if (ttlUs > MAX_WINDOW_US) throw refuse('ttl_ms', 'must be at most 3155760000000 (100 years)', ttlUs / 1000n);
    if (count > MAX_STORED_HOLDERS) {
      throw refuse('limit', `must be at most ${MAX_STORED_HOLDERS} (the ratelimit.max-holders setting)`, count);
    }
    return new Algorithm(CONCURRENCY, count, { ttlMs: ttlUs / 1000n });
  }

  /**
   * The algorithm of `kind` (its short name) with the parameters its command takes
   * (['10', '2'] for a token bucket of 10 refilled at 2 per second).
   */
  static fromParams(kind, params) {
    const info = BY_NAME[kind];
    if (info === undefined) throw new AlgorithmError(`algorithm is ${orList(KINDS.map((k) => k.name))} (got '${kind}')`);
    if (params.length !== info.params.length) {
      throw new AlgorithmError(`${kind} takes ${info.params.length} parameters (${info.params.map((p) => p.name).join(', ')})`);
    }
    if (kind === TOKEN_BUCKET) return Algorithm.tokenBucket(params[0], { rate: params[1] });
    if (kind === GCRA) return Algorithm.gcra(params[0], params[1], BigInt(params[2]));
    if (kind === CONCURRENCY) {
      const ttlMs = BigInt(params[1]);
      return Algorithm.concurrency(params[0], `${ttlMs / 1000n}.${String(ttlMs % 1000n).padStart(3, '0')}`);
    }
    return Algorithm.windowed(kind, params[0], params[1]);
  }

  /** The module's ALGORITHM word for it (RL.MULTI's, RL.REFUND's limit names). */
  get wireName() {
    return BY_NAME[this.kind].algorithm;
  }

  /** Its kind's own command (RL.TOKENBUCKET); null: called through RL.MULTI. */
  get command() {
    return BY_NAME[this.kind].command;
  }

  /** The parameters after the key, as the module's commands take them. */
  wireArgs() {
    if (this.kind === TOKEN_BUCKET) return [String(this.quota), this.rate.text];
    if (this.kind === SLIDING_WINDOW || this.kind === FIXED_WINDOW || this.kind === SLIDING_LOG) {
      return [String(this.quota), `${this.windowUs / 1000000n}.${String(this.windowUs % 1000000n).padStart(6, '0')}`];
    }
    if (this.kind === CONCURRENCY) return [String(this.quota), String(this.ttlMs)];
    if (this.kind === GCRA) return [String(this.maxBurst), String(this.count), String(this.periodS)];
    throw noTwin(this.kind);
  }

  shape() {
    if (this.kind === TOKEN_BUCKET) return new Shape(TOKEN_BUCKET, this.quota, { intervalNs: this.rate.intervalNs });
    if (this.kind === GCRA) {
      return new Shape(GCRA, this.quota, { intervalNs: emissionIntervalNs(this.count, this.periodS) });
    }
    if (this.kind === CONCURRENCY) return new Shape(CONCURRENCY, this.quota, { ttlUs: this.ttlMs * 1000n });
    if (this.kind === SLIDING_WINDOW || this.kind === FIXED_WINDOW || this.kind === SLIDING_LOG) {
      return new Shape(this.kind, this.quota, { windowUs: this.windowUs });
    }
    throw noTwin(this.kind);
  }

  windowNs() {
    return this.shape().windowNs();
  }

  get inFlight() {
    return this.kind === CONCURRENCY;
  }

  /** Whether two algorithms are the same (kind and parameters). */
  equals(other) {
    return other instanceof Algorithm && this.kind === other.kind && this.wireArgs().join(' ') === other.wireArgs().join(' ');
  }
}

/** A whole number (maybe 0 or negative) given as a number, BigInt or text. */
function wholeNumber(name, value) {
  const text = String(value).trim();
  if (!/^[+-]?\d+$/.test(text)) throw refuse(name, 'must be a whole number', text);
  return BigInt(text);
}

module.exports = { Algorithm, Rate, Shape, orList, positiveInteger, secondsToUs, wholeNumber };
