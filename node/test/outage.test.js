'use strict';
/**
 * Redis SIGSTOPped and stopped under load: every check is answered within the timeout (twice it
 * in a stall, then at once once the breaker opens), and the fleet admits within the stated
 * bound (README, Fallback bound): over an interval, the allowance, plus what the local fallback
 * admitted beyond what the store took back, U <= sum(floor(R_i / n)) - R0. The figures are
 * printed (and written where RL_FIGURES says).
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { Server } = require('./support/servers');
const { Limit, Policy, RateLimiter } = require('../lib');
const { now } = require('../lib/timing');

const CAPACITY = 30;
const REFILL_S = 60;
const RATE = CAPACITY / REFILL_S;
const POLICY = new Policy('api', [Limit.tokenBucket('per-key', { capacity: CAPACITY, refill: REFILL_S, key: 'outage:{key}' })]);
const REPLICAS = 3;

function record(name, figures) {
  console.log(`${name}: ${JSON.stringify(figures)}`);
  const file = process.env.RL_FIGURES;
  if (file) {
    const existing = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : {};
    existing[name] = figures;
    fs.writeFileSync(file, JSON.stringify(existing, null, 2));
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function replicaLoop(limiter, untilMs, log) {
  while (now() < untilMs) {
    const sent = now();
    const decision = await limiter.check('api', { key: 'shared' });
    log.push([sent, decision.allowed, decision.source, now() - sent]);
    await sleep(10);
  }
}

test('a SIGSTOPped Redis under load: admitted within the stated bound, every check answered in time', async () => {
  const server = await Server.start();
  try {
    const limiters = [];
    for (let index = 0; index < REPLICAS; index += 1) {
      const limiter = new RateLimiter(await server.client(), [POLICY], { replicas: REPLICAS });
      await limiter.connect();
      limiters.push(limiter);
    }
    const began = now();
    const lastRemaining = [];
    for (const limiter of limiters) {
      let decision;
      for (let index = 0; index < 3; index += 1) {
        decision = await limiter.check('api', { key: 'shared' });
        assert.equal(decision.source, 'store');
      }
      lastRemaining.push(decision.remaining);
    }
    const r0 = CAPACITY - 3 * REPLICAS;
    const logs = limiters.map(() => []);
    server.pause();
    const stoppedAt = now();
    await Promise.all(limiters.map((limiter, index) => replicaLoop(limiter, stoppedAt + 1500, logs[index])));
    server.resume();
    const resumedAt = now();
    await Promise.all(limiters.map((limiter, index) => replicaLoop(limiter, resumedAt + 2000, logs[index])));
    const ended = now();
    const everything = logs.flat();
    const admitted = 3 * REPLICAS + everything.filter(([, allowed]) => allowed).length;
    const byFallback = everything.filter(([, allowed, source]) => allowed && source === 'fallback').length;
    const stale = Math.max(lastRemaining.reduce((sum, r) => sum + Math.floor(r / REPLICAS), 0) - r0, 0);
    const allowance = CAPACITY + (RATE * (ended - began)) / 1000;
    const latencies = everything.map(([, , , latency]) => latency).sort((a, b) => a - b);
    const recovered = everything.filter(([sent, , source]) => sent > resumedAt && source === 'store');
    const figures = {
      admitted,
      allowance: Number(allowance.toFixed(2)),
      stated_bound: Number((allowance + stale).toFixed(2)),
      over_admission: Number((admitted - allowance).toFixed(2)),
      bound_on_over_admission: stale,
      admitted_by_fallback: byFallback,
      last_answers: lastRemaining,
      checks: everything.length,
      p50_ms: Number(latencies[Math.floor(latencies.length / 2)].toFixed(2)),
      max_ms: Number(latencies[latencies.length - 1].toFixed(2)),
      store_again_after_s: recovered.length ? Number(((recovered[0][0] - resumedAt) / 1000).toFixed(3)) : null,
    };
    record('sigstop', figures);
    assert.ok(figures.admitted <= figures.stated_bound, JSON.stringify(figures));
    assert.ok(figures.admitted_by_fallback > 0, `the fallback never decided: ${JSON.stringify(figures)}`);
    assert.ok(figures.max_ms < 2 * 50 + 400, `a check waited too long: ${JSON.stringify(figures)}`);
    assert.ok(figures.store_again_after_s !== null && figures.store_again_after_s < 1.5, JSON.stringify(figures));
  } finally {
    await server.stop();
  }
});

test('a stopped Redis leaves each replica its share, at once', async () => {
  const server = await Server.start();
  const clients = [];
  for (let index = 0; index < REPLICAS; index += 1) clients.push(await server.client({ socket: { reconnectStrategy: () => 50 } }));
  await server.halt();
  const admitted = [];
  const latencies = [];
  for (const client of clients) {
    const limiter = new RateLimiter(client, [POLICY], { replicas: REPLICAS });
    let count = 0;
    for (let index = 0; index < CAPACITY; index += 1) {
      const sent = now();
      const decision = await limiter.check('api', { key: 'fresh' });
      latencies.push(now() - sent);
      assert.equal(decision.source, 'fallback');
      if (decision.allowed) count += 1;
    }
    admitted.push(count);
  }
  await server.stop();
  const figures = { admitted_per_replica: admitted, share: Math.floor(CAPACITY / REPLICAS), max_ms: Number(Math.max(...latencies).toFixed(2)) };
  record('stopped', figures);
  assert.deepEqual(admitted, Array(REPLICAS).fill(Math.floor(CAPACITY / REPLICAS)), JSON.stringify(figures));
  assert.ok(figures.max_ms < 500, JSON.stringify(figures));
});

test('a fallback closed denies (503) and open admits, without consulting a limit', async () => {
  const server = await Server.start();
  const client = await server.client({ socket: { reconnectStrategy: () => 50 } });
  await server.halt();
  const limits = POLICY.limits;
  const limiter = new RateLimiter(client, [new Policy('closed', limits, { fallback: 'closed' }), new Policy('open', limits, { fallback: 'open' })]);
  const closed = await limiter.check('closed', { key: 'k' });
  assert.deepEqual([closed.allowed, closed.source, closed.status, closed.outcome], [false, 'fallback', 503, 'fallback_denied']);
  assert.equal(closed.problem().status, 503);
  const open = await limiter.check('open', { key: 'k' });
  assert.deepEqual([open.allowed, open.source, open.outcome], [true, 'fallback', 'fallback_allowed']);
  await server.stop();
});
