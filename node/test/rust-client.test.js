'use strict';
/**
 * The Node client answers as the Rust client does: the Rust client's demo service
 * (client/examples/demo-service.rs, its tower layer) and the Express middleware with the same
 * policy, each in front of its own server on the same set clock, get the same requests; the
 * status, RateLimit, RateLimit-Policy, Retry-After, content type and problem+json bodies must be
 * identical, on each backend, with and without leases (the Python client's test_rust_client.py).
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { spawn } = require('node:child_process');
const { REPOSITORY, Server } = require('./support/servers');
const { Lease, Limit, Policy, RateLimiter } = require('../lib');

const T0_US = 1767225600000000n;
const DEMO = process.env.RL_DEMO_SERVICE || path.join(REPOSITORY, 'target', 'debug', 'examples', 'demo-service');
const FIELDS = ['ratelimit', 'ratelimit-policy', 'retry-after', 'content-type'];

async function startDemo(port, lease, backend) {
  if (!fs.existsSync(DEMO)) assert.fail(`${DEMO} is missing: make node-test builds it (cargo build -p redis-ratelimit-client --example demo-service)`);
  const args = ['--redis', `redis://127.0.0.1:${port}/`, '--listen', '127.0.0.1:0', '--limit', '5', '--window', '60', '--timeout-ms', '2000', '--backend', backend];
  if (lease !== null) args.push('--lease', String(lease));
  const child = spawn(DEMO, args, { stdio: ['ignore', 'pipe', 'ignore'] });
  const line = await new Promise((resolve) => {
    readline.createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', () => resolve(''));
  });
  if (!line.startsWith('listening on ')) {
    child.kill('SIGKILL');
    assert.fail(`demo-service did not start: ${line}`);
  }
  return [child, `http://${line.split(' ').pop()}`];
}

async function responses(base, keys, setClock) {
  const seen = [];
  let now = T0_US;
  for (const [index, key] of keys.entries()) {
    now += 250000n;
    setClock(now);
    const response = await fetch(`${base}/`, { headers: { 'x-api-key': key } });
    seen.push(JSON.stringify([index, key, response.status, FIELDS.map((name) => response.headers.get(name)), await response.text()]));
  }
  return seen;
}

for (const backend of ['module', 'functions', 'scripts']) {
  for (const lease of [null, 3]) {
    test(`the same answers as the Rust client (${backend}, ${lease === null ? 'no lease' : `leases of ${lease}`})`, async () => {
      const keys = [...Array(8).fill('alice'), ...Array(3).fill('bob'), ...Array(2).fill('alice'), ...Array(7).fill('anonymous')];
      const rustServer = await Server.startBackend(backend, { clockUs: T0_US });
      const nodeServer = await Server.startBackend(backend, { clockUs: T0_US });
      let demo = null;
      let http = null;
      try {
        const [child, base] = await startDemo(rustServer.port, lease, backend);
        demo = child;
        const policy = new Policy('demo', [Limit.tokenBucket('per-key', { capacity: 5, refill: 60, key: 'demo:{{{api_key}}}' })], {
          lease: lease === null ? null : new Lease({ units: lease }),
          timeoutMs: 2000,
        });
        const limiter = new RateLimiter(await nodeServer.client(), [policy]);
        await limiter.connect(); // as the demo service connects at start
        const app = require('express')();
        app.get('/', limiter.express('demo', { inputName: 'api_key', key: (req) => req.get('x-api-key') || 'anonymous' }), (req, res) => {
          res.type('text/plain; charset=utf-8').send('ok\n');
        });
        http = await new Promise((resolve) => {
          const server = app.listen(0, '127.0.0.1', () => resolve(server));
        });
        const rust = await responses(base, keys, (now) => rustServer.setClock(now));
        const ours = await responses(`http://127.0.0.1:${http.address().port}`, keys, (now) => nodeServer.setClock(now));
        ours.forEach((row, index) => assert.equal(row, rust[index], `Node ${row} != Rust ${rust[index]}`));
        const statuses = new Set(rust.map((row) => JSON.parse(row)[2]));
        assert.deepEqual([...statuses].sort(), [200, 429]);
        await limiter.close();
      } finally {
        if (http !== null) await new Promise((resolve) => http.close(resolve));
        if (demo !== null) demo.kill('SIGKILL');
        await rustServer.stop();
        await nodeServer.stop();
      }
    });
  }
}
