'use strict';
/**
 * The Node.js client's figures (make bench-node), one process, node-redis 4.5.1, a private
 * redis-server: checks/s of the limiter on the module and on the Functions library, beside the
 * seed article's Lua token bucket (bench/lua/token_bucket.lua, EVALSHA) sent through the same
 * client; Redis commands per check without and with leases. Rounds interleave the approaches;
 * each figure is the median (min-max) of the rounds.
 *
 *   node bench/bench.js [--out bench/results.md] [--seconds 3] [--rounds 3] [--inflight 200] [--keys 1000]
 */

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Server } = require('../test/support/servers');
const { Lease, Limit, Policy, RateLimiter } = require('../lib');

function options() {
  const args = process.argv.slice(2);
  const value = (name, fallback) => {
    const index = args.indexOf(`--${name}`);
    return index >= 0 ? args[index + 1] : fallback;
  };
  return {
    out: value('out', null),
    seconds: Number(value('seconds', 3)),
    rounds: Number(value('rounds', 3)),
    inflight: Number(value('inflight', 200)),
    keys: Number(value('keys', 1000)),
  };
}

/** Runs `call(key)` with `inflight` workers for `seconds`; resolves with calls per second. */
async function rate(call, { seconds, inflight, keys }) {
  const until = performance.now() + seconds * 1000;
  let count = 0;
  let next = 0;
  const worker = async () => {
    while (performance.now() < until) {
      next = (next + 1) % keys;
      await call(`k${next}`);
      count += 1;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: inflight }, worker));
  return count / ((performance.now() - started) / 1000);
}

function summary(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const format = (v) => Math.round(v).toLocaleString('en-US');
  return `${format(sorted[Math.floor(sorted.length / 2)])} (${format(sorted[0])}-${format(sorted[sorted.length - 1])})`;
}

const BIG = new Policy('bench', [Limit.tokenBucket('per-key', { capacity: 1000000000, rate: 1000000, key: 'b:{key}' })], { denyCache: false });

async function main() {
  const opts = options();
  const moduleServer = await Server.start();
  const libraryServer = await Server.startBackend('functions');
  try {
    const moduleClient = await moduleServer.client();
    const libraryClient = await libraryServer.client();
    const onModule = new RateLimiter(moduleClient, [BIG]);
    const onLibrary = new RateLimiter(libraryClient, [BIG]);
    if ((await onModule.connect()) !== 'module' || (await onLibrary.connect()) !== 'functions') throw new Error('unexpected backends');
    const script = fs.readFileSync(path.join(__dirname, '..', '..', 'bench', 'lua', 'token_bucket.lua'), 'utf8');
    const sha = await moduleClient.sendCommand(['SCRIPT', 'LOAD', script]);
    const approaches = {
      'limiter, module': (key) => onModule.check('bench', { key }),
      'limiter, Functions library': (key) => onLibrary.check('bench', { key }),
      "seed article's Lua token bucket (EVALSHA), same client": (key) => moduleClient.sendCommand(['EVALSHA', sha, '1', `lua:${key}`, '1000000000', '1000000']),
      'plain INCR, same client (for scale)': (key) => moduleClient.sendCommand(['INCR', `incr:${key}`]),
    };
    const results = Object.fromEntries(Object.keys(approaches).map((name) => [name, []]));
    for (let round = 0; round < opts.rounds; round += 1) {
      const names = Object.keys(approaches);
      if (round % 2) names.reverse();
      for (const name of names) results[name].push(await rate(approaches[name], opts));
    }
    // Redis commands per check: every key checked without a lease, then 10 hot keys with leases of 10.
    const calls = async (limiter, server, checks, keys) => {
      const before = await server.commandCalls();
      for (let index = 0; index < checks; index += 100) {
        await Promise.all(Array.from({ length: 100 }, (_, offset) => limiter.check('bench', { key: `c${(index + offset) % keys}` })));
      }
      await limiter.releaseLeases();
      return ((await server.commandCalls()) - before) / checks;
    };
    const leased = new Policy('bench', BIG.limits, { lease: new Lease({ units: 10 }), denyCache: false });
    const withLeases = new RateLimiter(moduleClient, [leased]);
    const perCheck = await calls(onModule, moduleServer, 10000, 1000);
    const perLeased = await calls(withLeases, moduleServer, 10000, 10);
    await withLeases.close();
    const lines = [
      "# The Node.js client's figures",
      '',
      `\`make bench-node\`: ${opts.rounds} rounds of ${opts.seconds} s, interleaved, ${opts.inflight} checks in flight over ${opts.keys} keys, every check admitted; median (min-max). node ${process.version}, node-redis ${require('redis/package.json').version}, ${os.cpus().length} cores, load average at the start ${os.loadavg()[0].toFixed(2)} (a shared machine: read the ratios).`,
      '',
      '| what | per second |',
      '|---|--:|',
      ...Object.entries(results).map(([name, values]) => `| ${name} | ${summary(values)} |`),
      '',
      '| Redis commands per check | |',
      '|---|--:|',
      `| no lease, 1,000 keys | ${perCheck.toFixed(3)} |`,
      `| leases of 10 units, 10 hot keys (unspent units given back at the end) | ${perLeased.toFixed(3)} |`,
      '',
    ];
    const report = lines.join('\n');
    console.log(report);
    if (opts.out) fs.writeFileSync(opts.out, report);
  } finally {
    await moduleServer.stop();
    await libraryServer.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
