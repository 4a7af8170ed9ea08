'use strict';
/** What every limiter decides (core/src/decision.rs), in BigInt. */

const { I64_MAX, min } = require('./numbers');

/** Retry::Now: admitted without waiting. */
const NOW = 0n;
/** Retry::Never: no amount of waiting helps (the cost exceeds the limit). */
const NEVER = -1n;
// Any other value n >= 1 is Retry::AfterMs(n).

/** Orders waits: NEVER is the longest. Returns a number for comparisons of two ranks. */
function compareWaits(a, b) {
  if (a === b) return 0;
  if (a === NEVER) return 1;
  if (b === NEVER) return -1;
  return a < b ? -1 : 1;
}

/** The outcome of one call: the module's five reply fields (`retry`: see NOW). */
class Decision {
  constructor(allowed, remaining, retry, resetAfterMs, limit) {
    this.allowed = allowed;
    this.remaining = remaining;
    this.retry = retry;
    this.resetAfterMs = resetAfterMs;
    this.limit = limit;
  }

  /** [allowed, remaining, retry_after_ms, reset_after_ms, limit] as the module replies. */
  replyFields() {
    return [
      this.allowed ? 1n : 0n,
      min(this.remaining, I64_MAX),
      min(this.retry, I64_MAX),
      min(this.resetAfterMs, I64_MAX),
      min(this.limit, I64_MAX),
    ];
  }
}

/** What to store after an admitted call, and the key's expiry (Unix ms). */
class Commit {
  constructor(change, expiresAtMs) {
    this.change = change;
    this.expiresAtMs = expiresAtMs;
  }
}

/** A decision and the write that records it (null when nothing changes). */
class Evaluation {
  constructor(decision, commit) {
    this.decision = decision;
    this.commit = commit;
  }
}

/**
 * The state methods of a kind whose change is the whole new state (core/src/decision.rs's
 * change_is_the_new_state!): applying replaces the state, creating takes the change as it is,
 * and a state is never vacant. The token bucket, GCRA and the fixed and sliding windows extend
 * it; the sliding log's change is an edit of its log, a concurrency limit's of its holders.
 */
class ChangeIsTheNewState {
  static apply(_state, change) {
    return change;
  }

  static create(change) {
    return change;
  }

  static isVacant() {
    return false;
  }
}

module.exports = { NOW, NEVER, compareWaits, ChangeIsTheNewState, Decision, Commit, Evaluation };
