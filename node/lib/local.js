'use strict';
/**
 * Limits decided in process (the Rust client's local.rs): the engine over a map of keys with
 * Redis's expiry semantics. It runs the local fallback and the in-memory store. Instants are
 * BigInt Unix µs, expiries BigInt Unix ms (the core's).
 */

const { QUOTAS } = require('./core');
const { MISSING, Held, acquireMany, refund: coreRefund } = require('./core/engine');
const { floorDiv } = require('./core/numbers');
const { KeyTable } = require('./tables');

/** Operations between two passes that drop expired states (each pass O(log n) a state due). */
const PRUNE_EVERY = 1024;

/**
 * Limiter states by key. `strict` refuses a key holding another kind (as the server does);
 * otherwise such a state counts as missing and is replaced (the fallback's rule).
 *
 * Expired states are dropped every 1,024 operations. `maxKeys` bounds the keys held (the
 * fallback's; null for the in-memory store, which is a store, not a cache): past it, expired
 * states go first, then the one written longest ago (that key starts over from a fresh share).
 */
class LocalLimits {
  constructor({ strict = false, maxKeys = null } = {}) {
    this.states = new KeyTable(maxKeys);
    this.strict = strict;
    this.operations = 0;
  }

  live(key, nowUs) {
    const stored = this.states.get(key);
    if (stored === undefined || stored.expiresAtMs <= floorDiv(nowUs, 1000n)) return null;
    return stored;
  }

  held(keys, quotas, nowUs) {
    return keys.map((key, index) => {
      const stored = this.live(key, nowUs);
      if (stored === null || (!this.strict && stored.kind !== quotas[index].kind)) return MISSING;
      return new Held(stored.kind, stored.state);
    });
  }

  /** RL.MULTI in process: `quotas` each for one unit, `units × weight` each (BigInt). */
  acquire(keys, quotas, weights, units, partialMin, nowUs) {
    this.operations += 1;
    if (this.operations % PRUNE_EVERY === 0) this.states.expire(floorDiv(nowUs, 1000n));
    const held = this.held(keys, quotas, nowUs);
    const atLeastOne = weights.map((weight) => (weight > 1n ? weight : 1n));
    const verdict = acquireMany(held, quotas, atLeastOne, units > 1n ? units : 1n, partialMin, nowUs);
    verdict.commits.forEach((commit, index) => {
      if (commit !== null) this.commit(keys[index], quotas[index].kind, commit, nowUs);
    });
    return verdict;
  }

  /** Gives each quota's cost back to its key (an in-flight limit frees its holder). */
  refund(keys, quotas, nowUs) {
    const held = this.held(keys, quotas, nowUs);
    const evaluations = quotas.map((quota, index) => coreRefund(held[index], quota, nowUs));
    evaluations.forEach((evaluation, index) => {
      if (evaluation.commit !== null) this.commit(keys[index], quotas[index].kind, evaluation.commit, nowUs);
    });
    return evaluations;
  }

  /** Starts `key` over as a fresh limiter charged all but `remaining` at `atUs`. */
  seed(key, unit, quotaUnits, remaining, atUs) {
    this.states.pop(key);
    const used = quotaUnits - remaining;
    if (used > 0n) this.acquire([key], [unit], [1n], used, 1n, atUs);
  }

  commit(key, kind, commit, nowUs) {
    let stored = this.live(key, nowUs);
    const algorithm = QUOTAS[kind];
    if (stored === null || stored.kind !== kind) {
      stored = { kind, state: algorithm.create(commit.change), expiresAtMs: commit.expiresAtMs };
    } else {
      stored.state = algorithm.apply(stored.state, commit.change);
      stored.expiresAtMs = commit.expiresAtMs;
      if (algorithm.isVacant(stored.state)) {
        this.states.pop(key);
        return;
      }
    }
    this.states.put(key, stored, stored.expiresAtMs, floorDiv(nowUs, 1000n));
  }

  get size() {
    return this.states.size;
  }

  /** The stored [kind, state, expiry] of `key`, expired or not (for tests); null when absent. */
  state(key) {
    const stored = this.states.get(key);
    return stored === undefined ? null : [stored.kind, stored.state, stored.expiresAtMs];
  }
}

module.exports = { LocalLimits };
