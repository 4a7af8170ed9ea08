'use strict';
/**
 * A bounded table of per-key state: what the limiter remembers per key set (the store's last
 * answers, remembered denials, the local fallback's states) never grows past a capacity,
 * however many distinct keys come.
 *
 * Eviction order, when an entry would take the table past its capacity: expired entries first
 * (soonest expiry first), then the entry written longest ago. Every operation is O(1) or
 * O(log n) amortised: entries are kept in write order (a Map, re-inserted on write), and their
 * expiries in a heap whose stale items (of entries rewritten or removed since) are skipped when
 * they surface and dropped by a rebuild once they outnumber the entries; nothing walks the live
 * entries. A table whose entries expire in the order they are written (a fixed lifetime from a
 * clock that does not go back: the store's last answers) needs no heap: its oldest entries are
 * its first to expire.
 */

/** Default capacity of each per-key table of a limiter (the Rust client's): 100,000 key sets. */
const DEFAULT_MAX_KEYS = 100000;
/** Stale heap items allowed beyond the live entries before the heap is rebuilt. */
const STALE_SLACK = 1024;

/** A binary min-heap of [expires, key] items. */
class ExpiryHeap {
  constructor(items = []) {
    this.items = items;
    for (let index = (items.length >> 1) - 1; index >= 0; index -= 1) this.down(index);
  }

  get length() {
    return this.items.length;
  }

  peek() {
    return this.items[0];
  }

  push(item) {
    const items = this.items;
    items.push(item);
    let index = items.length - 1;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      if (!(items[index][0] < items[parent][0])) break;
      [items[index], items[parent]] = [items[parent], items[index]];
      index = parent;
    }
  }

  pop() {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0) {
      items[0] = last;
      this.down(0);
    }
    return top;
  }

  down(start) {
    const items = this.items;
    let index = start;
    for (;;) {
      const left = 2 * index + 1;
      const right = left + 1;
      let smallest = index;
      if (left < items.length && items[left][0] < items[smallest][0]) smallest = left;
      if (right < items.length && items[right][0] < items[smallest][0]) smallest = right;
      if (smallest === index) return;
      [items[index], items[smallest]] = [items[smallest], items[index]];
      index = smallest;
    }
  }
}

/**
 * Values by key, each with the instant it expires (any clock and unit, as long as the caller
 * uses one), at most `capacity` of them (null: no bound). An entry has expired at `now` when
 * its expiry is not after `now`. With `expiryInWriteOrder` an entry never expires before one
 * written earlier (an earlier expiry is raised to the latest), and no heap is kept.
 */
class KeyTable {
  constructor(capacity, { expiryInWriteOrder = false } = {}) {
    if (capacity !== null && !(capacity >= 1)) {
      throw new RangeError(`a table holds at least 1 entry (got a capacity of ${capacity})`);
    }
    this.capacity = capacity;
    /** key -> { value, expires }, in write order. */
    this.entries = new Map();
    this.expiries = expiryInWriteOrder ? null : new ExpiryHeap();
    this.latest = null;
  }

  get size() {
    return this.entries.size;
  }

  has(key) {
    return this.entries.has(key);
  }

  /** The value of `key`, expired or not (the caller compares); undefined when absent. */
  get(key) {
    const entry = this.entries.get(key);
    return entry === undefined ? undefined : entry.value;
  }

  expires(key) {
    const entry = this.entries.get(key);
    return entry === undefined ? undefined : entry.expires;
  }

  /**
   * Sets `key` (the most recently written now), expiring at `expires`; past the capacity, drops
   * the entries expired by `now`, then the ones written longest ago.
   */
  put(key, value, expires, now) {
    let when = expires;
    if (this.expiries === null && this.latest !== null && this.latest > when) when = this.latest;
    this.latest = when;
    const entry = this.entries.get(key);
    if (entry === undefined) {
      this.entries.set(key, { value, expires: when });
    } else {
      entry.value = value;
      entry.expires = when;
      this.entries.delete(key);
      this.entries.set(key, entry);
    }
    if (this.expiries !== null) this.expiries.push([when, key]);
    if (this.capacity !== null && this.entries.size > this.capacity) {
      this.expire(now);
      while (this.entries.size > this.capacity) {
        this.entries.delete(this.entries.keys().next().value);
      }
    }
    if (this.expiries !== null && this.expiries.length > 2 * this.entries.size + STALE_SLACK) {
      this.expiries = new ExpiryHeap([...this.entries].map(([k, e]) => [e.expires, k]));
    }
  }

  /** Removes `key`; returns its value (undefined when absent). */
  pop(key) {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    return entry.value;
  }

  /** Drops the entries expired by `now`, soonest first; returns how many. */
  expire(now) {
    let dropped = 0;
    const entries = this.entries;
    if (this.expiries === null) {
      for (const [key, entry] of entries) {
        if (entry.expires > now) break;
        entries.delete(key);
        dropped += 1;
      }
      return dropped;
    }
    const heap = this.expiries;
    while (heap.length > 0 && heap.peek()[0] <= now) {
      const [expires, key] = heap.pop();
      const entry = entries.get(key);
      if (entry !== undefined && entry.expires === expires) {
        entries.delete(key);
        dropped += 1;
      }
    }
    return dropped;
  }

  /** Keys from the one written longest ago to the latest. */
  keys() {
    return this.entries.keys();
  }
}

module.exports = { DEFAULT_MAX_KEYS, KeyTable };
