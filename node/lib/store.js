'use strict';
/**
 * Where limits are decided: Redis (through the user's client: node-redis, a node-redis
 * cluster, ioredis) or an in-process memory store for tests. A store acquires units from a
 * group of limits sharing a slot (all or nothing, or a partial grant) and refunds them.
 *
 * node-redis writes the commands of checks made in the same turn of the event loop together,
 * without waiting for earlier replies, so a thousand concurrent checks are a few round trips.
 * Every call is bounded by the rule of timing.js.
 */

const { connectionOf, everywhereReplies, keySlot } = require('./connection');
const { StoreError } = require('./errors');
const { KindMismatch } = require('./core/engine');
const { View } = require('./decision');
const { LocalLimits } = require('./local');
const { nowUs } = require('./clock');
const protocol = require('./protocol');
const { timedSend } = require('./timing');
const log = require('./log');

/** A command run on the connection, bounded by `timeoutMs`: the reply or an Error. */
async function runCommand(connection, command, timeoutMs) {
  try {
    if (command.everywhere && connection.cluster) {
      const replies = await Promise.all(connection.primaries().map((node) => timedSend(node, command.args, null, timeoutMs)));
      const failed = replies.find((reply) => reply instanceof Error);
      return failed === undefined ? everywhereReplies(replies) : failed;
    }
    return await timedSend(connection, command.args, command.everywhere || command.anywhere ? null : command.key, timeoutMs);
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

/** The store on a Redis client; `backend`: auto, module, functions or scripts. */
class RedisStore {
  constructor(client, { backend = 'auto', multi = null, metrics = null } = {}) {
    if (!protocol.BACKENDS.includes(backend)) {
      throw new TypeError(`backend is ${protocol.BACKENDS.join(', ')} (got '${backend}')`);
    }
    this.client = client;
    this.connection = connectionOf(client);
    this.cluster = this.connection.cluster;
    this.wanted = backend;
    this.multiHint = multi;
    this.resolved = null;
    this.resolving = null;
    this.metrics = metrics;
  }

  /** The backend in use (module, functions, scripts), once resolved; else null. */
  get backend() {
    return this.resolved === null ? null : this.resolved.backend;
  }

  /** [multi, partial]: RL.MULTI and partial grants (the library has both). */
  capabilities() {
    const multi = this.resolved !== null ? this.resolved.multi : Boolean(this.multiHint);
    return [multi, multi];
  }

  slot(key) {
    return this.cluster ? keySlot(key) : null;
  }

  runner(timeoutMs) {
    return (command) => runCommand(this.connection, command, timeoutMs);
  }

  /** Resolves the backend now (else on the first check); returns its name. */
  async connect(timeoutMs = 1000) {
    return (await this.ready(timeoutMs)).backend;
  }

  ready(timeoutMs) {
    if (this.resolved !== null) return Promise.resolve(this.resolved);
    if (this.resolving === null) {
      this.resolving = this.resolve(timeoutMs).finally(() => {
        this.resolving = null;
      });
    }
    return this.resolving;
  }

  async resolve(timeoutMs) {
    const run = this.runner(timeoutMs);
    const [backend, sha] = await protocol.resolve(run, this.wanted);
    let multi = true;
    if (backend === 'module') multi = this.multiHint === null ? await protocol.hasCommand(run, 'RL.MULTI') : this.multiHint;
    this.resolved = { backend, sha, multi };
    if (this.metrics !== null) this.metrics.backend(backend);
    log.info(`redis-ratelimit: store backend ${backend} (RL.MULTI: ${multi})`);
    return this.resolved;
  }

  async acquire(request, timeoutMs) {
    const resolved = await this.ready(timeoutMs);
    return protocol.acquireFlow(this.runner(timeoutMs), request, resolved);
  }

  async refund(request, timeoutMs) {
    const resolved = await this.ready(timeoutMs);
    return protocol.refundFlow(this.runner(timeoutMs), request, resolved);
  }

  /** Runs a module command (RL.PEEK key ...) on the backend in use. */
  async call(args, { timeoutMs = 1000 } = {}) {
    const resolved = await this.ready(timeoutMs);
    return protocol.callFlow(this.runner(timeoutMs), args.map(String), resolved);
  }

  /** Closes a connection of the limiter's own (ioredis's duplicate); the user's client stays open. */
  close() {
    if (this.connection !== this.client && typeof this.connection.close === 'function') this.connection.close();
  }
}

/**
 * An in-process store on the core's algorithms and this process's clock, for tests and
 * single-process services. `down` makes every call fail as unreachable; `cluster` reports hash
 * slots so limits in different slots are called separately.
 */
class MemoryStore {
  constructor({ multi = true, cluster = false, clock = null } = {}) {
    this.limits = new LocalLimits({ strict: true });
    /** Unix µs (BigInt) of the decisions (default: this process's clock). */
    this.clock = clock || nowUs;
    this.multi = multi;
    this.cluster = cluster;
    this.down = false;
    this.delayMs = 0;
    this.offsetUs = 0n;
    this.calls = 0;
    this.backend = 'memory';
  }

  capabilities() {
    return [this.multi, this.multi];
  }

  slot(key) {
    return this.cluster ? keySlot(key) : null;
  }

  async connect() {
    return 'memory';
  }

  async pause() {
    if (this.delayMs) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
  }

  async acquire(request) {
    await this.pause();
    this.calls += 1;
    if (this.down) throw new StoreError('unavailable', 'the memory store is down');
    const quotas = request.calls.map((c) => {
      let quota = c.algorithm.shape().unitQuota();
      if (c.maxWaitMs !== null) quota = quota.withMaxWaitNs(BigInt(c.maxWaitMs) * 1000000n);
      if (c.algorithm.inFlight) {
        if (request.holder === null) throw new StoreError('config', 'an in-flight limit needs a holder id');
        quota = quota.withHolder(request.holder);
      }
      return quota;
    });
    const keys = request.calls.map((c) => c.key);
    let verdict;
    try {
      verdict = this.limits.acquire(
        keys,
        quotas,
        request.calls.map((c) => c.weight),
        request.units,
        request.partialMin,
        this.clock() + this.offsetUs,
      );
    } catch (error) {
      if (error instanceof KindMismatch) {
        throw new StoreError('server', `WRONGTYPE key '${keys[error.index]}' holds another kind of limiter`);
      }
      throw error;
    }
    let views = verdict.perLimit.map((decision) => View.fromFields(decision.replyFields()));
    if (request.partialMin === null && views.length === 1) {
      const [view] = views;
      views = [new View(verdict.units > 0n, view.remaining, view.retryAfterMs, view.resetAfterMs, view.limit)];
    }
    return { granted: verdict.units, binding: verdict.binding, views, backend: 'memory' };
  }

  async refund(request) {
    await this.pause();
    this.calls += 1;
    if (this.down) throw new StoreError('unavailable', 'the memory store is down');
    const quotas = request.calls.map((c) => {
      let quota = c.algorithm.shape().unitQuota().withCost(request.units * c.weight);
      if (c.algorithm.inFlight) quota = quota.withHolder(request.holder || '-');
      return quota;
    });
    this.limits.refund(
      request.calls.map((c) => c.key),
      quotas,
      this.clock() + this.offsetUs,
    );
  }

  close() {}
}

module.exports = { RedisStore, MemoryStore, runCommand };
