'use strict';
/**
 * In-flight limits (core/src/concurrency.rs): at most `limit` live holders at once.
 *
 * Holders are kept sorted by (expiry, id), the Rust core's canonical order, so expired holders
 * are a prefix and the same changes give the same list. Holder ids are ASCII here (the
 * limiter's own ids), so comparing strings compares their bytes.
 */

const { CONCURRENCY } = require('../kinds');
const { NEVER, NOW, Commit, Decision, Evaluation } = require('./decision');
const n = require('./numbers');

const { MAX_NOW_US, MAX_WINDOW_US, MIN_WINDOW_US, ceilMsFromUs, clamp, expiryMsFromUs, I64_MIN, max } = n;

/** Most holders a list stores (the largest ratelimit.max-holders). */
const MAX_STORED_HOLDERS = 100000n;
const MIN_TTL_US = MIN_WINDOW_US;
const MAX_TTL_US = MAX_WINDOW_US;
const MAX_HOLDER_ID_BYTES = 128;

/** A ttl out of range, a limit above the maximum holders, or a bad holder id. */
class ConcurrencyParamError extends RangeError {}

function before(expiryA, idA, expiryB, idB) {
  return expiryA < expiryB || (expiryA === expiryB && idA < idB);
}

class Concurrency {
  /** `holders`: [expiry in Unix µs, holder id], sorted. */
  constructor(holders = []) {
    this.holders = holders;
  }

  /** How many holders have expired at `atUs` (their expiry is not after it). */
  expiredAt(atUs) {
    let low = 0;
    let high = this.holders.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (atUs < this.holders[middle][0]) high = middle;
      else low = middle + 1;
    }
    return low;
  }

  position(holder, start) {
    for (let index = start; index < this.holders.length; index += 1) {
      if (this.holders[index][1] === holder) return index;
    }
    return null;
  }

  remove(holder) {
    const index = this.holders.findIndex((entry) => entry[1] === holder);
    if (index >= 0) this.holders.splice(index, 1);
  }

  insert(expiryUs, holder) {
    if (BigInt(this.holders.length) >= MAX_STORED_HOLDERS) return;
    let low = 0;
    let high = this.holders.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      const [expiry, id] = this.holders[middle];
      if (before(expiryUs, holder, expiry, id)) high = middle;
      else low = middle + 1;
    }
    this.holders.splice(low, 0, [expiryUs, holder]);
  }
}

class ConcurrencyChange {
  /** `action`: `acquire` (with `expiresAtUs`) or `release`. */
  constructor(atUs, action, holder, expiresAtUs = 0n) {
    this.atUs = atUs;
    this.action = action;
    this.holder = holder;
    this.expiresAtUs = expiresAtUs;
  }
}

function utf8Length(text) {
  return Buffer.byteLength(text, 'utf8');
}

class ConcurrencyParams {
  constructor(limit, ttlUs, holder = null, costUnits = 1n) {
    this.limit = limit;
    this.ttlUs = ttlUs;
    this.holder = holder;
    this.costUnits = costUnits;
    Object.freeze(this);
  }

  get kind() {
    return CONCURRENCY;
  }

  static new(limit, ttlUs, maxHolders = MAX_STORED_HOLDERS) {
    if (ttlUs < MIN_TTL_US || ttlUs > MAX_TTL_US) throw new ConcurrencyParamError('ttl out of range');
    if (limit > clamp(maxHolders, 1n, MAX_STORED_HOLDERS)) throw new ConcurrencyParamError('limit above max holders');
    return new ConcurrencyParams(max(limit, 1n), ttlUs);
  }

  withHolder(holder) {
    const length = utf8Length(holder);
    if (length < 1 || length > MAX_HOLDER_ID_BYTES) throw new ConcurrencyParamError('a holder id is 1 to 128 bytes');
    return new ConcurrencyParams(this.limit, this.ttlUs, holder, this.costUnits);
  }

  get cost() {
    return this.costUnits;
  }

  withCost(cost) {
    return new ConcurrencyParams(this.limit, this.ttlUs, this.holder, max(cost, 1n));
  }

  countedCost() {
    return 1n;
  }

  evaluate(state, nowUs) {
    const view = new View(state, this, nowUs);
    const admitted = view.admits(this);
    if (this.holder === null || !admitted) return new Evaluation(view.unchanged(this, admitted), null);
    const renewed = view.own === null ? null : view.holders[view.own][0];
    const expires = max(view.now + this.ttlUs, renewed === null ? I64_MIN : renewed);
    const live = view.live(view.own) + 1n;
    const lastOther = view.lastLiveExpiry(view.own);
    const last = lastOther === null ? expires : max(lastOther, expires);
    const change = new ConcurrencyChange(view.now, 'acquire', this.holder, expires);
    return new Evaluation(view.decision(this, true, live, last, NOW), view.commit(change, last));
  }

  refund(state, nowUs) {
    const view = new View(state, this, nowUs);
    if (this.holder === null || view.own === null) return new Evaluation(view.unchanged(this, false), null);
    const skip = view.own;
    const last = view.lastLiveExpiry(skip);
    const retry = view.retry(this, skip);
    const change = new ConcurrencyChange(view.now, 'release', this.holder);
    return new Evaluation(view.decision(this, true, view.live(skip), last, retry), view.commit(change, last));
  }

  grantable(state, upTo, nowUs) {
    return new View(state, this, nowUs).admits(this) ? upTo : 0n;
  }

  static apply(state, change) {
    state.holders.splice(0, state.expiredAt(change.atUs));
    state.remove(change.holder);
    if (change.action === 'acquire') state.insert(change.expiresAtUs, change.holder);
    return state;
  }

  static create(change) {
    return ConcurrencyParams.apply(new Concurrency(), change);
  }

  static isVacant(state) {
    return state.holders.length === 0;
  }
}

class View {
  constructor(state, params, nowUs) {
    const stored = state === null ? new Concurrency() : state;
    this.holders = stored.holders;
    this.now = clamp(nowUs, 0n, MAX_NOW_US);
    this.start = stored.expiredAt(this.now);
    this.own = params.holder === null ? null : stored.position(params.holder, this.start);
  }

  live(skip) {
    return BigInt(Math.max(this.holders.length - this.start - (skip !== null ? 1 : 0), 0));
  }

  admits(params) {
    return (params.holder !== null && this.own !== null) || this.live(null) < params.limit;
  }

  nthLiveExpiry(k, skip) {
    if (k < 1n) return null;
    let index = Number(k) - 1 + this.start;
    if (skip !== null && skip <= index) index += 1;
    return index < this.holders.length ? this.holders[index][0] : null;
  }

  lastLiveExpiry(skip) {
    return this.nthLiveExpiry(this.live(skip), skip);
  }

  retry(params, skip) {
    const live = this.live(skip);
    if (live < params.limit) return NOW;
    const expiry = this.nthLiveExpiry(live - params.limit + 1n, skip);
    return expiry === null ? NEVER : max(this.msUntil(expiry), 1n);
  }

  msUntil(instantUs) {
    return ceilMsFromUs(instantUs - this.now);
  }

  decision(params, allowed, live, last, retry) {
    const reset = last === null ? 0n : this.msUntil(last);
    return new Decision(allowed, max(params.limit - live, 0n), retry, reset, params.limit);
  }

  unchanged(params, allowed) {
    const retry = params.holder !== null && this.own !== null ? NOW : this.retry(params, null);
    return this.decision(params, allowed, this.live(null), this.lastLiveExpiry(null), retry);
  }

  commit(change, last) {
    return new Commit(change, expiryMsFromUs(last === null ? this.now : last));
  }
}

module.exports = {
  MAX_STORED_HOLDERS,
  MAX_HOLDER_ID_BYTES,
  Concurrency,
  ConcurrencyChange,
  ConcurrencyParams,
  ConcurrencyParamError,
};
