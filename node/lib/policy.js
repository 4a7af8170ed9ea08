'use strict';
/**
 * Policies: named sets of limits checked together, and what to do when the store is out of
 * reach (the Rust client's policy.rs, the same defaults and the same refusals).
 */

const { BY_NAME } = require('./kinds');
const { Algorithm, secondsToUs } = require('./algorithms');
const { AlgorithmError, PolicyError } = require('./errors');
const { KeyTemplate, TemplateError } = require('./keys');
const { U64_MAX } = require('./core/numbers');

const NAME = /^[A-Za-z0-9_.-]+$/;
/** Most limits in one policy: the most keys one RL.MULTI takes. */
const MAX_LIMITS = 16;
/**
 * Default store timeout, 50 ms: chosen from measurement by the Rust client (round trips p99.7
 * 10 ms, at most 25-50 ms under 16 connections on a loaded 2-vCPU machine).
 */
const DEFAULT_TIMEOUT_MS = 50;
/** Longest pacing wait (MAXWAIT): a day. */
const MAX_WAIT_MS = 86400000;
/** What a check does when the store cannot be reached in time. */
const FALLBACKS = Object.freeze(['local', 'open', 'closed']);

function checkName(name, what = 'name') {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new PolicyError(`bad ${what} '${name}': use ASCII letters, digits, '_', '-' and '.'`);
  }
  return name;
}

/** A duration given in seconds (`name`) or in milliseconds (`nameMs`), as whole µs; undefined when neither. */
function duration(options, name, label) {
  const seconds = options[name];
  const millis = options[`${name}Ms`];
  const given = (value) => value !== undefined && value !== null;
  if (given(seconds) && given(millis)) throw new AlgorithmError(`give either ${name} (seconds) or ${name}Ms, not both`);
  if (given(millis)) return secondsToUs(label, typeof millis === 'bigint' ? millis * 1000n : millisText(millis)) ;
  if (given(seconds)) return secondsToUs(label, seconds);
  return undefined;
}

/** Milliseconds (a number or text) as a decimal text of seconds, exactly. */
function millisText(ms) {
  const text = String(ms).trim();
  const match = /^(\d+)(?:\.(\d+))?$/.exec(text);
  if (match === null) return `${text}e-3`;
  return `${match[1]}${match[2] ? `.${match[2]}` : ''}e-3`;
}

/** Seconds (whole µs, BigInt) as exact decimal text. */
function usText(us) {
  const sign = us < 0n ? '-' : '';
  const abs = us < 0n ? -us : us;
  return `${sign}${abs / 1000000n}.${String(abs % 1000000n).padStart(6, '0')}`;
}

/**
 * Claim `units` per store call (more for a hot key, up to `maxUnits`, default 4 × units) and
 * spend them from memory for `lifetimeMs` (default 1,000).
 *
 * Bound: a unit claimed at one instant may be spent up to a lifetime later, so over any
 * interval a key can exceed its allowance by at most the units outstanding in leases at the
 * interval's start, replicas × maxUnits.
 */
class Lease {
  constructor({ units, maxUnits = null, lifetimeMs = 1000 } = {}) {
    this.units = Number(units);
    this.maxUnits = maxUnits === null || maxUnits === undefined ? null : Number(maxUnits);
    this.lifetimeMs = Number(lifetimeMs);
    Object.freeze(this);
  }

  get cap() {
    return this.maxUnits === null ? this.units * 4 : this.maxUnits;
  }

  claimFor(cost, waiting, recent) {
    const demand = cost * (waiting + 1);
    return Math.max(Math.min(Math.max(demand, recent), this.cap), this.units, cost);
  }
}

/** One limit of a policy: an algorithm applied to the key a template renders. */
class Limit {
  constructor(name, algorithm, key, weight, maxWaitMs) {
    this.name = name;
    this.algorithm = algorithm;
    this.key = key;
    /** Units charged per unit of cost (a BigInt). */
    this.weight = weight;
    /** The pacing wait (MAXWAIT) in ms, or null. */
    this.maxWaitMs = maxWaitMs;
    Object.freeze(this);
  }

  /** A limit of `algorithm` (an Algorithm) on the key `options.key` renders. */
  static of(name, algorithm, { key, weight = 1, maxWaitMs = null } = {}) {
    checkName(name, 'limit name');
    let template;
    try {
      template = new KeyTemplate(key);
    } catch (error) {
      if (error instanceof TemplateError) throw new PolicyError(`limit '${name}': ${error.message}`);
      throw error;
    }
    const wholeWeight = typeof weight === 'bigint' ? weight : Number.isSafeInteger(weight) ? BigInt(weight) : null;
    if (wholeWeight === null || wholeWeight < 1n || wholeWeight > U64_MAX) {
      throw new PolicyError(`limit '${name}': the weight is a whole number from 1 to ${U64_MAX} (got ${weight})`);
    }
    let wait = null;
    if (maxWaitMs !== null && maxWaitMs !== undefined) {
      if (!BY_NAME[algorithm.kind].paced) throw new PolicyError(`limit '${name}': only token buckets can be paced`);
      if (!Number.isSafeInteger(Number(maxWaitMs)) || Number(maxWaitMs) < 0 || Number(maxWaitMs) > MAX_WAIT_MS) {
        throw new PolicyError(`limit '${name}': the wait is whole milliseconds, at most a day`);
      }
      wait = Number(maxWaitMs);
    }
    return new Limit(name, algorithm, template, wholeWeight, wait);
  }

  static build(name, make, options) {
    let algorithm;
    try {
      algorithm = make();
    } catch (error) {
      if (error instanceof AlgorithmError) throw new PolicyError(`limit '${name}': ${error.message}`);
      throw error;
    }
    return Limit.of(name, algorithm, options);
  }

  /**
   * `capacity` tokens refilled at `rate` per second, or completely over `refill` seconds
   * (`refillMs`). `maxWaitMs` paces instead of refusing (the module's MAXWAIT).
   */
  static tokenBucket(name, options = {}) {
    return Limit.build(
      name,
      () => {
        const refillUs = duration(options, 'refill', 'refill');
        return Algorithm.tokenBucket(options.capacity, {
          rate: options.rate,
          refill: refillUs === undefined ? undefined : usText(refillUs),
        });
      },
      options,
    );
  }

  /** At most `limit` per `window` seconds (`windowMs`), windows aligned to the Unix epoch. */
  static fixedWindow(name, options = {}) {
    return Limit.build(name, () => Algorithm.fixedWindow(options.limit, windowOf(options)), options);
  }

  /** The sliding-window counter: `limit` per `window` seconds, approximate. */
  static slidingWindow(name, options = {}) {
    return Limit.build(name, () => Algorithm.slidingWindow(options.limit, windowOf(options)), options);
  }

  /** The exact sliding window: `limit` per `window` seconds, one entry per admitted unit. */
  static slidingLog(name, options = {}) {
    return Limit.build(name, () => Algorithm.slidingLog(options.limit, windowOf(options)), options);
  }

  /** GCRA as CL.THROTTLE: `maxBurst + 1` at once, `count` per `period` whole seconds. */
  static gcra(name, options = {}) {
    return Limit.build(name, () => Algorithm.gcra(options.maxBurst, options.count, options.period), options);
  }

  /** At most `limit` requests in flight (released by the request, or after `ttl` seconds / `ttlMs`). */
  static concurrency(name, options = {}) {
    return Limit.build(
      name,
      () => {
        const ttlUs = duration(options, 'ttl', 'ttl');
        return Algorithm.concurrency(options.limit, ttlUs === undefined ? undefined : usText(ttlUs));
      },
      { ...options, weight: 1 },
    );
  }
}

function windowOf(options) {
  const us = duration(options, 'window', 'window');
  return us === undefined ? undefined : usText(us);
}

/**
 * A named set of limits: a request is admitted only if every limit admits it, and then every
 * limit is charged.
 *
 * `tenantInput` names the input holding the tenant whose limits come from the plans store
 * (see Policy.fromStore); the limits given are then the defaults.
 */
class Policy {
  constructor(name, limits, options = {}) {
    const {
      lease = null,
      fallback = 'local',
      timeoutMs = DEFAULT_TIMEOUT_MS,
      denyCache = true,
      tenantInput = null,
    } = options;
    checkName(name, 'policy name');
    const list = [...(limits || [])];
    if (!FALLBACKS.includes(fallback)) {
      throw new PolicyError(`policy '${name}': fallback is open, closed or local (got '${fallback}')`);
    }
    if (list.length === 0) throw new PolicyError(`policy '${name}' has no limits`);
    if (list.length > MAX_LIMITS) {
      throw new PolicyError(`policy '${name}' has more than ${MAX_LIMITS} limits (RL.MULTI's maximum)`);
    }
    list.forEach((limit, index) => {
      if (!(limit instanceof Limit)) throw new PolicyError(`policy '${name}': limit ${index} is not a Limit`);
      const earlier = list.slice(0, index);
      if (earlier.some((other) => other.name === limit.name)) {
        throw new PolicyError(`policy '${name}': two limits are named '${limit.name}'`);
      }
      if (earlier.some((other) => other.key.text === limit.key.text)) {
        throw new PolicyError(`policy '${name}': two limits use the key '${limit.key.text}': a key holds one limiter`);
      }
    });
    if (!(Number(timeoutMs) > 0)) throw new PolicyError(`policy '${name}': the store timeout must be above zero`);
    const leased = lease === null || lease === undefined ? null : lease instanceof Lease ? lease : new Lease(lease);
    if (leased !== null) {
      if (!(leased.units >= 1)) {
        throw new PolicyError(`policy '${name}': a lease of 0 units claims nothing: give at least 1 (or no lease)`);
      }
      if (leased.cap < leased.units) {
        throw new PolicyError(`policy '${name}': the lease's maxUnits (${leased.cap}) is below its units (${leased.units})`);
      }
      if (!(leased.lifetimeMs > 0)) throw new PolicyError(`policy '${name}': the lease lifetime must be above zero`);
      for (const limit of list) {
        if (limit.algorithm.inFlight) {
          throw new PolicyError(`policy '${name}': limit '${limit.name}' is an in-flight limit: its policy cannot be leased`);
        }
        if (limit.maxWaitMs !== null) {
          throw new PolicyError(
            `policy '${name}': limit '${limit.name}': a paced limit cannot be leased (the module refuses PARTIAL with MAXWAIT)`,
          );
        }
      }
    }
    if (tenantInput !== null && !/^[A-Za-z0-9_-]+$/.test(tenantInput)) {
      throw new PolicyError(`policy '${name}': bad tenant input name '${tenantInput}'`);
    }
    const inputs = [];
    for (const limit of list) {
      for (const input of limit.key.inputs()) if (!inputs.includes(input)) inputs.push(input);
    }
    this.name = name;
    this.limits = Object.freeze(list);
    this.lease = leased;
    this.fallback = fallback;
    this.timeoutMs = Number(timeoutMs);
    this.denyCache = Boolean(denyCache);
    this.tenantInput = tenantInput;
    /** The inputs a check must give (each once, in order of first use). */
    this.inputs = Object.freeze(tenantInput === null ? inputs : [tenantInput]);
    Object.freeze(this);
  }

  /**
   * A policy whose limits come from the plans store (rlctl) for the tenant named by input
   * `tenant`; `defaults` apply to a tenant on no plan, and to everyone until the store has been
   * read. Its keys are the store's (rl:plan:{tenant}:...), the same whatever plan sets a limit,
   * so a change applies to the tenant's existing state.
   */
  static fromStore(name, { tenant = 'tenant', defaults = [], ...options } = {}) {
    return new Policy(name, defaults, { ...options, tenantInput: tenant });
  }

  get holdsSlots() {
    return this.limits.some((limit) => limit.algorithm.inFlight);
  }
}

module.exports = { DEFAULT_TIMEOUT_MS, MAX_LIMITS, Lease, Limit, Policy, checkName, usText };
