'use strict';
/**
 * Fixed windows and the sliding window counter (core/src/fixed_window.rs,
 * core/src/sliding_window.rs, core/src/window.rs): epoch-aligned windows, integer µs.
 */

const { FIXED_WINDOW, SLIDING_WINDOW } = require('../kinds');
const { NEVER, NOW, ChangeIsTheNewState, Commit, Decision, Evaluation } = require('./decision');
const n = require('./numbers');

const {
  I64_MAX,
  MAX_NOW_US,
  MAX_WINDOW_US,
  MIN_WINDOW_US,
  U32_MAX,
  U64_MAX,
  ceilDiv,
  ceilMsFromUs,
  clamp,
  expiryMsFromUs,
  satU64,
  windowStartUs,
  min,
  max,
} = n;

/** Largest limit of a windowed limiter (counts are stored as u32). */
const MAX_WINDOW_LIMIT = U32_MAX;

/** `limit_too_large`, `window_too_short` or `window_too_long`. */
class WindowParamError extends RangeError {}

function checkWindow(windowUs) {
  if (windowUs < MIN_WINDOW_US) throw new WindowParamError('window_too_short');
  if (windowUs > MAX_WINDOW_US) throw new WindowParamError('window_too_long');
}

class FixedWindow {
  constructor(windowStartUs, count) {
    this.windowStartUs = windowStartUs;
    this.count = count;
  }
}

class SlidingWindow {
  constructor(windowStartUs, previous, current) {
    this.windowStartUs = windowStartUs;
    this.previous = previous;
    this.current = current;
  }
}

class WindowParams extends ChangeIsTheNewState {
  constructor(limit, windowUs, costUnits = 1n) {
    super();
    this.limit = limit;
    this.windowUs = windowUs;
    this.costUnits = costUnits;
    Object.freeze(this);
  }

  static new(limit, windowUs, cost = 1n) {
    if (limit > MAX_WINDOW_LIMIT) throw new WindowParamError('limit_too_large');
    checkWindow(windowUs);
    return new this(max(limit, 1n), windowUs, max(cost, 1n));
  }

  get cost() {
    return this.costUnits;
  }

  withCost(cost) {
    return new this.constructor(this.limit, this.windowUs, max(cost, 1n));
  }

  countedCost() {
    return this.cost;
  }
}

class FixedWindowParams extends WindowParams {
  get kind() {
    return FIXED_WINDOW;
  }

  evaluate(state, nowUs) {
    const view = new FixedView(state, this, nowUs);
    const retry = view.retry(this, view.count);
    if (retry === NOW) {
      const count = satU64(view.count + this.cost);
      return new Evaluation(view.decision(this, true, count, NOW), view.commit(count));
    }
    return new Evaluation(view.decision(this, false, view.count, retry), null);
  }

  refund(state, nowUs) {
    const view = new FixedView(state, this, nowUs);
    const count = max(view.count - this.cost, 0n);
    const refunded = count < view.count;
    const retry = view.retry(this, count);
    return new Evaluation(view.decision(this, refunded, count, retry), refunded ? view.commit(count) : null);
  }

  grantable(state, upTo, nowUs) {
    const view = new FixedView(state, this, nowUs);
    return min(max(this.limit - view.count, 0n), upTo);
  }
}

class FixedView {
  constructor(state, params, nowUs) {
    const now = clamp(nowUs, 0n, MAX_NOW_US);
    const current = windowStartUs(now, params.windowUs);
    let start = current;
    let count = 0n;
    if (state !== null) {
      const storedStart = windowStartUs(state.windowStartUs, params.windowUs);
      if (storedStart >= current) {
        start = storedStart;
        count = state.count;
      }
    }
    this.now = now;
    this.start = start;
    this.window = params.windowUs;
    this.count = count;
  }

  end() {
    return this.start + this.window;
  }

  retry(params, count) {
    if (params.cost > params.limit) return NEVER;
    if (satU64(count + params.cost) <= params.limit) return NOW;
    return max(ceilMsFromUs(this.end() - this.now), 1n);
  }

  decision(params, allowed, count, retry) {
    const reset = count === 0n ? 0n : ceilMsFromUs(this.end() - this.now);
    return new Decision(allowed, max(params.limit - count, 0n), retry, reset, params.limit);
  }

  commit(count) {
    const start = this.start <= I64_MAX ? this.start : MAX_NOW_US;
    const expires = count === 0n ? expiryMsFromUs(this.now) : expiryMsFromUs(this.end());
    return new Commit(new FixedWindow(start, min(count, U32_MAX)), expires);
  }
}

function earliestElapsed(weight, room, window) {
  if (weight <= room) return 0n;
  return ceilDiv((weight - room) * window, weight);
}

class SlidingWindowParams extends WindowParams {
  get kind() {
    return SLIDING_WINDOW;
  }

  evaluate(state, nowUs) {
    const view = new SlidingView(state, this, nowUs);
    const { previous } = view;
    let { current } = view;
    if (this.cost <= this.limit && view.admits(this, previous, current)) {
      current = satU64(current + this.cost);
      return new Evaluation(view.decision(this, true, previous, current, NOW), view.commit(previous, current));
    }
    const retry = view.retry(this, previous, current);
    return new Evaluation(view.decision(this, false, previous, current, retry), null);
  }

  refund(state, nowUs) {
    const view = new SlidingView(state, this, nowUs);
    const fromCurrent = min(view.current, this.cost);
    const current = view.current - fromCurrent;
    const previous = max(view.previous - (this.cost - fromCurrent), 0n);
    const refunded = current < view.current || previous < view.previous;
    const retry = view.retry(this, previous, current);
    return new Evaluation(
      view.decision(this, refunded, previous, current, retry),
      refunded ? view.commit(previous, current) : null,
    );
  }

  grantable(state, upTo, nowUs) {
    const view = new SlidingView(state, this, nowUs);
    return min(view.room(this, view.previous, view.current), upTo);
  }
}

class SlidingView {
  constructor(state, params, nowUs) {
    const now = clamp(nowUs, 0n, MAX_NOW_US);
    const window = params.windowUs;
    const currentStart = windowStartUs(now, window);
    let start = currentStart;
    let previous = 0n;
    let current = 0n;
    if (state !== null) {
      const storedStart = windowStartUs(state.windowStartUs, window);
      if (storedStart >= currentStart) {
        start = storedStart;
        previous = state.previous;
        current = state.current;
      } else if (storedStart + window === currentStart) {
        start = currentStart;
        previous = state.current;
        current = 0n;
      }
    }
    this.now = now;
    this.window = window;
    this.start = start;
    this.elapsed = max(now - start, 0n);
    this.previous = previous;
    this.current = current;
  }

  weighted(previous, current) {
    return previous * (this.window - this.elapsed) + current * this.window;
  }

  admits(params, previous, current) {
    const withCost = satU64(current + params.cost);
    return this.weighted(previous, withCost) <= params.limit * this.window;
  }

  admittedAt(params, previous, current) {
    if (params.cost > params.limit) return null;
    let room = params.limit - current - params.cost;
    if (room >= 0n) {
      const elapsed = earliestElapsed(previous, room, this.window);
      return elapsed <= this.elapsed ? this.now : this.start + elapsed;
    }
    room = params.limit - params.cost;
    const elapsed = earliestElapsed(current, room, this.window);
    return this.start + this.window + elapsed;
  }

  retry(params, previous, current) {
    const at = this.admittedAt(params, previous, current);
    if (at === null) return NEVER;
    if (at <= this.now) return NOW;
    return max(ceilMsFromUs(at - this.now), 1n);
  }

  emptyAt(previous, current) {
    if (current > 0n) return this.start + 2n * this.window;
    if (previous > 0n) return this.start + this.window;
    return null;
  }

  room(params, previous, current) {
    const left = params.limit * this.window - this.weighted(previous, current);
    return min(max(left / this.window, 0n), U64_MAX);
  }

  decision(params, allowed, previous, current, retry) {
    const empty = this.emptyAt(previous, current);
    const reset = empty === null ? 0n : ceilMsFromUs(empty - this.now);
    return new Decision(allowed, this.room(params, previous, current), retry, reset, params.limit);
  }

  commit(previous, current) {
    const start = this.start <= I64_MAX ? this.start : MAX_NOW_US;
    const empty = this.emptyAt(previous, current);
    const state = new SlidingWindow(start, min(previous, U32_MAX), min(current, U32_MAX));
    return new Commit(state, expiryMsFromUs(empty === null ? this.now : empty));
  }
}

module.exports = {
  MAX_WINDOW_LIMIT,
  WindowParamError,
  checkWindow,
  FixedWindow,
  SlidingWindow,
  FixedWindowParams,
  SlidingWindowParams,
};
