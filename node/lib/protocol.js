'use strict';
/**
 * The module's commands as argument lists, their replies, and the three backends that run them
 * (the Rust client's store/reply.rs and store/backend.rs). Pure: no I/O. A flow is an async
 * function given `run(command)`, which sends one command and resolves with its reply or with
 * the Error it raised (never rejects).
 *
 * backend 'auto' probes once: the module if its commands exist (a call of RL.TOKENBUCKET
 * without arguments), else the Functions library (functions/ratelimit.lua, shipped in this
 * package, loaded with FUNCTION LOAD REPLACE if absent), else the same file as a script
 * (SCRIPT LOAD, then EVALSHA, loaded again after NOSCRIPT).
 */

const fs = require('node:fs');
const path = require('node:path');
const { COMMANDS, CONCURRENCY, GCRA } = require('./kinds');
const { StoreError } = require('./errors');
const { View } = require('./decision');
const log = require('./log');

const LIBRARY_NAME = 'ratelimit';
/** Where the package keeps its copy of functions/ratelimit.lua (made by scripts/copy-library.js). */
const LIBRARY_COPY = path.join(__dirname, 'ratelimit.lua');
/** The repository's file, for a package required straight from a clone that never built it. */
const LIBRARY_SOURCE = path.join(__dirname, '..', '..', 'functions', 'ratelimit.lua');

let librarySourceText = null;

/** The Functions library shipped in the package (copied from functions/ratelimit.lua). */
function librarySource() {
  if (librarySourceText === null) {
    const file = fs.existsSync(LIBRARY_COPY) ? LIBRARY_COPY : LIBRARY_SOURCE;
    librarySourceText = fs.readFileSync(file, 'utf8');
  }
  return librarySourceText;
}

/** The library's script form: the file without its first line (#!lua name=...). */
function scriptSource() {
  const text = librarySource();
  return text.slice(text.indexOf('\n') + 1);
}

const BACKENDS = Object.freeze(['auto', 'module', 'functions', 'scripts']);

/**
 * The most units (cost × weight) a call can take: the module's (an unsigned 64-bit integer),
 * and the Functions library's (Lua numbers are exact to 2^53).
 */
const MODULE_MAX_UNITS = (1n << 64n) - 1n;
const LIBRARY_MAX_UNITS = 1n << 53n;

/** The most units a call can take on `backend` (null: not resolved yet). */
function maxUnits(backend) {
  return backend === 'functions' || backend === 'scripts' ? LIBRARY_MAX_UNITS : MODULE_MAX_UNITS;
}

/** An error reply of the server (node-redis's ErrorReply, ioredis's ReplyError). */
function isErrorReply(error) {
  const name = error && error.constructor && error.constructor.name;
  return name === 'ErrorReply' || name === 'ReplyError';
}

const UNAVAILABLE_CODES = ['LOADING', 'READONLY', 'CLUSTERDOWN', 'TRYAGAIN', 'MASTERDOWN'];
/**
 * An argument error of the module or the library: `ERR cost must be greater than 0 (got
 * '0')`, `ERR cost * weight is too large`, `ERR limit 2: limit must be at most 10000 (the
 * ratelimit.max-log-entries setting)` (wire/src/error.rs, the library's arg_error).
 */
const ARGUMENT_ERROR = /^(?:ERR )?[^\n]*? (?:must|is too large)\b/;

/**
 * Sorts a client error into out of reach (fall back), invalid (the caller's error) and refused
 * (report it).
 */
function classify(error) {
  if (error instanceof StoreError) return error;
  const text = String((error && error.message) || error);
  if (!isErrorReply(error)) return new StoreError('unavailable', text || 'the client failed');
  if (UNAVAILABLE_CODES.some((code) => text.startsWith(code))) return new StoreError('unavailable', text);
  if (ARGUMENT_ERROR.test(text)) return new StoreError('invalid', text);
  return new StoreError('server', text);
}

/** Each command's Functions library function, whether its keys come counted, how many lead. */
const FUNCTIONS = new Map(
  COMMANDS.filter((command) => command.function !== null).map((command) => [
    command.name,
    [command.function, command.countsKeys, command.leadingKeys],
  ]),
);

/**
 * The command running the module command `args` on `backend`: itself on the module,
 * FCALL function numkeys key... arg... on the library, EVALSHA sha numkeys key... function
 * arg... as a script.
 */
function translate(backend, sha, args) {
  if (backend === 'module' || backend === 'memory' || args.length === 0) return [...args];
  const found = FUNCTIONS.get(args[0].toUpperCase());
  if (found === undefined) return [...args];
  const [fn, counted, leading] = found;
  const rest = args.slice(1);
  let keys;
  let after;
  if (counted) {
    const count = Number(rest[0]);
    keys = rest.slice(1, count + 1);
    after = rest.slice(count + 1);
  } else {
    keys = rest.slice(0, leading);
    after = rest.slice(leading);
  }
  if (backend === 'scripts') return ['EVALSHA', sha, String(keys.length), ...keys, fn, ...after];
  return ['FCALL', fn, String(keys.length), ...keys, ...after];
}

/**
 * Whether an error reply says the server lost the backend's code (NOSCRIPT for the script;
 * Function not found for the library).
 */
function lost(backend, error) {
  const text = String((error && error.message) || '');
  if (backend === 'scripts') return text.startsWith('NOSCRIPT');
  if (backend === 'functions') return text.includes('Function not found');
  return false;
}

/**
 * A command a flow asks the connection to run: its arguments; `everywhere`: to every primary
 * of a cluster (loading code); `anywhere`: no key, any node answers; `key`: the key a module
 * command is about (on a cluster, the node of its slot), sent exactly once.
 */
function command(args, { everywhere = false, anywhere = false, key = null } = {}) {
  return { args, everywhere, anywhere, key };
}

/**
 * The module command `args` on `backend`, to be sent exactly once: its first key is RL.MULTI's
 * third argument, every other command's second.
 */
function keyed(backend, sha, args) {
  const index = args.length && args[0].toUpperCase() === 'RL.MULTI' ? 2 : 1;
  return command(translate(backend, sha, args), { key: args.length > index ? args[index] : null });
}

/**
 * Whether the server knows command `name`: called without arguments, a known command answers
 * `wrong number of arguments`, an unknown one `unknown command` (no side effect).
 */
async function hasCommand(run, name) {
  const reply = await run(command([name], { anywhere: true }));
  if (reply instanceof Error) {
    const text = String(reply.message).toLowerCase();
    if (text.includes('unknown command')) return false;
    if (text.includes('wrong number of arguments')) return true;
    throw classify(reply);
  }
  return true;
}

/** With the automatic choice: no module, and no Lua engine to run the library or the script. */
const NO_MODULE_NO_LUA =
  'no rate-limit backend on this server: the ratelimit module is not loaded and the server has no ' +
  'Lua engine (a Valkey without its lua module), so neither the Functions library nor the script ' +
  'can run; load the module (loadmodule /path/to/libredis_ratelimit.so) or give the server its Lua engine';

function noLuaEngine(error) {
  const text = error.detail.toLowerCase();
  return text.includes("engine 'lua' not found") || text.includes('could not find scripting engine');
}

function luaNamed(error, name) {
  if (!noLuaEngine(error)) return error;
  return new StoreError(
    'server',
    `the ${name} backend runs Lua and this server has no Lua engine (a Valkey without its lua ` +
      'module): load the ratelimit module and use the module backend, or give the server its Lua engine',
  );
}

/** Picks and prepares the backend `wanted` stands for: [backend, sha]. Throws a StoreError saying why none can work. */
async function resolve(run, wanted) {
  if (wanted === 'module') {
    await checkAcl(run);
    return ['module', ''];
  }
  if (wanted === 'functions') {
    try {
      await loadLibrary(run);
    } catch (error) {
      throw error instanceof StoreError ? luaNamed(error, 'functions') : error;
    }
    return ['functions', ''];
  }
  if (wanted === 'scripts') {
    try {
      return ['scripts', await loadScript(run)];
    } catch (error) {
      throw error instanceof StoreError ? luaNamed(error, 'scripts') : error;
    }
  }
  if (await hasCommand(run, 'RL.TOKENBUCKET')) {
    await checkAcl(run);
    return ['module', ''];
  }
  let functions;
  try {
    await loadLibrary(run);
    return ['functions', ''];
  } catch (error) {
    if (!(error instanceof StoreError) || error.unavailable) throw error;
    functions = error;
  }
  try {
    return ['scripts', await loadScript(run)];
  } catch (scripts) {
    if (!(scripts instanceof StoreError) || scripts.unavailable) throw scripts;
    if (noLuaEngine(functions) && noLuaEngine(scripts)) throw new StoreError('server', NO_MODULE_NO_LUA);
    throw new StoreError(
      'server',
      `no rate-limit backend on this server: no module commands; the Functions library: ${functions.detail}; scripts: ${scripts.detail}`,
    );
  }
}

/**
 * A call of each module command the limiter sends, with as many arguments as it takes and
 * values it refuses (nothing is written): Redis checks a call's argument count before its ACL,
 * so only such a call answers NOPERM when an ACL refuses the command.
 */
const PROBE_KEY = 'rl-acl-probe:{0}';
const ACL_PROBES = [
  ['RL.TOKENBUCKET', PROBE_KEY, 'x', 'x'],
  ['RL.SLIDING', PROBE_KEY, 'x', 'x'],
  ['RL.FIXED', PROBE_KEY, 'x', 'x'],
  ['RL.SLIDINGLOG', PROBE_KEY, 'x', 'x'],
  ['CL.THROTTLE', PROBE_KEY, 'x', 'x', 'x'],
  ['RL.MULTI', '1', PROBE_KEY, 'x', 'x', 'x'],
  ['RL.ACQUIRE', PROBE_KEY, 'x', 'x', 'x'],
  ['RL.PEEK', PROBE_KEY, 'x', 'x'],
  ['RL.REFUND', PROBE_KEY, 'x', 'x', 'x'],
];

/**
 * Throws StoreError('config') naming them when the server's ACL refuses this user every module
 * command; logs the ones it refuses when only some are.
 */
async function checkAcl(run) {
  const refused = [];
  for (const probe of ACL_PROBES) {
    const reply = await run(command(probe, { anywhere: true }));
    if (reply instanceof Error) {
      const text = String(reply.message);
      if (text.startsWith('NOPERM') && text.includes('to run')) refused.push(probe[0]);
      else if (classify(reply).unavailable) throw classify(reply);
    }
  }
  if (refused.length === ACL_PROBES.length) {
    throw new StoreError(
      'config',
      'the server has the redis-ratelimit module, but its ACL refuses this user every one of its ' +
        `commands (${refused.join(', ')}): grant them by name (ACL SETUSER <user> +rl.tokenbucket ...)`,
    );
  }
  if (refused.length) {
    log.warn(`redis-ratelimit: the server's ACL refuses this user ${refused.join(', ')}: checks needing them get the fallback`);
  }
}

async function loadLibrary(run) {
  const listed = await run(command(['FUNCTION', 'LIST', 'LIBRARYNAME', LIBRARY_NAME], { everywhere: true }));
  if (listed instanceof Error) throw classify(listed);
  // On a cluster, every primary's answer: present only if every one has it.
  const answers = Array.isArray(listed) && listed.everywhere ? listed : [listed];
  const present = answers.length > 0 && answers.every((answer) => Array.isArray(answer) && answer.length > 0);
  if (!present) await reloadLibrary(run);
}

async function reloadLibrary(run) {
  const loaded = await run(command(['FUNCTION', 'LOAD', 'REPLACE', librarySource()], { everywhere: true }));
  if (loaded instanceof Error) throw classify(loaded);
}

async function loadScript(run) {
  let loaded = await run(command(['SCRIPT', 'LOAD', scriptSource()], { everywhere: true }));
  if (loaded instanceof Error) throw classify(loaded);
  if (Array.isArray(loaded) && loaded.everywhere) loaded = loaded[0];
  return String(loaded);
}

/** Gives the server the backend's code again; returns the script's SHA (or ''). */
async function reload(run, backend) {
  if (backend === 'scripts') return loadScript(run);
  if (backend === 'functions') await reloadLibrary(run);
  return '';
}

// Requests and replies.

/** One limit of a group as the store is asked about it. */
function call(key, algorithm, weight = 1n, maxWaitMs = null) {
  return { key, algorithm, weight: BigInt(weight), maxWaitMs };
}

/**
 * Take `units` (× weight) from every limit of a group, all or nothing; with `partialMin` as
 * many as every limit has, at least that (PARTIAL MIN). Units are BigInt.
 */
function acquireRequest(calls, units, partialMin = null, holder = null) {
  return { calls, units: BigInt(units), partialMin: partialMin === null ? null : BigInt(partialMin), holder };
}

/** Give `units` (× weight) back to every limit of a group (in-flight: the holder). */
function refundRequest(calls, units, holder = null) {
  return { calls, units: BigInt(units), holder };
}

/**
 * [shape, args]: `single` (five integers), `throttle` (redis-cell's reply) or `multi`
 * (RL.MULTI's seven fields), routed as the Rust client's wire::encode::group routes a call (the
 * golden encodings check it): one limit of a kind with a command of its own goes as that
 * command; one in-flight limit taken whole as RL.ACQUIRE; one GCRA limit taken whole on a server
 * without RL.MULTI as CL.THROTTLE; anything else as RL.MULTI. Throws StoreError('config') when
 * the request needs a command the server lacks.
 */
function acquireCommand(request, multi) {
  const { calls } = request;
  if (calls.length === 0) throw new StoreError('config', 'a group has at least one limit');
  const partial = (args) => {
    if (request.partialMin !== null) args.push('PARTIAL', 'MIN', String(request.partialMin > 1n ? request.partialMin : 1n));
  };
  if (calls.length === 1) {
    const only = calls[0];
    const units = String(request.units * (only.weight > 1n ? only.weight : 1n));
    const whole = request.partialMin === null;
    const own = only.algorithm.command;
    if (own !== null) {
      const args = [own, only.key, ...only.algorithm.wireArgs(), units];
      partial(args);
      if (only.maxWaitMs !== null) {
        if (!whole) throw new StoreError('config', 'pacing (MAXWAIT) cannot be combined with a partial grant');
        args.push('MAXWAIT', String(only.maxWaitMs));
      }
      return ['single', args];
    }
    if (only.algorithm.kind === CONCURRENCY && whole) {
      if (request.holder === null) throw new StoreError('config', 'an in-flight limit needs a holder id');
      return ['single', ['RL.ACQUIRE', only.key, String(only.algorithm.quota), request.holder, String(only.algorithm.ttlMs)]];
    }
    if (only.algorithm.kind === GCRA && whole && !multi) {
      return ['throttle', ['CL.THROTTLE', only.key, ...only.algorithm.wireArgs(), units]];
    }
    if (!multi) throw new StoreError('config', 'this algorithm has no command of its own: it needs RL.MULTI');
  }
  if (!multi) throw new StoreError('config', 'several limits in one call need RL.MULTI');
  if (calls.some((c) => c.maxWaitMs !== null)) throw new StoreError('config', 'a paced limit (MAXWAIT) needs a call of its own');
  let holder = null;
  if (calls.some((c) => c.algorithm.kind === CONCURRENCY)) {
    if (request.holder === null) throw new StoreError('config', 'an in-flight limit needs a holder id');
    holder = request.holder;
  }
  const args = ['RL.MULTI', String(calls.length), ...calls.map((c) => c.key)];
  for (const c of calls) args.push(c.algorithm.wireName, ...c.algorithm.wireArgs());
  args.push('COST', String(request.units));
  if (calls.some((c) => c.weight !== 1n)) args.push('WEIGHTS', ...calls.map((c) => String(c.weight > 1n ? c.weight : 1n)));
  if (holder !== null) args.push('HOLDER', holder);
  partial(args);
  return ['multi', args];
}

/**
 * One command per limit giving its units back (as wire::encode::refund writes it). Throws
 * StoreError('config') for an in-flight limit without its holder id.
 */
function refundCommands(request) {
  return request.calls.map((c) => {
    const units = request.units * (c.weight > 1n ? c.weight : 1n);
    if (c.algorithm.kind === CONCURRENCY) {
      if (request.holder === null) throw new StoreError('config', 'an in-flight limit needs a holder id');
      return ['RL.RELEASE', c.key, request.holder];
    }
    if (c.algorithm.kind === GCRA) return ['CL.THROTTLE', c.key, ...c.algorithm.wireArgs(), `-${units}`];
    return ['RL.REFUND', c.key, c.algorithm.wireName, ...c.algorithm.wireArgs(), String(units)];
  });
}

function integer(value) {
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  if (typeof value === 'bigint') return Number(value);
  if (typeof value === 'string' && /^-?\d+$/.test(value)) return Number(value);
  if (Buffer.isBuffer(value) && /^-?\d+$/.test(value.toString())) return Number(value.toString());
  throw new TypeError(`not an integer: ${JSON.stringify(value)}`);
}

function five(value) {
  if (!Array.isArray(value) || value.length !== 5) throw new TypeError(`expected 5 integers, got ${JSON.stringify(value)}`);
  return value.map(integer);
}

/**
 * What a group answered: the units granted (BigInt; 0: denied, nothing taken), the binding
 * limit's index in the request, every limit's view, the backend that answered.
 */
function grant(granted, binding, views, backend) {
  return { granted, binding, views, backend };
}

/** Reads the reply of an acquire sent as `shape`. */
function parseAcquire(shape, request, reply, backend) {
  const partial = request.partialMin !== null;
  if (shape === 'single') {
    const fields = five(reply);
    const view = View.fromFields(fields);
    const granted = partial ? BigInt(Math.max(fields[0], 0)) : view.allowed ? request.units : 0n;
    const own = new View(granted > 0n, view.remaining, view.retryAfterMs, view.resetAfterMs, view.limit);
    return grant(granted, 0, [own], backend);
  }
  if (shape === 'throttle') {
    const [limited, limit, remaining, retryS, resetS] = five(reply);
    const allowed = limited === 0;
    const retryMs = allowed ? 0 : retryS < 0 ? null : retryS * 1000;
    const view = new View(allowed, Math.max(remaining, 0), retryMs, Math.max(resetS, 0) * 1000, Math.max(limit, 0));
    return grant(allowed ? request.units : 0n, 0, [view], backend);
  }
  if (!Array.isArray(reply) || reply.length !== 7) throw new TypeError(`RL.MULTI: expected 7 fields, got ${JSON.stringify(reply)}`);
  const first = integer(reply[0]);
  if (!Array.isArray(reply[6])) throw new TypeError('RL.MULTI: the views are not a list');
  const views = reply[6].map((item) => View.fromFields(five(item)));
  if (views.length !== request.calls.length) {
    throw new TypeError(`RL.MULTI: ${views.length} views for ${request.calls.length} limits`);
  }
  const granted = partial ? BigInt(Math.max(first, 0)) : first !== 0 ? request.units : 0n;
  const binding = Math.max(integer(reply[5]), 0);
  return grant(granted, Math.min(binding, views.length - 1), views, backend);
}

/** Any module command on the backend in use, once more after reloading lost code. */
async function callFlow(run, args, resolved) {
  for (let attempt = 0; attempt < 2; attempt += 1) {
    const reply = await run(keyed(resolved.backend, resolved.sha, args));
    if (reply instanceof Error) {
      if (attempt === 0 && lost(resolved.backend, reply)) {
        resolved.sha = (await reload(run, resolved.backend)) || resolved.sha;
        continue;
      }
      throw classify(reply);
    }
    return reply;
  }
  throw new StoreError('server', "the server lost the backend's code twice");
}

/**
 * One group acquire on `backend`: the command, and once more after reloading code the server
 * lost (callFlow). Throws StoreError. `resolved` ({ backend, sha, multi }) gets a reloaded
 * script's SHA.
 */
async function acquireFlow(run, request, resolved) {
  const [shape, args] = acquireCommand(request, resolved.multi);
  const reply = await callFlow(run, args, resolved);
  try {
    return parseAcquire(shape, request, reply, resolved.backend);
  } catch (error) {
    if (error instanceof TypeError || error instanceof RangeError) throw new StoreError('server', `unexpected reply: ${error.message}`);
    throw error;
  }
}

/** A group's refunds (one command per limit, sent together); once more after lost code. */
async function refundFlow(run, request, resolved) {
  const commands = refundCommands(request);
  for (let attempt = 0; attempt < 2; attempt += 1) {
    const replies = await Promise.all(commands.map((args) => run(keyed(resolved.backend, resolved.sha, args))));
    const errors = replies.filter((reply) => reply instanceof Error);
    if (errors.length === 0) return;
    if (attempt === 0 && errors.some((error) => lost(resolved.backend, error))) {
      resolved.sha = (await reload(run, resolved.backend)) || resolved.sha;
      continue;
    }
    throw classify(errors[0]);
  }
}

module.exports = {
  LIBRARY_NAME,
  LIBRARY_COPY,
  LIBRARY_SOURCE,
  BACKENDS,
  MODULE_MAX_UNITS,
  LIBRARY_MAX_UNITS,
  NO_MODULE_NO_LUA,
  librarySource,
  scriptSource,
  maxUnits,
  classify,
  isErrorReply,
  translate,
  lost,
  command,
  keyed,
  hasCommand,
  resolve,
  reload,
  call,
  acquireRequest,
  refundRequest,
  acquireCommand,
  refundCommands,
  parseAcquire,
  acquireFlow,
  refundFlow,
  callFlow,
};
