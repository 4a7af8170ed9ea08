'use strict';
/**
 * What the limiter keeps in memory: the circuit breaker, remembered denials, the store's last
 * answers (what the local fallback continues from and owes), and leases (the Rust client's
 * breaker.rs, deny_cache.rs, limiter/answers.rs, lease.rs). Monotonic instants are
 * performance.now() milliseconds; the answers' instants are the fallback's clock (Unix µs,
 * BigInt); units are BigInt.
 */

const { CACHE } = require('./decision');
const { DEFAULT_MAX_KEYS, KeyTable } = require('./tables');

/**
 * Opens after `failures` outages in a row and probes every `openForMs`.
 *
 * A stall is not an outage: calls in flight together count as one failure (a failure counts
 * only if its call was sent after the last counted one), and a call that timed out is not an
 * outage if the store answered another call since it was sent.
 */
class Breaker {
  constructor(failures = 3, openForMs = 500) {
    this.failures = Math.max(failures, 1);
    this.openForMs = openForMs;
    this.state = 'closed';
    this.count = 0;
    this.lastCounted = null;
    this.until = 0;
    this.since = 0;
    this.answeredAt = null;
  }

  /** null: call the store (perhaps as the probe); else skip, open this much longer (ms). */
  permit(now) {
    if (this.state === 'closed') return null;
    if (this.state === 'open' && this.until > now) return this.until - now;
    if (this.state === 'half-open' && now - this.since < this.openForMs) return this.openForMs - (now - this.since);
    this.state = 'half-open';
    this.since = now;
    return null;
  }

  /** A call reached the store; whether the circuit was not closed before. */
  success(now) {
    const recovered = this.state !== 'closed';
    this.state = 'closed';
    this.count = 0;
    this.lastCounted = null;
    this.answeredAt = this.answeredAt === null ? now : Math.max(this.answeredAt, now);
    return recovered;
  }

  answeredSince(sent) {
    return this.answeredAt !== null && this.answeredAt >= sent;
  }

  /** A call sent at `sent` found the store out of reach; whether this opened it. */
  failure(sent, now) {
    if (this.answeredAt !== null && this.answeredAt >= sent) return false;
    if (this.state === 'closed') {
      if (this.lastCounted !== null && sent <= this.lastCounted) return false;
      this.count += 1;
      if (this.count >= this.failures) {
        this.state = 'open';
        this.until = now + this.openForMs;
        return true;
      }
      this.lastCounted = now;
      return false;
    }
    this.state = 'open';
    this.until = now + this.openForMs;
    return false;
  }

  get isOpen() {
    return this.state !== 'closed';
  }
}

/**
 * Store denials remembered until their retryAfter (waits are rounded up, so a remembered
 * denial never denies what the store would admit). At most `maxKeys` key sets: past it,
 * expired denials go first, then the one remembered longest ago (only a saving is lost: the
 * store decides that key set again). O(log n) a denial.
 */
class DenyCache {
  constructor(maxKeys = DEFAULT_MAX_KEYS) {
    this.entries = new KeyTable(maxKeys);
  }

  get size() {
    return this.entries.size;
  }

  get(keySet, cost, now) {
    const denial = this.entries.get(keySet);
    const until = this.entries.expires(keySet);
    if (denial === undefined || until <= now || cost < denial.cost) return null;
    const elapsedMs = Math.floor(now - denial.at);
    const elapsedNs = BigInt(Math.floor((now - denial.at) * 1e6));
    const decision = denial.decision.copy();
    decision.source = CACHE;
    decision.outcome = 'denied';
    decision.retryAfterMs = Math.max(Math.ceil(until - now), 0);
    for (const limit of decision.limits) {
      if (limit.retryAfterMs !== null) limit.retryAfterMs = Math.max(limit.retryAfterMs - elapsedMs, 0);
      limit.resetAfterMs = Math.max(limit.resetAfterMs - elapsedMs, 0);
      limit.moreInNs = limit.moreInNs > elapsedNs ? limit.moreInNs - elapsedNs : 0n;
    }
    return decision;
  }

  insert(keySet, cost, decision, now) {
    const wait = decision.retryAfterMs;
    if (wait === null || wait <= 0 || decision.backend === null) return;
    this.entries.expire(now);
    this.entries.put(keySet, { at: now, cost, decision }, now + wait, now);
  }

  purge(now) {
    this.entries.expire(now);
  }

  /** Drops the key set's denial: units were given back to it, so the store may admit sooner. */
  forget(keySet) {
    this.entries.pop(keySet);
  }
}

/**
 * The store's last answer per key set (what the fallback continues from) and the units the
 * fallback admitted since (owed to the store, charged when it answers again).
 *
 * Each is kept for the policy's longest window (at least a second), and at most `maxKeys` key
 * sets: past it, expired entries go first, then the one answered longest ago (units owed count
 * as an answer). An evicted key set has no last answer, so its fallback starts from a fresh
 * share, and what it owed is forgotten (as a replica that restarts forgets it).
 */
class Answers {
  constructor(keepUs, maxKeys = DEFAULT_MAX_KEYS) {
    // A fixed lifetime on a clock that never goes back: entries expire in write order.
    this.entries = new KeyTable(maxKeys, { expiryInWriteOrder: true });
    this.keepUs = keepUs > 1000000n ? keepUs : 1000000n;
  }

  get size() {
    return this.entries.size;
  }

  /** `denied`: [the answer's wait (ms), the cost it was for], or null. */
  record(keySet, views, denied, now) {
    const until = denied === null ? null : [now + BigInt(denied[0]) * 1000n, denied[1]];
    this.entries.expire(now);
    let entry = this.entries.get(keySet);
    if (entry === undefined) entry = { views: [...views], answeredAtUs: now, denied: until, seeded: false, owed: 0n };
    else Object.assign(entry, { views: [...views], answeredAtUs: now, denied: until, seeded: false });
    this.entries.put(keySet, entry, now + this.keepUs, now);
  }

  /** How much longer (ms, a number) the store's last denial holds for a call of `cost`; null if none. */
  deniedFor(keySet, cost, now) {
    const entry = this.entries.get(keySet);
    if (entry === undefined || entry.denied === null) return null;
    const [until, deniedCost] = entry.denied;
    const left = until - now;
    return cost >= deniedCost && left > 0n ? Number((left + 999n) / 1000n) : null;
  }

  /** The answer to seed the local states from, once per answer: [views, answeredAtUs] or null. */
  seed(keySet, now) {
    const entry = this.entries.get(keySet);
    const expires = this.entries.expires(keySet);
    if (entry === undefined || entry.seeded || expires <= now) return null;
    entry.seeded = true;
    return [[...entry.views], entry.answeredAtUs];
  }

  owe(keySet, units, now) {
    let entry = this.entries.get(keySet);
    if (entry === undefined) entry = { views: [], answeredAtUs: now, denied: null, seeded: true, owed: 0n };
    entry.owed += units;
    this.entries.put(keySet, entry, now + this.keepUs, now);
  }

  takeOwed(keySet, now) {
    const entry = this.entries.get(keySet);
    const expires = this.entries.expires(keySet);
    if (entry === undefined) return null;
    if (expires <= now) {
      entry.owed = 0n;
      return null;
    }
    const owed = entry.owed;
    entry.owed = 0n;
    return owed > 0n ? owed : null;
  }

  owed(keySet) {
    const entry = this.entries.get(keySet);
    return entry === undefined ? 0n : entry.owed;
  }
}

/** A promise-chain lock: one holder at a time, the others wait in order. */
class Lock {
  constructor() {
    this.tail = Promise.resolve();
  }

  /** Resolves with the release function once the lock is held. */
  acquire() {
    let release;
    const held = new Promise((resolve) => {
      release = resolve;
    });
    const ready = this.tail.then(() => release);
    this.tail = this.tail.then(() => held);
    return ready;
  }
}

/** One key set's lease: units claimed and not yet spent, until `expires` (monotonic ms). */
class LeaseSlot {
  constructor(keys) {
    this.keys = keys;
    this.lock = new Lock();
    this.units = 0n;
    this.expires = 0;
    this.views = [];
    this.backend = null;
    this.lastClaim = null;
    this.claimUnits = 0n;
    this.waiting = 0;
    this.busy = false;
  }
}

/**
 * A policy's leases by key set; each behind its own lock, so concurrent requests for one key
 * wait for a single claim. At most `maxKeys` key sets (a lease holds units claimed from the
 * store, so none is evicted): past it a new key set is checked without a lease until the
 * sweeper has given back expired ones.
 */
class Leases {
  constructor(maxKeys = DEFAULT_MAX_KEYS) {
    this.slots = new Map();
    this.maxKeys = maxKeys;
  }

  get size() {
    return this.slots.size;
  }

  /** Whether `keySet` has a lease or may get one. */
  hasRoom(keySet) {
    return this.slots.size < this.maxKeys || this.slots.has(keySet);
  }

  slot(keySet, keys) {
    let slot = this.slots.get(keySet);
    if (slot === undefined) {
      slot = new LeaseSlot(keys);
      this.slots.set(keySet, slot);
    }
    return slot;
  }

  /**
   * Takes the unspent units of every expired lease (or of all, with `everything`) not in use
   * right now, and forgets empty expired ones: [[keys, units]].
   */
  takeExpired(now, everything) {
    const taken = [];
    for (const [keySet, slot] of this.slots) {
      if (slot.busy || slot.waiting) continue;
      if (slot.expires > now && !everything) continue;
      if (slot.units > 0n) {
        taken.push([slot.keys, slot.units]);
        slot.units = 0n;
      }
      this.slots.delete(keySet);
    }
    return taken;
  }
}

module.exports = { Breaker, DenyCache, Answers, Lock, LeaseSlot, Leases };
