'use strict';
/**
 * One replica of a fleet: checks `CHECKS` times (64 at once) against a fixed window of `LIMIT`
 * on one key, on the server at `PORT`, optionally leased, from the instant START_AT (Unix ms), then
 * prints its admissions as JSON.
 */

const { createClient } = require('redis');
const { Lease, Limit, Policy, RateLimiter } = require('../../lib');

async function main() {
  const port = Number(process.env.PORT);
  const limit = Number(process.env.LIMIT);
  const checks = Number(process.env.CHECKS);
  const lease = process.env.LEASE === '1' ? new Lease({ units: 4 }) : null;
  const client = createClient({ socket: { host: '127.0.0.1', port } });
  client.on('error', () => {});
  await client.connect();
  const policy = new Policy('fleet', [Limit.fixedWindow('window', { limit, window: 3600, key: 'fleet:{key}' })], { lease, timeoutMs: 1000 });
  const limiter = new RateLimiter(client, [policy], { replicas: 3 });
  await limiter.connect();
  // Every replica starts at the same instant (START_AT, Unix ms), connected already.
  const wait = Number(process.env.START_AT || 0) - Date.now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  let admitted = 0;
  const sources = {};
  let next = 0;
  const worker = async () => {
    while (next < checks) {
      next += 1;
      const decision = await limiter.check('fleet', { key: 'shared' });
      if (decision.allowed) admitted += 1;
      sources[decision.source] = (sources[decision.source] || 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: 64 }, worker));
  await limiter.close();
  await client.disconnect();
  process.stdout.write(`${JSON.stringify({ admitted, sources })}\n`);
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
