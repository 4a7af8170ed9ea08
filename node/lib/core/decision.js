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

module.exports = { NOW, NEVER, compareWaits, Decision, Commit, Evaluation };
