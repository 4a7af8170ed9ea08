'use strict';
/**
 * A fleet of 3 processes, each with its own limiter and connection, checking one key at once
 * admits one quota exactly (the store decides, not each replica): without leases, and with
 * leases (which claim units ahead and give unspent ones back at close, so the fleet's
 * admissions still total the quota).
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { Server } = require('./support/servers');

const WORKER = path.join(__dirname, 'support', 'fleet-worker.js');

function worker(env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKER], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
    });
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`fleet worker exited ${code}`))));
  });
}

for (const leased of [false, true]) {
  test(`3 processes admit one quota${leased ? ' with leases' : ''}`, async () => {
    const server = await Server.start();
    try {
      const env = { PORT: String(server.port), LIMIT: '100', CHECKS: '300', LEASE: leased ? '1' : '0', START_AT: String(Date.now() + 2000) };
      const results = await Promise.all([worker(env), worker(env), worker(env)]);
      const admitted = results.reduce((sum, result) => sum + result.admitted, 0);
      console.log(`fleet${leased ? ' (leases)' : ''}: admitted ${admitted} of 900 on a quota of 100: ${JSON.stringify(results)}`);
      assert.equal(admitted, 100, JSON.stringify(results));
      for (const result of results) assert.equal(result.sources.fallback, undefined, JSON.stringify(result));
    } finally {
      await server.stop();
    }
  });
}
