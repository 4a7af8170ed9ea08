'use strict';
/**
 * GCRA as redis-cell's CL.THROTTLE computes it (core/src/gcra.rs), in integer ns.
 *
 * Where redis-cell uses floating point (the emission interval, its whole seconds), the same
 * IEEE-754 double operations are done here: JavaScript numbers are doubles, rounded alike
 * (Number(bigint) rounds to nearest, ties to even, as Rust's `as f64`).
 */

const { GCRA } = require('../kinds');
const { NEVER, NOW, ChangeIsTheNewState, Commit, Decision, Evaluation } = require('./decision');
const n = require('./numbers');

const { I64_MAX, I64_MIN, MAX_NOW_US, NS_PER_SECOND, NS_PER_US, ceilMsFromNs, clamp, expiryMsFromNs, satI64, tdiv, trem, min, max } = n;

/** Largest tolerance interval * (max_burst + 1): 100 Julian years, in ns. */
const MAX_TOLERANCE_NS = 100n * 31557600n * 1000000000n;

/** `ZeroRate`, `NegativeRate`, `NegativeBurst` or `ToleranceTooLong`. */
class GcraParamError extends RangeError {}

/** Rust's `f64 as i64`: truncation, saturating, NaN to 0. */
function f64ToI64(value) {
  if (Number.isNaN(value)) return 0n;
  if (value >= 9.223372036854775807e18) return I64_MAX;
  if (value <= -9.223372036854775808e18) return I64_MIN;
  return BigInt(Math.trunc(value));
}

/** redis-cell's trunc(f64(period × 1e9) / f64(count)). */
function emissionIntervalNs(count, period) {
  if (count === 0n || period === 0n) throw new GcraParamError('ZeroRate');
  const interval = f64ToI64(Number(period * NS_PER_SECOND) / Number(count));
  if (interval === 0n) throw new GcraParamError('ZeroRate');
  if (interval < 0n) throw new GcraParamError('NegativeRate');
  return interval;
}

class Gcra {
  constructor(tatNs) {
    this.tatNs = tatNs;
  }
}

class CellOutcome {
  constructor(limited, limit, remaining, retryAfterNs, resetAfterNs) {
    this.limited = limited;
    this.limit = limit;
    this.remaining = remaining;
    this.retryAfterNs = retryAfterNs;
    this.resetAfterNs = resetAfterNs;
  }
}

/** redis-cell's whole seconds: `as_seconds_f64() as i64` plus one for any ms fraction. */
function cellSeconds(ns) {
  const seconds = tdiv(ns, NS_PER_SECOND);
  const nanos = trem(ns, NS_PER_SECOND);
  const whole = f64ToI64(Number(seconds) + Number(nanos) / 1000000000.0);
  return tdiv(nanos, 1000000n) > 0n ? satI64(whole + 1n) : whole;
}

/** The CL.THROTTLE reply: [limited, limit, remaining, retry_s, reset_s]. */
function cellReply(outcome) {
  const retry = outcome.retryAfterNs === null ? -1n : cellSeconds(outcome.retryAfterNs);
  return [outcome.limited ? 1n : 0n, outcome.limit, outcome.remaining, retry, cellSeconds(outcome.resetAfterNs)];
}

function cellRemaining(tolerance, interval, ttl) {
  const nextNs = tolerance - ttl;
  if (nextNs <= -interval) return 0n;
  const nextUs = tdiv(nextNs, NS_PER_US);
  const intervalUs = tdiv(interval, NS_PER_US);
  if (intervalUs === 0n) return nextUs > 0n ? I64_MAX : nextUs < 0n ? I64_MIN : 0n;
  const quotient = tdiv(nextUs, intervalUs);
  return quotient >= I64_MIN && quotient <= I64_MAX ? quotient : 0n;
}

class GcraParams extends ChangeIsTheNewState {
  constructor(maxBurst, intervalNs, quantity = 1n) {
    super();
    this.maxBurst = maxBurst;
    this.intervalNs = intervalNs;
    this.quantity = quantity;
    Object.freeze(this);
  }

  get kind() {
    return GCRA;
  }

  static new(maxBurst, count, period, quantity = 1n) {
    return GcraParams.fromInterval(maxBurst, emissionIntervalNs(count, period), quantity);
  }

  static fromInterval(maxBurst, intervalNs, quantity = 1n) {
    if (intervalNs === 0n) throw new GcraParamError('ZeroRate');
    if (intervalNs < 0n) throw new GcraParamError('NegativeRate');
    if (maxBurst < 0n) throw new GcraParamError('NegativeBurst');
    if (intervalNs * (maxBurst + 1n) > MAX_TOLERANCE_NS) throw new GcraParamError('ToleranceTooLong');
    return new GcraParams(maxBurst, intervalNs, quantity);
  }

  withQuantity(quantity) {
    return new GcraParams(this.maxBurst, this.intervalNs, quantity);
  }

  get limit() {
    return max(this.maxBurst, 0n) + 1n;
  }

  toleranceNs() {
    return satI64(this.intervalNs * satI64(this.maxBurst + 1n));
  }

  get cost() {
    return max(this.quantity, 0n);
  }

  withCost(cost) {
    return this.withQuantity(max(min(cost, I64_MAX), 1n));
  }

  countedCost() {
    return this.cost;
  }

  /** The evaluation and redis-cell's own outcome of one CL.THROTTLE. */
  throttle(state, nowUs) {
    const view = new View(state, this, nowUs);
    const [limited, newTat, retryNs, ttl] = view.judge(view.tat);
    const cell = new CellOutcome(
      limited,
      satI64(this.maxBurst + 1n),
      view.remaining(this, ttl),
      retryNs === null ? null : satI64(retryNs),
      satI64(ttl),
    );
    const decision = view.decision(this, !limited, limited, retryNs, ttl);
    const commit = !limited && newTat !== view.tat ? commitOf(newTat) : null;
    return [new Evaluation(decision, commit), cell];
  }

  evaluate(state, nowUs) {
    return this.throttle(state, nowUs)[0];
  }

  refund(state, nowUs) {
    const view = new View(state, this, nowUs);
    const tat = max(view.tat - max(view.increment, 0n), view.now);
    const refunded = tat < view.tat;
    const [limited, , retryNs] = view.judge(tat);
    const decision = view.decision(this, refunded, limited, retryNs, tat - view.now);
    return new Evaluation(decision, refunded ? commitOf(tat) : null);
  }

  grantable(state, upTo, nowUs) {
    const view = new View(state, this, nowUs);
    const slack = view.tolerance - (view.tat - view.now);
    return min(max(tdiv(slack, view.interval), 0n), upTo);
  }
}

function commitOf(tat) {
  return new Commit(new Gcra(satI64(tat)), expiryMsFromNs(tat));
}

class View {
  constructor(state, params, nowUs) {
    this.now = clamp(nowUs, 0n, MAX_NOW_US) * NS_PER_US;
    this.interval = params.intervalNs;
    this.tolerance = params.toleranceNs();
    this.increment = this.interval * params.quantity;
    this.tat = state === null ? this.now : max(state.tatNs, this.now);
  }

  /** [limited, newTat, retryNs, ttl] for a call against tat >= now. */
  judge(tat) {
    let newTat = tat + this.increment;
    const diff = this.now - (newTat - this.tolerance);
    if (diff < 0n) {
      const retry = this.increment <= this.tolerance ? -diff : null;
      return [true, tat, retry, tat - this.now];
    }
    newTat = max(newTat, this.now);
    return [false, newTat, null, newTat - this.now];
  }

  remaining(params, ttl) {
    return min(cellRemaining(this.tolerance, this.interval, ttl), satI64(params.maxBurst + 1n));
  }

  decision(params, allowed, limited, retryNs, ttl) {
    let retry;
    if (!limited) retry = NOW;
    else if (retryNs === null) retry = NEVER;
    else retry = max(ceilMsFromNs(retryNs), 1n);
    return new Decision(allowed, max(this.remaining(params, ttl), 0n), retry, ceilMsFromNs(ttl), params.limit);
  }
}

module.exports = {
  MAX_TOLERANCE_NS,
  Gcra,
  GcraParams,
  GcraParamError,
  CellOutcome,
  cellReply,
  cellSeconds,
  emissionIntervalNs,
};
