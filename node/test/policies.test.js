'use strict';
/**
 * Policies from the Rust client's TOML format (its own documented example, read unchanged, and
 * the refusals naming what is wrong); policies from the plans store, changed with the
 * repository's rlctl and followed by the limiter, a change applying to the tenant's state;
 * reservations settled below and above their estimate; the metrics with the other clients'
 * names.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { REPOSITORY, Server } = require('./support/servers');
const { ConfigError, Limit, MemoryMetrics, PlanSource, Policy, RateLimiter, fromFile, fromToml } = require('../lib');
const { DEFINITIONS } = require('../lib/metrics');

const RLCTL = process.env.RL_RLCTL || path.join(REPOSITORY, 'target', 'debug', 'rlctl');

/** The TOML example of client/src/config.rs's documentation. */
function rustExample() {
  const text = fs
    .readFileSync(path.join(REPOSITORY, 'client', 'src', 'config.rs'), 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('//!'))
    .map((line) => line.replace(/^\/\/! ?/, ''))
    .join('\n');
  return text.slice(text.indexOf('[[policy]]'), text.indexOf('"#)?;'));
}

test("the Rust client's TOML example is read unchanged", () => {
  const policies = fromToml(rustExample());
  assert.deepEqual(
    policies.map((p) => [p.name, p.inputs, p.fallback, p.timeoutMs, p.lease && p.lease.cap, p.limits.map((l) => [l.name, l.algorithm.kind, l.algorithm.wireArgs()])]),
    [
      [
        'api',
        ['api_key'],
        'local',
        50,
        40,
        [
          ['per-key', 'token', ['100', '1.666666667']],
          ['daily', 'fixed', ['10000', '86400.000000']],
          ['burst', 'gcra', ['9', '10', '1']],
        ],
      ],
      ['uploads', ['api_key'], 'local', 50, null, [['in-flight', 'concurrency', ['5', '30000']]]],
    ],
  );
});

test('a bad configuration is refused naming what is wrong', () => {
  const limit = (body) => `[[policy]]\nname = "a"\n[[policy.limit]]\nname = "l"\nkey = "k"\n${body}`;
  const cases = [
    ['', 'no policy'],
    ['x = 1', "unknown field 'x'"],
    [limit('algorithm = "fixed_window"\nlimit = 3\nwindow_s = 1\ncapacity = 2'), "'capacity' is not a parameter of fixed_window"],
    [limit('algorithm = "fixed_window"\nlimit = 3'), "give exactly one of 'window_s' and 'window_ms'"],
    [limit('algorithm = "fixed_window"\nlimit = 0\nwindow_s = 1'), "limit must be greater than 0 (got '0')"],
    [limit('algorithm = "token_bucket"\ncapacity = 3\nrate = 2'), "'rate' must be str"],
    ['[[policy]]\nname = "a"\nfallback = "sideways"\n[[policy.limit]]\nname="l"\nkey="k"\nalgorithm="gcra"\nmax_burst=1\ncount=1\nperiod_s=1', 'fallback is open, closed or local'],
    ['[[policy]\nname = "a"', 'line 1'],
  ];
  for (const [text, words] of cases) {
    assert.throws(() => fromToml(text), (error) => error instanceof ConfigError && error.message.includes(words), words);
  }
  assert.throws(() => fromFile('/nonexistent/limits.toml'), /cannot read the configuration file/);
});

function rlctl(server, ...args) {
  if (!fs.existsSync(RLCTL)) assert.fail(`${RLCTL} is missing: make node-test builds it (cargo build -p redis-ratelimit-plans --bin rlctl)`);
  execFileSync(RLCTL, ['--redis', `redis://127.0.0.1:${server.port}/`, '--who', 'node-test', ...args], { stdio: 'pipe' });
}

test('policies from the plans store follow changes made with rlctl, on the same state', async () => {
  const server = await Server.start();
  let source = null;
  try {
    const client = await server.client();
    rlctl(server, 'plan', 'set', 'pro', '--limit', 'per-minute=fixed:5/60s');
    rlctl(server, 'tenant', 'set', 'acme', '--plan', 'pro');
    source = await new PlanSource(client).start();
    assert.equal(source.loaded, true);
    const policy = Policy.fromStore('api', { tenant: 'tenant', defaults: [Limit.fixedWindow('per-minute', { limit: 2, window: 60, key: 'unused' })], denyCache: false });
    const limiter = new RateLimiter(client, [policy], { plans: source });
    const first = await limiter.check('api', { tenant: 'acme' });
    assert.equal(first.limit, 5, 'the plan, not the default');
    assert.equal(first.remaining, 4);
    const other = await limiter.check('api', { tenant: 'nobody' });
    assert.equal(other.limit, 2, 'a tenant on no plan gets the defaults');
    rlctl(server, 'override', 'set', 'acme', 'per-minute=fixed:8/60s');
    let decision;
    for (let attempt = 0; attempt < 300; attempt += 1) {
      decision = await limiter.check('api', { tenant: 'acme' });
      if (decision.limit === 8) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(decision.limit, 8, 'the override was followed');
    // The same key: what acme spent under the plan counts under the override.
    const spent = 8 - decision.remaining;
    assert.ok(spent >= 2, `the tenant's state carried over (${spent} spent)`);
  } finally {
    if (source !== null) await source.close();
    await server.stop();
  }
});

test('a reservation settled below its estimate refunds, above it debits, the rest owed', async () => {
  const server = await Server.start();
  try {
    const limiter = new RateLimiter(await server.client(), [
      new Policy('llm', [Limit.fixedWindow('tokens', { limit: 100, window: 3600, key: 'llm:{user}' })], { denyCache: false }),
    ]);
    const small = await limiter.reserve('llm', { user: 'u' }, { estimate: 40 });
    assert.equal(small.allowed, true);
    assert.equal(await small.settle(10), 0n);
    let probe = await limiter.check('llm', { user: 'u' });
    assert.equal(probe.remaining, 89, '40 reserved, 30 given back, 1 probe');
    const big = await limiter.reserve('llm', { user: 'u' }, { estimate: 50 });
    assert.equal(await big.settle(100), 11n, '50 more wanted, 39 left: 11 owed');
    await assert.rejects(big.settle(1), /already settled/);
    probe = await limiter.check('llm', { user: 'u' });
    assert.equal(probe.allowed, false, 'the window is spent');
  } finally {
    await server.stop();
  }
});

test("the metrics carry the other clients' names", async () => {
  const server = await Server.start();
  try {
    const metrics = new MemoryMetrics();
    const limiter = new RateLimiter(await server.client(), [new Policy('api', [Limit.fixedWindow('w', { limit: 1, window: 60, key: 'm:{key}' })])], { metrics });
    await limiter.check('api', { key: 'a' });
    await limiter.check('api', { key: 'a' });
    assert.equal(metrics.value('ratelimit_decisions_total', { policy: 'api', outcome: 'allowed', source: 'store', backend: 'module' }), 1);
    assert.equal(metrics.value('ratelimit_decisions_total', { policy: 'api', outcome: 'denied', source: 'store', backend: 'module' }), 1);
    assert.equal(metrics.value('ratelimit_store_backend', { backend: 'module' }), 1);
    assert.equal(metrics.value('ratelimit_store_latency_seconds', { policy: 'api', op: 'acquire' }), 2);
    const text = metrics.text();
    for (const [name] of DEFINITIONS) assert.ok(text.includes(`# TYPE ${name} `), name);
    // The Python client's names, one for one.
    const python = fs.readFileSync(path.join(REPOSITORY, 'python', 'src', 'redis_ratelimit_client', 'metrics.py'), 'utf8');
    for (const [name] of DEFINITIONS) assert.ok(python.includes(name.replace(/_total$/, '')), `${name} is not one of the Python client's`);
  } finally {
    await server.stop();
  }
});

test('a policy or limit that cannot work is refused when built, with the server\'s words', () => {
  const { Lease, PolicyError } = require('../lib');
  const bucket = Limit.tokenBucket('b', { capacity: 10, rate: 1, key: 'k:{key}' });
  const refusals = [
    [() => Limit.fixedWindow('w', { limit: 0, window: 60, key: 'k' }), "limit 'w': limit must be greater than 0 (got '0')"],
    [() => Limit.fixedWindow('w', { limit: 5, window: 0.0001, key: 'k' }), 'window must be at least 0.001 seconds (1 ms)'],
    [() => Limit.tokenBucket('b', { capacity: 5, rate: 1, refill: 5, key: 'k' }), 'give either a rate (tokens per second) or a refill time, not both'],
    [() => Limit.tokenBucket('b', { capacity: 5, rate: '2000000000', key: 'k' }), 'rate must be at most 1000000000 tokens per second'],
    [() => Limit.fixedWindow('w', { limit: 5, window: 60, key: 'k{' }), 'unbalanced brace'],
    [() => Limit.slidingLog('l', { limit: 5, window: 60, key: 'k', maxWaitMs: 10 }), 'only token buckets can be paced'],
    [() => new Policy('p', [bucket, bucket]), "two limits are named 'b'"],
    [() => new Policy('p', []), "policy 'p' has no limits"],
    [() => new Policy('p', [bucket], { fallback: 'maybe' }), 'fallback is open, closed or local'],
    [() => new Policy('p', [Limit.concurrency('c', { limit: 2, ttl: 30, key: 'c' })], { lease: new Lease({ units: 2 }) }), 'its policy cannot be leased'],
    [() => new Policy('bad name', [bucket]), "bad policy name 'bad name'"],
  ];
  for (const [build, words] of refusals) {
    assert.throws(build, (error) => error instanceof PolicyError && error.message.includes(words), words);
  }
});
