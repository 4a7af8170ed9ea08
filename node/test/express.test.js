'use strict';
/**
 * The Express middleware through real HTTP requests (Debian's express 4.18.2) on a real Redis
 * with the module: the quick start flooded answers exactly the limit, with the fields and the
 * problem+json body the other clients write; a default policy and a route's own are all or
 * nothing; in-flight slots are released when the response has been sent; a check that cannot be
 * made answers 500. The express-rate-limit store and the IPv6 /56 key helper.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const { Server } = require('./support/servers');
const { Limit, Policy, RateLimiter, ipKey } = require('../lib');

function expressPackage() {
  try {
    return require('express');
  } catch (error) {
    throw new Error(`EXPRESS MISSING: ${error.message}; apt-get install node-express (scripts/prereqs.sh does) and NODE_PATH=/usr/share/nodejs`);
  }
}

async function listen(app) {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
  });
}

async function withApp(policies, build, run) {
  const redis = await Server.start();
  let http = null;
  try {
    const limiter = new RateLimiter(await redis.client(), policies);
    await limiter.connect();
    const app = expressPackage()();
    build(app, limiter);
    http = await listen(app);
    const base = `http://127.0.0.1:${http.address().port}`;
    await run(base, limiter, redis);
  } finally {
    if (http !== null) await new Promise((resolve) => http.close(resolve));
    await redis.stop();
  }
}

test('the quick start flooded with 200 requests on a limit of 10 answers exactly 10 200s', async () => {
  const api = new Policy('api', [Limit.tokenBucket('per-key', { capacity: 10, refill: 60, key: 'rl:{{{key}}}' })]);
  await withApp(
    [api],
    (app, limiter) => {
      app.get('/items', limiter.express('api', { key: (req) => req.get('x-api-key') || 'anonymous' }), (req, res) => res.json([]));
    },
    async (base) => {
      const responses = await Promise.all(
        Array.from({ length: 200 }, () => fetch(`${base}/items`, { headers: { 'x-api-key': 'alice' } })),
      );
      const statuses = responses.map((r) => r.status);
      assert.equal(statuses.filter((s) => s === 200).length, 10);
      assert.equal(statuses.filter((s) => s === 429).length, 190);
      const ok = responses.find((r) => r.status === 200);
      assert.equal(ok.headers.get('ratelimit-policy'), '"per-key";q=10;w=60');
      assert.match(ok.headers.get('ratelimit'), /^"per-key";r=\d;t=\d+$/);
      // Every refusal says when to come back, the same in its fields and its body; the
      // flood's requests are decided in no set order (on a loaded machine over seconds), so
      // each refusal's wait is what remained of the 6 s at its own decision.
      const refusals = responses.filter((r) => r.status === 429);
      const waits = refusals.map((r) => Number(/^"per-key";r=0;t=(\d+)$/.exec(r.headers.get('ratelimit'))[1]));
      for (const [index, r] of refusals.entries()) {
        assert.equal(r.headers.get('content-type'), 'application/problem+json');
        assert.equal(r.headers.get('ratelimit-policy'), '"per-key";q=10;w=60');
        assert.equal(r.headers.get('retry-after'), String(waits[index]));
        assert.ok(waits[index] >= 1 && waits[index] <= 6, `t=${waits[index]}`);
      }
      // The first refusal, right after the tenth admission: the next token is 6 s away (5 when
      // a second passed between them).
      const wait = Math.max(...waits);
      const refused = refusals[waits.indexOf(wait)];
      assert.ok(wait >= 5, `the longest wait ${wait} s`);
      const body = await refused.json();
      assert.deepEqual(body, {
        type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
        title: 'Too Many Requests',
        status: 429,
        detail: `Limit 'per-key' of policy 'api' is exhausted; retry in ${wait} s.`,
        'violated-policies': ['per-key'],
      });
      await Promise.all(responses.filter((r) => r !== refused).map((r) => r.arrayBuffer()));
    },
  );
});

test("a default policy and a route's own are all or nothing", async () => {
  const policies = [
    new Policy('default', [Limit.fixedWindow('daily', { limit: 6, window: 86400, key: 'd:{key}' })], { denyCache: false }),
    new Policy('search', [Limit.fixedWindow('searches', { limit: 3, window: 86400, key: 's:{key}' })], { denyCache: false }),
  ];
  await withApp(
    policies,
    (app, limiter) => {
      app.use(limiter.express('default', { key: () => 'u' }));
      app.get('/search', limiter.express('search', { key: () => 'u' }), (req, res) => res.send('found'));
      app.get('/items', (req, res) => res.send('items'));
    },
    async (base) => {
      const searches = [];
      for (let index = 0; index < 10; index += 1) {
        const response = await fetch(`${base}/search`);
        searches.push(response.status);
        if (response.status === 200) {
          assert.equal(response.headers.get('ratelimit-policy'), '"daily";q=6;w=86400, "searches";q=3;w=86400');
        } else {
          // The refusal carries the refusing limit's fields alone.
          assert.equal(response.headers.get('ratelimit-policy'), '"searches";q=3;w=86400');
        }
        await response.arrayBuffer();
      }
      assert.deepEqual(searches, [200, 200, 200, 429, 429, 429, 429, 429, 429, 429]);
      // 10 searches spent 3 of the default's 6, not 6: the refused ones gave theirs back.
      const items = [];
      for (let index = 0; index < 4; index += 1) {
        const response = await fetch(`${base}/items`);
        items.push(response.status);
        await response.arrayBuffer();
      }
      assert.deepEqual(items, [200, 200, 200, 429]);
    },
  );
});

test('in-flight slots are released when the response has been sent', async () => {
  const policy = new Policy('uploads', [Limit.concurrency('in-flight', { limit: 2, ttl: 30, key: 'up:{key}' })]);
  let gate;
  await withApp(
    [policy],
    (app, limiter) => {
      app.get('/upload', limiter.express('uploads', { key: () => 'u' }), async (req, res) => {
        await gate;
        res.send('done');
      });
    },
    async (base) => {
      let open;
      gate = new Promise((resolve) => {
        open = resolve;
      });
      const slow = [fetch(`${base}/upload`), fetch(`${base}/upload`)];
      // Poll until both hold their slots: a third is refused meanwhile.
      let third;
      for (let attempt = 0; attempt < 200; attempt += 1) {
        third = await fetch(`${base}/upload`);
        await third.arrayBuffer();
        if (third.status === 429) break;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      assert.equal(third.status, 429);
      open();
      for (const response of await Promise.all(slow)) {
        assert.equal(response.status, 200);
        await response.arrayBuffer();
      }
      gate = Promise.resolve();
      const after = await fetch(`${base}/upload`);
      assert.equal(after.status, 200, 'the slots were given back');
      await after.arrayBuffer();
    },
  );
});

test('a check that cannot be made answers 500 with a problem body; a key of null goes unchecked', async () => {
  const policy = new Policy('pair', [Limit.fixedWindow('w', { limit: 1, window: 60, key: 'p:{user}:{tenant}' })]);
  await withApp(
    [policy],
    (app, limiter) => {
      app.get('/broken', limiter.express('pair', { key: () => ({ user: 'u' }) }), (req, res) => res.send('no'));
      app.get('/open', limiter.express('pair', { key: () => null }), (req, res) => res.send('yes'));
    },
    async (base) => {
      const broken = await fetch(`${base}/broken`);
      assert.equal(broken.status, 500);
      assert.equal(broken.headers.get('content-type'), 'application/problem+json');
      assert.equal((await broken.json()).status, 500);
      for (let index = 0; index < 3; index += 1) {
        const open = await fetch(`${base}/open`);
        assert.equal(open.status, 200);
        assert.equal(open.headers.get('ratelimit'), null);
        await open.arrayBuffer();
      }
    },
  );
});

test('the express-rate-limit store: increments decided by the limiter, a refused one never refunded', async () => {
  const redis = await Server.start();
  try {
    const limiter = new RateLimiter(await redis.client(), [
      new Policy('erl', [Limit.fixedWindow('window', { limit: 3, window: 60, key: 'erl:{key}' })], { denyCache: false }),
    ]);
    const store = limiter.rateLimitStore('erl');
    store.init({ windowMs: 60000 });
    assert.equal(store.limit, 3);
    assert.equal(store.localKeys, false);
    const hits = [];
    for (let index = 0; index < 5; index += 1) hits.push((await store.increment('10.0.0.1')).totalHits);
    assert.deepEqual(hits, [1, 2, 3, 4, 4]);
    const info = await store.increment('10.0.0.1');
    assert.ok(info.resetTime instanceof Date && info.resetTime.getTime() > Date.now());
    // Three refusals: their decrements give nothing back; the fourth gives one unit back.
    for (let index = 0; index < 3; index += 1) await store.decrement('10.0.0.1');
    assert.equal((await store.increment('10.0.0.1')).totalHits, 4);
    await store.decrement('10.0.0.1');
    await store.decrement('10.0.0.1');
    assert.equal((await store.increment('10.0.0.1')).totalHits, 3);
    await store.resetKey('10.0.0.1');
    assert.equal((await store.increment('10.0.0.1')).totalHits, 1);
  } finally {
    await redis.stop();
  }
});

test('IPv6 clients are keyed by their /56', () => {
  assert.equal(ipKey('2001:db8:1234:5678:9abc::1'), '2001:db8:1234:5600::/56');
  assert.equal(ipKey('2001:db8:1234:56ff:ffff:ffff:ffff:ffff'), '2001:db8:1234:5600::/56');
  assert.notEqual(ipKey('2001:db8:1234:5700::1'), ipKey('2001:db8:1234:5600::1'));
  assert.equal(ipKey('::ffff:192.0.2.7'), '192.0.2.7');
  assert.equal(ipKey('192.0.2.7'), '192.0.2.7');
  assert.equal(ipKey('2001:db8::1', { ipv6Subnet: 64 }), '2001:db8::/64');
  assert.equal(ipKey('2001:db8::1', { ipv6Subnet: false }), '2001:db8::1');
});
