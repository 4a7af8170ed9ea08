'use strict';
/**
 * The local fallback on the in-process store (no timing involved): each replica's share,
 * continuing from the store's last answer (a key the store had exhausted stays exhausted), what
 * it admitted owed to the store and charged when it answers again, the breaker holding calls
 * back after 3 outages in a row; fallback open and closed.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const { Limit, MemoryMetrics, MemoryStore, Policy, RateLimiter } = require('../lib');

const policy = new Policy('api', [Limit.fixedWindow('w', { limit: 6, window: 3600, key: 'f:{key}' })], { denyCache: false });

test('the fallback continues from the store: an exhausted key stays exhausted, a fresh one gets its share', async () => {
  const store = new MemoryStore();
  const limiter = new RateLimiter(store, [policy], { replicas: 3, breaker: { failures: 1000 } });
  for (let index = 0; index < 6; index += 1) assert.equal((await limiter.check('api', { key: 'spent' })).allowed, true);
  assert.equal((await limiter.check('api', { key: 'spent' })).source, 'store');
  store.down = true;
  const exhausted = await limiter.check('api', { key: 'spent' });
  assert.deepEqual([exhausted.allowed, exhausted.source], [false, 'fallback']);
  const fresh = [];
  for (let index = 0; index < 4; index += 1) fresh.push((await limiter.check('api', { key: 'fresh' })).allowed);
  assert.deepEqual(fresh, [true, true, false, false], 'floor(6 / 3) = 2 on this replica');
});

test('what the fallback admitted is charged to the store when it answers again', async () => {
  const store = new MemoryStore();
  const metrics = new MemoryMetrics();
  const limiter = new RateLimiter(store, [policy], { replicas: 3, metrics, breaker: { failures: 1000 } });
  assert.equal((await limiter.check('api', { key: 'k' })).remaining, 5, 'the store answered: 5 left');
  store.down = true;
  // The fallback continues from that answer: floor(5 / 3) = 1 for this replica.
  const during = [];
  for (let index = 0; index < 3; index += 1) during.push((await limiter.check('api', { key: 'k' })).allowed);
  assert.deepEqual(during, [true, false, false]);
  store.down = false;
  const after = await limiter.check('api', { key: 'k' });
  assert.deepEqual([after.source, after.remaining], ['store', 3], '6 - 1 - 1 owed - 1');
  assert.equal(metrics.value('ratelimit_fallback_units_owed_total', { policy: 'api' }), 1);
  assert.equal(metrics.value('ratelimit_fallback_units_settled_total', { policy: 'api' }), 1);
});

test('the breaker opens after 3 outages in a row and holds store calls back', async () => {
  const store = new MemoryStore();
  const metrics = new MemoryMetrics();
  const limiter = new RateLimiter(store, [policy], { replicas: 1, metrics, breaker: { failures: 3, openForMs: 60000 } });
  store.down = true;
  for (let index = 0; index < 3; index += 1) await limiter.check('api', { key: `b${index}` });
  assert.equal(limiter.storeUnreachable, true);
  const calls = store.calls;
  for (let index = 0; index < 10; index += 1) assert.equal((await limiter.check('api', { key: 'b' })).source, 'fallback');
  assert.equal(store.calls, calls, 'no store call while the circuit is open');
  assert.equal(metrics.value('ratelimit_circuit_opened_total'), 1);
});

test('fallback open admits and closed refuses (503), consulting no limit', async () => {
  const store = new MemoryStore();
  store.down = true;
  const limiter = new RateLimiter(store, [
    new Policy('open', policy.limits, { fallback: 'open' }),
    new Policy('closed', policy.limits, { fallback: 'closed' }),
  ]);
  const open = await limiter.check('open', { key: 'k' });
  assert.deepEqual([open.allowed, open.limits.length, open.outcome], [true, 0, 'fallback_allowed']);
  const closed = await limiter.check('closed', { key: 'k' });
  assert.deepEqual([closed.allowed, closed.status, closed.retryAfterMs >= 1000], [false, 503, true]);
  assert.deepEqual(closed.headers(), { 'retry-after': String(Math.ceil(closed.retryAfterMs / 1000)) });
});
