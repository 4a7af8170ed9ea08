'use strict';
/**
 * The limiter's own rules on a real server: the timeout is the store's silence, never this
 * process's lateness (an event loop blocked past the timeout still gets the store's answers);
 * in-flight slots held by hold() and release(); the ioredis shape (call, status, duplicate)
 * drives the same store; PrometheusMetrics registers the other clients' names in a prom-client
 * style registry; invalid input is a CheckError naming what is wrong.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const { Server } = require('./support/servers');
const { CheckError, Limit, Policy, PrometheusMetrics, RateLimiter } = require('../lib');
const { DEFINITIONS } = require('../lib/metrics');

const policy = new Policy('api', [Limit.fixedWindow('w', { limit: 1000, window: 60, key: 'late:{key}' })]);

test('a blocked event loop is not the store: checks sent before a 300 ms block are decided by Redis', async () => {
  const server = await Server.start();
  try {
    const limiter = new RateLimiter(await server.client(), [policy]);
    await limiter.connect();
    const pending = Array.from({ length: 200 }, (_, index) => limiter.check('api', { key: `k${index % 10}` }));
    // Once their commands are written (their timers running), block the event loop.
    await new Promise((resolve) => setImmediate(resolve));
    const until = Date.now() + 300;
    while (Date.now() < until) {
      // This process is busy six timeouts long; Redis answered meanwhile.
    }
    const decisions = await Promise.all(pending);
    const sources = new Set(decisions.map((d) => d.source));
    assert.deepEqual([...sources], ['store']);
    assert.equal(limiter.storeUnreachable, false);
  } finally {
    await server.stop();
  }
});

test('hold() gives in-flight slots back however the work ends; release() is idempotent', async () => {
  const server = await Server.start();
  try {
    const uploads = new Policy('uploads', [Limit.concurrency('in-flight', { limit: 1, ttl: 30, key: 'h:{user}' })]);
    const limiter = new RateLimiter(await server.client(), [uploads]);
    const inside = await limiter.hold('uploads', { user: 'u' }, async (decision) => {
      assert.equal(decision.allowed, true);
      const second = await limiter.check('uploads', { user: 'u' });
      assert.equal(second.allowed, false, 'the one slot is held');
      return 'done';
    });
    assert.equal(inside, 'done');
    await assert.rejects(
      limiter.hold('uploads', { user: 'u' }, async () => {
        throw new Error('work failed');
      }),
      /work failed/,
    );
    const held = await limiter.check('uploads', { user: 'u' });
    assert.equal(held.allowed, true, 'both holds gave their slot back');
    await held.release();
    await held.release();
    assert.equal((await limiter.check('uploads', { user: 'u' })).allowed, true);
  } finally {
    await server.stop();
  }
});

test('an ioredis-shaped client (call, status, duplicate) drives the same store on its own connection', async () => {
  const server = await Server.start();
  try {
    const base = await server.client();
    const duplicates = [];
    const ioredisLike = {
      status: 'ready',
      call: () => {
        throw new Error('the limiter must use its own connection');
      },
      duplicate(options) {
        duplicates.push(options);
        return { status: 'ready', call: (name, ...args) => base.sendCommand([name, ...args]), disconnect() {} };
      },
    };
    const limiter = new RateLimiter(ioredisLike, [new Policy('io', [Limit.tokenBucket('b', { capacity: 2, refill: 60, key: 'io:{k}' })])]);
    assert.equal(await limiter.connect(), 'module');
    const allowed = [];
    for (let index = 0; index < 3; index += 1) allowed.push((await limiter.check('io', { k: 'x' })).allowed);
    assert.deepEqual(allowed, [true, true, false]);
    assert.deepEqual(duplicates, [{ autoResendUnfulfilledCommands: false, enableOfflineQueue: false, maxRetriesPerRequest: 0 }]);
    assert.throws(() => new RateLimiter({ isCluster: true, call() {} }, []), /ioredis Cluster/);
  } finally {
    await server.stop();
  }
});

test("PrometheusMetrics registers the other clients' names in a prom-client registry", () => {
  const registered = new Map();
  class Metric {
    constructor({ name, labelNames }) {
      this.name = name;
      this.labelNames = labelNames;
      this.values = [];
      registered.set(name, this);
    }

    inc(labels, amount) {
      this.values.push(['inc', labels, amount]);
    }

    set(labels, value) {
      this.values.push(['set', labels, value]);
    }

    observe(labels, value) {
      this.values.push(['observe', labels, value]);
    }
  }
  const registry = { getSingleMetric: (name) => registered.get(name) };
  const prom = { Counter: class extends Metric {}, Gauge: class extends Metric {}, Histogram: class extends Metric {}, register: registry };
  const metrics = new PrometheusMetrics(registry, prom);
  metrics.storeError('api', 'timeout');
  metrics.circuitOpened();
  // prom-client appends _total to a counter's name itself.
  const expected = DEFINITIONS.map(([name, type]) => (type === 'counter' ? name.replace(/_total$/, '') : name));
  assert.deepEqual([...registered.keys()].sort(), expected.sort());
  assert.deepEqual(registered.get('ratelimit_store_errors').values, [['inc', { policy: 'api', kind: 'timeout' }, 1]]);
  assert.equal(new PrometheusMetrics(registry, prom).metrics.get('ratelimit_circuit_open'), registered.get('ratelimit_circuit_open'), 'one set per registry');
});

test('a check that cannot be made is a CheckError naming what is wrong', async () => {
  const limiter = new RateLimiter(new (require('../lib').MemoryStore)(), [policy]);
  await assert.rejects(limiter.check('nope', { key: 'k' }), (e) => e instanceof CheckError && /no policy is named 'nope'/.test(e.message));
  await assert.rejects(limiter.check('api', {}), (e) => e instanceof CheckError && /needs the input 'key'/.test(e.message));
  await assert.rejects(limiter.check('api', { key: 'k' }, { cost: 0 }), /costs at least 1 unit/);
  await assert.rejects(limiter.check('api', { key: 'k' }, { cost: 1.5 }), /costs at least 1 unit/);
  await assert.rejects(limiter.check('api', { key: '\udcff' }), /lone surrogate/);
  assert.equal((await limiter.check('api', { key: 'k' }, { cost: 2n })).allowed, true);
});
