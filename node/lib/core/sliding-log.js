'use strict';
/** Sliding log (core/src/sliding_log.rs): the exact sliding window, one timestamp per unit. */

const { SLIDING_LOG } = require('../kinds');
const { NEVER, NOW, Commit, Decision, Evaluation } = require('./decision');
const n = require('./numbers');
const { checkWindow } = require('./windows');

const { MAX_NOW_US, ceilMsFromUs, clamp, expiryMsFromUs, satU64, min, max } = n;

/** Most entries a log ever stores (and the largest ratelimit.max-log-entries). */
const MAX_STORED_ENTRIES = 10000000n;

/** A window out of range, or a limit above the server's maximum entries. */
class SlidingLogParamError extends RangeError {}

/** Entries: admission instants (Unix µs), sorted. */
class SlidingLog {
  constructor(entries = [], asOfUs = 0n) {
    this.entries = entries;
    this.asOfUs = asOfUs;
  }
}

class SlidingLogChange {
  /** `action`: `admit` or `refund`. */
  constructor(atUs, expired, action, units) {
    this.atUs = atUs;
    this.expired = expired;
    this.action = action;
    this.units = units;
  }
}

/** The first index whose entry is above `value` (Python's bisect_right). */
function bisectRight(entries, value) {
  let low = 0;
  let high = entries.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (value < entries[middle]) high = middle;
    else low = middle + 1;
  }
  return low;
}

class SlidingLogParams {
  constructor(limit, windowUs, costUnits = 1n) {
    this.limit = limit;
    this.windowUs = windowUs;
    this.costUnits = costUnits;
    Object.freeze(this);
  }

  get kind() {
    return SLIDING_LOG;
  }

  static new(limit, windowUs, cost = 1n, maxEntries = MAX_STORED_ENTRIES) {
    try {
      checkWindow(windowUs);
    } catch (error) {
      throw new SlidingLogParamError(error.message);
    }
    if (limit > clamp(maxEntries, 1n, MAX_STORED_ENTRIES)) throw new SlidingLogParamError('limit_above_max_entries');
    return new SlidingLogParams(max(limit, 1n), windowUs, max(cost, 1n));
  }

  get cost() {
    return this.costUnits;
  }

  withCost(cost) {
    return new SlidingLogParams(this.limit, this.windowUs, max(cost, 1n));
  }

  countedCost() {
    return this.cost;
  }

  evaluate(state, nowUs) {
    const view = new View(state, this, nowUs);
    const inWindow = view.inWindow();
    if (!(this.cost <= this.limit && satU64(inWindow + this.cost) <= this.limit)) {
      return new Evaluation(view.decision(this, false, inWindow), null);
    }
    const decision = new Decision(
      true,
      max(this.limit - satU64(inWindow + this.cost), 0n),
      NOW,
      view.msUntilGone(view.at),
      this.limit,
    );
    const change = new SlidingLogChange(view.at, view.start, 'admit', this.cost);
    return new Evaluation(decision, new Commit(change, expiryMsFromUs(view.at + view.window)));
  }

  refund(state, nowUs) {
    const view = new View(state, this, nowUs);
    const inWindow = view.inWindow();
    const givenBack = min(this.cost, inWindow);
    const after = inWindow - givenBack;
    const decision = view.decision(this, givenBack > 0n, after);
    if (givenBack === 0n) return new Evaluation(decision, null);
    const newest = view.nthInWindow(after);
    const expires = expiryMsFromUs(newest === null ? view.at : newest + view.window);
    const change = new SlidingLogChange(view.at, view.start, 'refund', givenBack);
    return new Evaluation(decision, new Commit(change, expires));
  }

  grantable(state, upTo, nowUs) {
    const view = new View(state, this, nowUs);
    return min(max(this.limit - view.inWindow(), 0n), upTo);
  }

  static apply(state, change) {
    state.asOfUs = clamp(max(state.asOfUs, change.atUs), 0n, MAX_NOW_US);
    state.entries.splice(0, Math.min(change.expired, state.entries.length));
    if (change.action === 'admit') {
      const room = max(MAX_STORED_ENTRIES - BigInt(state.entries.length), 0n);
      const count = Number(min(change.units, room));
      for (let index = 0; index < count; index += 1) state.entries.push(state.asOfUs);
    } else {
      const keep = Math.max(state.entries.length - Number(min(change.units, BigInt(state.entries.length))), 0);
      state.entries.length = keep;
    }
    return state;
  }

  static create(change) {
    return SlidingLogParams.apply(new SlidingLog(), change);
  }

  static isVacant() {
    return false;
  }
}

class View {
  constructor(state, params, nowUs) {
    this.entries = state === null ? [] : state.entries;
    this.now = clamp(nowUs, 0n, MAX_NOW_US);
    this.at = state === null ? this.now : max(state.asOfUs, this.now);
    this.window = params.windowUs;
    /** An index into the entries (a Number). */
    this.start = bisectRight(this.entries, this.at - this.window);
  }

  inWindow() {
    return BigInt(Math.max(this.entries.length - this.start, 0));
  }

  nthInWindow(k) {
    if (k < 1n) return null;
    const index = this.start + Number(k) - 1;
    return index < this.entries.length ? this.entries[index] : null;
  }

  msUntilGone(t) {
    return ceilMsFromUs(t + this.window - this.now);
  }

  retry(params, inWindow) {
    if (params.cost > params.limit) return NEVER;
    const needed = max(satU64(inWindow + params.cost) - params.limit, 0n);
    if (needed === 0n) return NOW;
    const last = this.nthInWindow(needed);
    return max(this.msUntilGone(last === null ? this.at : last), 1n);
  }

  decision(params, allowed, inWindow) {
    const newest = this.nthInWindow(inWindow);
    return new Decision(
      allowed,
      max(params.limit - inWindow, 0n),
      this.retry(params, inWindow),
      newest === null ? 0n : this.msUntilGone(newest),
      params.limit,
    );
  }
}

module.exports = { MAX_STORED_ENTRIES, SlidingLog, SlidingLogChange, SlidingLogParams, SlidingLogParamError, bisectRight };
