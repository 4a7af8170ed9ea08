'use strict';
/**
 * The backend probe and the error rules, on scripted replies (no server): a server with neither
 * the module nor a Lua engine (Valkey 9.1 without its lua module) is said in one line; a server
 * that lost the library's code gets it again once; errors are sorted into out of reach,
 * invalid (the caller's) and refused.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const protocol = require('../lib/protocol');
const { StoreError } = require('../lib/errors');
const { Algorithm } = require('../lib/algorithms');

class ErrorReply extends Error {}

/** A runner answering each command by the first rule whose prefix matches its arguments. */
function scripted(rules) {
  const sent = [];
  const run = async (command) => {
    sent.push(command.args.join(' ').slice(0, 60));
    const rule = rules.find(([prefix]) => command.args.join(' ').startsWith(prefix));
    if (rule === undefined) throw new Error(`unscripted: ${command.args.join(' ')}`);
    const answer = typeof rule[1] === 'function' ? rule[1]() : rule[1];
    return typeof answer === 'string' && answer.startsWith('-') ? new ErrorReply(answer.slice(1)) : answer;
  };
  return { run, sent };
}

test('no module and no Lua engine: one line saying what to do', async () => {
  const { run } = scripted([
    ['RL.TOKENBUCKET', "-ERR unknown command 'RL.TOKENBUCKET', with args beginning with: "],
    ['FUNCTION LIST', "-ERR Engine 'lua' not found"],
    ['SCRIPT LOAD', "-ERR Could not find scripting engine 'lua'"],
  ]);
  await assert.rejects(protocol.resolve(run, 'auto'), (error) => error instanceof StoreError && error.detail === protocol.NO_MODULE_NO_LUA);
  await assert.rejects(protocol.resolve(run, 'functions'), /the functions backend runs Lua and this server has no Lua engine/);
});

test('auto picks the library when the module is absent, loading it when it is missing', async () => {
  const { run, sent } = scripted([
    ['RL.TOKENBUCKET', "-ERR unknown command 'RL.TOKENBUCKET'"],
    ['FUNCTION LIST', []],
    ['FUNCTION LOAD REPLACE', 'ratelimit'],
  ]);
  assert.deepEqual(await protocol.resolve(run, 'auto'), ['functions', '']);
  assert.ok(sent.some((line) => line.startsWith('FUNCTION LOAD REPLACE #!lua name=ratelimit')), sent.join('\n'));
});

test('a library the server lost is loaded again, and the call sent once more', async () => {
  let calls = 0;
  const { run, sent } = scripted([
    [
      'FCALL rl_fixed',
      () => {
        calls += 1;
        return calls === 1 ? '-ERR Function not found' : [1, 2, 0, 1000, 3];
      },
    ],
    ['FUNCTION LOAD REPLACE', 'ratelimit'],
  ]);
  const request = protocol.acquireRequest([protocol.call('k', Algorithm.fixedWindow(3, 60))], 1);
  const grant = await protocol.acquireFlow(run, request, { backend: 'functions', sha: '', multi: true });
  assert.equal(grant.granted, 1n);
  assert.equal(sent.filter((line) => line.startsWith('FCALL')).length, 2);
});

test('errors are sorted: out of reach, invalid, refused', () => {
  assert.equal(protocol.classify(new Error('connect ECONNREFUSED 127.0.0.1:1')).kind, 'unavailable');
  assert.equal(protocol.classify(new ErrorReply('LOADING Redis is loading the dataset in memory')).kind, 'unavailable');
  assert.equal(protocol.classify(new ErrorReply("ERR cost must be greater than 0 (got '0')")).kind, 'invalid');
  assert.equal(protocol.classify(new ErrorReply('WRONGTYPE Operation against a key holding the wrong kind of value')).kind, 'server');
  assert.equal(protocol.classify(new StoreError('timeout')).unavailable, true);
});
