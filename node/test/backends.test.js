'use strict';
/**
 * Every algorithm on each backend decides alike: one trace of checks (every algorithm alone
 * and in one RL.MULTI, weights, pacing, leases, in-flight limits, reservations) on a server
 * with the module, one without it (the Functions library, loaded by the client) and one with
 * FUNCTION renamed away (scripts), each on a clock the test sets, and on the in-process engine
 * at the same instants: identical decisions and header fields. The Python client's
 * test_backends.py runs the same trace.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const { Server } = require('./support/servers');
const { Lease, Limit, MemoryStore, Policy, RateLimiter } = require('../lib');

const T0_US = 1767225600000000n; // 2026-01-01T00:00:00Z
const common = { denyCache: false, timeoutMs: 2000 };

const POLICIES = [
  new Policy('tb', [Limit.tokenBucket('bucket', { capacity: 5, refill: 10, key: 'tb:{key}' })], common),
  new Policy('paced', [Limit.tokenBucket('queue', { capacity: 1, rate: 10, key: 'pq:{key}', maxWaitMs: 1000 })], common),
  new Policy('fw', [Limit.fixedWindow('fixed', { limit: 4, window: 60, key: 'fw:{key}' })], common),
  new Policy('sw', [Limit.slidingWindow('sliding', { limit: 6, window: 10, key: 'sw:{key}' })], common),
  new Policy('sl', [Limit.slidingLog('log', { limit: 3, window: 5, key: 'sl:{key}' })], common),
  new Policy('gcra', [Limit.gcra('cell', { maxBurst: 2, count: 3, period: 1, key: 'gc:{key}' })], common),
  new Policy(
    'multi',
    [
      Limit.tokenBucket('per-user', { capacity: 4, rate: 2, key: 'm:{{{key}}}:user' }),
      Limit.fixedWindow('per-day', { limit: 50, window: 86400, key: 'm:{{{key}}}:day', weight: 2 }),
      Limit.slidingWindow('per-minute', { limit: 9, window: 60, key: 'm:{{{key}}}:minute' }),
    ],
    common,
  ),
  new Policy('leased', [Limit.fixedWindow('window', { limit: 12, window: 60, key: 'ls:{key}' })], {
    ...common,
    lease: new Lease({ units: 4, lifetimeMs: 60000 }),
  }),
  new Policy('slots', [Limit.concurrency('in-flight', { limit: 2, ttl: 30, key: 'cc:{key}' })], common),
];

/** [ms after the previous step, policy, cost, key, what]: check, hold, release (the last held), reserve:<actual>. */
const TRACE = [];
for (let round = 0; round < 3; round += 1) {
  for (const [policy, cost] of [
    ['tb', 1],
    ['tb', 2],
    ['fw', 1],
    ['sw', 2],
    ['sl', 1],
    ['gcra', 1],
    ['multi', 1],
    ['multi', 3],
    ['leased', 1],
    ['paced', 1],
    ['paced', 1],
  ]) {
    for (let repeat = 0; repeat < 3; repeat += 1) TRACE.push([137 * repeat + 11, policy, cost, `k${round % 2}`, 'check']);
  }
  TRACE.push(
    [5, 'slots', 1, 's', 'hold'],
    [5, 'slots', 1, 's', 'hold'],
    [5, 'slots', 1, 's', 'hold'],
    [5, 'slots', 1, 's', 'release'],
    [5, 'slots', 1, 's', 'hold'],
  );
  TRACE.push([40, 'tb', 2, 'r', 'reserve:1'], [40, 'tb', 1, 'r', 'reserve:4'], [10, 'tb', 1, 'r', 'check']);
  TRACE.push([4000, 'tb', 5, 'k9', 'check']);
}

function summary(decision) {
  const limits = decision.limits.map((s) => [s.name, s.allowed, s.remaining, s.retryAfterMs, s.resetAfterMs, s.quota, String(s.moreInNs)]);
  const headers = Object.entries(decision.headers()).sort();
  return JSON.stringify([decision.allowed, decision.source, decision.retryAfterMs, decision.binding, decision.waitMs, limits, headers]);
}

async function runTrace(limiter, setClock) {
  let now = T0_US;
  const held = [];
  const seen = [];
  for (const [advanceMs, policy, cost, key, what] of TRACE) {
    now += BigInt(advanceMs) * 1000n;
    setClock(now);
    if (what === 'release') {
      await limiter.release(held.pop());
      continue;
    }
    if (what.startsWith('reserve:')) {
      const reservation = await limiter.reserve(policy, { key }, { estimate: cost });
      seen.push(summary(reservation.decision));
      seen.push(`owed ${await reservation.settle(Number(what.split(':')[1]))}`);
      continue;
    }
    const decision = await limiter.check(policy, { key }, { cost });
    if (what === 'hold' && decision.inFlight !== null) held.push(decision);
    else if (decision.inFlight !== null) await limiter.release(decision);
    seen.push(summary(decision));
  }
  return seen;
}

test('every algorithm decides alike on every backend and the local engine', async () => {
  let clock = T0_US;
  const memory = await runTrace(new RateLimiter(new MemoryStore({ clock: () => clock }), POLICIES), (now) => {
    clock = now;
  });
  const sources = new Set(memory.filter((step) => step.startsWith('[')).map((step) => JSON.parse(step)[1]));
  assert.ok(sources.has('store') && sources.has('lease'), [...sources].join(','));
  console.log(`trace: ${memory.length} steps, sources ${[...sources].join(', ')}; e.g. ${memory[40]}`);
  for (const backend of ['module', 'functions', 'scripts']) {
    const server = await Server.startBackend(backend, { clockUs: T0_US });
    try {
      const limiter = new RateLimiter(await server.client(), POLICIES);
      assert.equal(await limiter.connect(), backend);
      const trace = await runTrace(limiter, (now) => server.setClock(now));
      assert.equal(trace.length, memory.length);
      trace.forEach((got, index) => assert.equal(got, memory[index], `${backend}, step ${index}`));
      await limiter.close();
    } finally {
      await server.stop();
    }
  }
});
