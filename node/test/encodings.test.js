'use strict';
/**
 * The commands this client sends equal the Rust client's: the golden encodings written by
 * wire/examples/generate.rs (make generate; make lint fails while the file is stale) from
 * wire::encode replay through lib/protocol.js with zero differences. Pure: no server.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const kinds = require('../lib/kinds');
const protocol = require('../lib/protocol');
const { Algorithm } = require('../lib/algorithms');
const { QUOTAS } = require('../lib/core');
const { StoreError } = require('../lib/errors');

const VECTORS = path.join(__dirname, '..', '..', 'python', 'tests', 'vectors', 'encodings.json');
/** The operations this client sends, and those it does not (other clients' commands). */
const SENT = new Set(['group', 'refund']);
const NOT_SENT = new Set(['peek', 'regional', 'region_lease']);
const REFUSED = 'refused';

function cases() {
  return JSON.parse(fs.readFileSync(VECTORS, 'utf8')).cases;
}

function calls(c, algorithmOf) {
  return c.limits.map((limit) =>
    protocol.call(limit.key, algorithmOf(limit.kind, limit.params), BigInt(limit.weight), limit.max_wait_ms),
  );
}

function encode(c, algorithmOf) {
  try {
    if (c.op === 'group') {
      const request = protocol.acquireRequest(calls(c, algorithmOf), c.cost, c.partial_min, c.holder);
      return protocol.acquireCommand(request, c.multi)[1];
    }
    const commands = protocol.refundCommands(protocol.refundRequest(calls(c, algorithmOf), c.cost, c.holder));
    assert.equal(commands.length, 1);
    return commands[0];
  } catch (error) {
    if (error instanceof StoreError) return REFUSED;
    throw error;
  }
}

function replay(algorithmOf = (kind, params) => Algorithm.fromParams(kind, params)) {
  const counts = {};
  const differences = [];
  const count = (label) => {
    counts[label] = (counts[label] || 0) + 1;
  };
  for (const c of cases()) {
    if (NOT_SENT.has(c.op)) continue;
    assert.ok(SENT.has(c.op), `an operation this replay does not know: ${c.op}`);
    count(c.op);
    for (const limit of c.limits) count(`${c.op}:${limit.kind}`);
    const want = c.command === undefined ? REFUSED : c.command;
    const got = encode(c, algorithmOf);
    if (JSON.stringify(got) !== JSON.stringify(want)) differences.push(`${JSON.stringify(c)}\n  node: ${JSON.stringify(got)}`);
  }
  return { counts, differences };
}

test('every encoding replays with zero differences', () => {
  const { counts, differences } = replay();
  assert.deepEqual(differences.slice(0, 5), [], `${differences.length} differences`);
  assert.ok(counts.group >= 100 && counts.refund >= 12, JSON.stringify(counts));
  for (const kind of Object.keys(kinds.BY_NAME)) {
    assert.ok(counts[`group:${kind}`] >= 8 && counts[`refund:${kind}`] >= 2, `${kind}: ${JSON.stringify(counts)}`);
  }
  console.log(`encodings: ${counts.group + counts.refund} cases, ${differences.length} differences`);
});

test('a lone limit of a kind without a command goes through RL.MULTI', () => {
  const gcra = Algorithm.gcra(4, 10, 60);
  assert.equal(gcra.command, null);
  const [shape, args] = protocol.acquireCommand(protocol.acquireRequest([protocol.call('k', gcra)], 1), true);
  assert.deepEqual([shape, args.slice(0, 3)], ['multi', ['RL.MULTI', '1', 'k']]);
});

test('a planted routing bug is found', () => {
  // Every kind sent alone as RL.<ALGORITHM> (the routing the Python client had before the generated table).
  const planted = (kind, params) => {
    const algorithm = Algorithm.fromParams(kind, params);
    return new Proxy(algorithm, {
      get: (target, property) => (property === 'command' ? `RL.${target.wireName}` : Reflect.get(target, property, target)),
    });
  };
  const { differences } = replay(planted);
  assert.ok(differences.length > 0, 'a lone GCRA sent as RL.GCRA went unnoticed');
});

test('every kind of the generated table has its core twin and every function is known', () => {
  assert.deepEqual(Object.keys(QUOTAS).sort(), Object.keys(kinds.BY_NAME).sort());
  assert.deepEqual(protocol.translate('functions', '', ['RL.REGIONAL', 'f', 'l', 'FIXED', '1', '1', '1']), [
    'FCALL',
    'rl_regional',
    '2',
    'f',
    'l',
    'FIXED',
    '1',
    '1',
    '1',
  ]);
  assert.deepEqual(protocol.translate('scripts', 'abc', ['RL.MULTI', '2', 'a', 'b', 'FIXED', '1', '1']), [
    'EVALSHA',
    'abc',
    '2',
    'a',
    'b',
    'rl_multi',
    'FIXED',
    '1',
    '1',
  ]);
});
