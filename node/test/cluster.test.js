'use strict';
/**
 * A 3-node Redis Cluster with a policy whose keys fall in two slots (on the module, and on the
 * Functions library loaded on every primary by the client): each group goes to its slot's node
 * (node-redis's cluster sendCommand with the key this client chose), and the policy is all or
 * nothing across the groups: a later group's denial gives the earlier group's charge back.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const { Cluster } = require('./support/servers');
const { Limit, Policy, RateLimiter, keySlot } = require('../lib');

const POLICY = new Policy(
  'two-slots',
  [
    Limit.fixedWindow('per-user', { limit: 3, window: 3600, key: 'u:{{{user}}}' }),
    Limit.fixedWindow('per-tenant', { limit: 5, window: 3600, key: 't:{{{tenant}}}' }),
  ],
  { denyCache: false, timeoutMs: 1000 },
);

for (const backend of ['module', 'functions']) {
  test(`a policy over two slots of a cluster is all or nothing (${backend})`, async () => {
    const cluster = await Cluster.start(3, { module: backend === 'module' });
    try {
      assert.notEqual(keySlot('u:{b}'), keySlot('t:{acme}'), 'the keys must fall in two slots');
      const client = await cluster.client();
      const limiter = new RateLimiter(client, [POLICY]);
      assert.equal(await limiter.connect(), backend);
      const results = [];
      for (const user of ['a', 'a', 'a', 'b', 'b', 'b', 'b']) {
        const decision = await limiter.check('two-slots', { user, tenant: 'acme' });
        results.push(`${user}:${decision.allowed ? 'ok' : decision.binding}`);
      }
      // b's third check passes its own limit, the tenant's refuses: b's charge is given back.
      assert.deepEqual(results, ['a:ok', 'a:ok', 'a:ok', 'b:ok', 'b:ok', 'b:per-tenant', 'b:per-tenant']);
      const peek = await limiter.store.call(['RL.PEEK', 'u:{b}', 'FIXED', '3', '3600.000000', '1']);
      // A peek at a cost of 1 answers as that call would: allowed (b holds 2 of 3), 0 left after it.
      assert.deepEqual(peek.slice(0, 2).map(Number), [1, 0], `user b holds 2 units, not 3: ${JSON.stringify(peek)}`);
      const tenant = await limiter.store.call(['RL.PEEK', 't:{acme}', 'FIXED', '5', '3600.000000', '1']);
      assert.equal(Number(tenant[0]), 0, `the tenant holds 5 of 5: ${JSON.stringify(tenant)}`);
      // Each key lives on its own slot's node: asking another node answers MOVED.
      const nodes = await Promise.all(cluster.nodes.map((node) => node.cli(['CLUSTER', 'KEYSLOT', 'u:{b}'])));
      assert.equal(Number(nodes[0]), keySlot('u:{b}'));
    } finally {
      await cluster.stop();
    }
  });
}
