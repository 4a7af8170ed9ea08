'use strict';
/**
 * Token bucket (core/src/token_bucket.rs): the state is the instant the bucket was empty.
 *
 * Integer nanoseconds; the refill interval of one token is ceil(1e9 / rate); a maximum wait
 * (MAXWAIT) admits with a wait while the bucket goes into debt; a clock that steps back never
 * rewinds the state.
 */

const { TOKEN_BUCKET } = require('../kinds');
const { NEVER, NOW, ChangeIsTheNewState, Commit, Decision, Evaluation } = require('./decision');
const n = require('./numbers');

const { I64_MAX, MAX_NOW_US, NS_PER_SECOND, NS_PER_US, satI64, clamp, ceilMsFromNs, expiryMsFromNs, min, max } = n;

/** Longest time an empty bucket may take to refill: 100 Julian years, in ns. */
const MAX_REFILL_NS = 100n * 31557600n * NS_PER_SECOND;
/** Longest maximum wait: one day, in ns. */
const MAX_WAIT_NS = 86400n * NS_PER_SECOND;

/** `rate_too_high`, `refill_too_long` or `max_wait_too_long`. */
class TokenBucketParamError extends RangeError {}

/** The stored state: when the bucket held zero tokens, and the interval it was kept at. */
class TokenBucket {
  constructor(emptyAtNs, intervalNs) {
    this.emptyAtNs = emptyAtNs;
    this.intervalNs = intervalNs;
  }
}

class TokenBucketParams extends ChangeIsTheNewState {
  constructor(capacity, intervalNs, costUnits = 1n, maxWaitNs = 0n) {
    super();
    this.capacity = capacity;
    this.intervalNs = intervalNs;
    this.costUnits = costUnits;
    this.maxWaitNs = maxWaitNs;
    Object.freeze(this);
  }

  get kind() {
    return TOKEN_BUCKET;
  }

  static new(capacity, rate, cost = 1n) {
    if (rate.exceedsPowerOfTen(9)) throw new TokenBucketParamError('rate_too_high');
    const intervalNs = rate.ceilReciprocal(NS_PER_SECOND);
    if (intervalNs === null) throw new TokenBucketParamError('refill_too_long');
    return TokenBucketParams.fromInterval(capacity, intervalNs, cost);
  }

  static fromInterval(capacity, intervalNs, cost = 1n) {
    if (capacity * intervalNs > MAX_REFILL_NS) throw new TokenBucketParamError('refill_too_long');
    return new TokenBucketParams(max(capacity, 1n), max(intervalNs, 1n), max(cost, 1n), 0n);
  }

  withMaxWaitNs(maxWaitNs) {
    if (maxWaitNs > MAX_WAIT_NS) throw new TokenBucketParamError('max_wait_too_long');
    return new TokenBucketParams(this.capacity, this.intervalNs, this.costUnits, maxWaitNs);
  }

  get cost() {
    return this.costUnits;
  }

  withCost(cost) {
    return new TokenBucketParams(this.capacity, this.intervalNs, max(cost, 1n), this.maxWaitNs);
  }

  countedCost() {
    return this.cost;
  }

  refillNs() {
    return min(this.capacity * this.intervalNs, I64_MAX);
  }

  evaluate(state, nowUs) {
    const view = new View(state, this, nowUs);
    const retry = view.retry(this, view.emptyAt);
    if (retry === NOW) {
      const emptyAt = satI64(view.emptyAt + view.needed(this));
      return new Evaluation(view.decision(this, true, emptyAt, view.wait(emptyAt)), view.commit(this, emptyAt));
    }
    return new Evaluation(view.decision(this, false, view.emptyAt, retry), null);
  }

  refund(state, nowUs) {
    const view = new View(state, this, nowUs);
    const fullSince = satI64(view.now - view.refill);
    const emptyAt = max(satI64(view.emptyAt - view.needed(this)), fullSince);
    const refunded = state !== null && emptyAt < view.emptyAt;
    const retry = view.retry(this, emptyAt);
    return new Evaluation(view.decision(this, refunded, emptyAt, retry), refunded ? view.commit(this, emptyAt) : null);
  }

  grantable(state, upTo, nowUs) {
    const view = new View(state, this, nowUs);
    const withinWait = satI64(satI64(view.now - view.emptyAt) + view.maxWait);
    return min(min(view.wholeTokens(withinWait), this.capacity), upTo);
  }
}

function emptyAtFor(state, params, nowNs) {
  if (state.intervalNs === params.intervalNs || state.emptyAtNs >= nowNs) return state.emptyAtNs;
  const elapsed = nowNs - state.emptyAtNs;
  const oldFull = params.capacity * state.intervalNs;
  const rescaled = elapsed >= oldFull ? params.refillNs() : (elapsed * params.intervalNs) / state.intervalNs;
  return satI64(nowNs - rescaled);
}

class View {
  constructor(state, params, nowUs) {
    this.now = satI64(clamp(nowUs, 0n, MAX_NOW_US) * NS_PER_US);
    this.refill = params.refillNs();
    const fullSince = satI64(this.now - this.refill);
    const emptyAt = state === null ? fullSince : emptyAtFor(state, params, this.now);
    this.emptyAt = max(emptyAt, fullSince);
    this.interval = min(params.intervalNs, I64_MAX);
    this.maxWait = min(params.maxWaitNs, I64_MAX);
  }

  needed(params) {
    return satI64(min(params.cost, I64_MAX) * this.interval);
  }

  retry(params, emptyAt) {
    if (params.cost > params.capacity) return NEVER;
    const missing = satI64(satI64(this.needed(params) - satI64(this.now - emptyAt)) - this.maxWait);
    return missing <= 0n ? NOW : max(ceilMsFromNs(missing), 1n);
  }

  wait(emptyAt) {
    return ceilMsFromNs(satI64(emptyAt - this.now));
  }

  wholeTokens(refilledNs) {
    return max(refilledNs, 0n) / this.interval;
  }

  decision(params, allowed, emptyAt, retry) {
    return new Decision(
      allowed,
      this.wholeTokens(satI64(this.now - emptyAt)),
      retry,
      ceilMsFromNs(satI64(satI64(emptyAt + this.refill) - this.now)),
      params.capacity,
    );
  }

  commit(params, emptyAt) {
    return new Commit(new TokenBucket(emptyAt, params.intervalNs), expiryMsFromNs(satI64(emptyAt + this.refill)));
  }
}

module.exports = { MAX_REFILL_NS, MAX_WAIT_NS, TokenBucket, TokenBucketParams, TokenBucketParamError };
