'use strict';
/**
 * A healthy Redis decides: 1,000 concurrent checks on a limit of 5 admit exactly 5, every
 * decision from the store (never the fallback), on each backend, with busy loops on both cores
 * for the test's duration (the redis-server favoured, as on a host of its own). On the module
 * with the default 50 ms timeout: the timeout is the store's silence, never this process's own
 * lateness. The Lua backends with a 1 s timeout, as the Python client's flood test: Redis itself
 * is slower there (4.5 us a call on the library, 156 us as a script, which runs the whole
 * library each time), so on a loaded machine it can be silent longer than 50 ms.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const { Server, cpuBurners, favour } = require('./support/servers');
const { Limit, Policy, RateLimiter } = require('../lib');

const LIMITS = [Limit.tokenBucket('per-key', { capacity: 5, refill: 3600, key: 'flood:{key}' })];
const POLICY = new Policy('flood', LIMITS);
const SLOW_POLICY = new Policy('flood', LIMITS, { timeoutMs: 1000 });

for (const backend of ['module', 'functions', 'scripts']) {
  test(`1,000 concurrent checks admit exactly the limit on ${backend}`, async () => {
    const server = await Server.startBackend(backend);
    favour(server.process.pid);
    const burners = cpuBurners();
    try {
      const limiter = new RateLimiter(await server.client(), [backend === 'module' ? POLICY : SLOW_POLICY]);
      assert.equal(await limiter.connect(), backend);
      const decisions = await Promise.all(Array.from({ length: 1000 }, () => limiter.check('flood', { key: 'hot' })));
      const sources = {};
      for (const d of decisions) sources[d.source] = (sources[d.source] || 0) + 1;
      const admitted = decisions.filter((d) => d.allowed).length;
      console.log(`flood on ${backend}: ${admitted} admitted of 1000, sources ${JSON.stringify(sources)}`);
      assert.equal(admitted, 5, JSON.stringify(sources));
      assert.deepEqual(
        Object.keys(sources).filter((source) => source !== 'store' && source !== 'cache'),
        [],
        `every decision from the store: ${JSON.stringify(sources)}`,
      );
      assert.deepEqual([...new Set(decisions.map((d) => d.backend))], [backend]);
    } finally {
      burners.stop();
      await server.stop();
    }
  });
}
