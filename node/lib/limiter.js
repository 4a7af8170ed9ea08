'use strict';
/**
 * The limiter: checks requests against policies on the user's Redis client (node-redis,
 * a node-redis cluster, ioredis) or on a store. Each store call is bounded by the policy's
 * timeout (50 ms by default) by the rule of timing.js: a call times out when the store is
 * silent, never because this process is late.
 */

const { Breaker } = require('./state');
const { CheckError, StoreError } = require('./errors');
const { Engine, PolicyState, Target, newHolder } = require('./engine');
const { MissingInput } = require('./keys');
const { Metrics } = require('./metrics');
const { Policy } = require('./policy');
const { classify, maxUnits } = require('./protocol');
const { MemoryStore, RedisStore } = require('./store');
const { DEFAULT_MAX_KEYS } = require('./tables');
const { FALLBACK, STORE, LEASE } = require('./decision');
const { nowUs } = require('./clock');
const { now } = require('./timing');
const log = require('./log');

/**
 * Most limit sets of store-backed policies whose states are kept (about as many as plans and
 * overrides; the Rust client's MAX_STATES).
 */
const MAX_RESOLVED = 1024;

/** A cost or an amount of units as a BigInt, or null when it is not a whole number. */
function units(value) {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  return null;
}

/**
 * Throws CheckError for text Redis cannot be sent as UTF-8 (a lone surrogate, which
 * JSON.parse('"\\udcff"') makes): it would be sent as U+FFFD, another key. Checked per call.
 */
function checkText(what, text) {
  if (typeof text.isWellFormed === 'function' ? text.isWellFormed() : !/[\ud800-\udfff]/.test(text)) return;
  const at = [...text].findIndex((char) => /^[\ud800-\udfff]$/.test(char));
  throw new CheckError(`${what} '${text.slice(0, 64)}' is not valid text: a lone surrogate at position ${at} (keys are sent as UTF-8)`);
}

function inputsOf(inputs) {
  const merged = {};
  if (inputs !== null && inputs !== undefined) {
    if (typeof inputs !== 'object') throw new CheckError('the inputs of a check are an object ({ key: "alice" })');
    for (const [name, value] of Object.entries(inputs)) {
      if (value !== undefined && value !== null) merged[name] = String(value);
    }
  }
  return merged;
}

function costOf(options) {
  if (typeof options === 'number' || typeof options === 'bigint') return options;
  if (options === null || options === undefined) return 1;
  return options.cost === undefined ? 1 : options.cost;
}

/**
 * Checks requests against policies.
 *
 * ```js
 * const limiter = new RateLimiter(client, [new Policy('api', [Limit.tokenBucket('per-key',
 *   { capacity: 100, refill: 60, key: 'rl:{{{key}}}' })])], { replicas: 3 });
 * const decision = await limiter.check('api', { key: 'alice' });
 * ```
 *
 * `replicas` (a number, or a function read at each fallback decision) divides quotas in the
 * local fallback; `breaker` is { failures, openForMs }, default { failures: 3, openForMs: 500 }.
 * `maxKeys` bounds each table of per-key-set state (each policy's last store answers,
 * remembered denials and leases; the fallback's local states): past it, expired entries go
 * first, then the one answered longest ago.
 */
class RateLimiter {
  constructor(redis, policies = [], options = {}) {
    const {
      replicas = 1,
      breaker = {},
      metrics = null,
      plans = null,
      backend = 'auto',
      maxKeys = DEFAULT_MAX_KEYS,
    } = options;
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) {
      throw new RangeError(`maxKeys: the most key sets a table remembers, a whole number from 1 (got ${maxKeys})`);
    }
    this.maxKeys = maxKeys;
    this.metrics = metrics || new Metrics();
    this.store =
      redis instanceof RedisStore || redis instanceof MemoryStore ? redis : new RedisStore(redis, { backend, metrics: this.metrics });
    if (this.store instanceof RedisStore && this.store.metrics === null) this.store.metrics = this.metrics;
    this.states = new Map();
    for (const policy of policies) {
      if (!(policy instanceof Policy)) throw new TypeError('a limiter takes Policy objects');
      if (this.states.has(policy.name)) throw new RangeError(`two policies are named '${policy.name}'`);
      this.states.set(policy.name, new PolicyState(policy, maxKeys));
    }
    const storeBacked = [...this.states.values()].find((state) => state.policy.tenantInput !== null);
    if (storeBacked !== undefined && plans === null) {
      throw new RangeError(
        `policy '${storeBacked.name}' takes its limits from the policy store: give the limiter plans (a started PlanSource)`,
      );
    }
    this.plans = plans;
    const count = typeof replicas === 'function' ? replicas : () => replicas;
    this.tasks = new Set();
    this.engine = new Engine({
      store: this.store,
      replicas: () => Math.max(Math.floor(Number(count())) || 1, 1),
      breaker: new Breaker(breaker.failures === undefined ? 3 : breaker.failures, breaker.openForMs === undefined ? 500 : breaker.openForMs),
      metrics: this.metrics,
      maxKeys,
      call: (op) => this.timedAcquire(op),
      refunds: (op) => this.refunds(op),
      spawn: (work) => this.spawn(work),
    });
    // The states of store-backed policies, by limit set: the least recently used goes past MAX_RESOLVED.
    this.resolved = new Map();
    this.sweeper = null;
    this.metrics.circuit(false);
  }

  get breaker() {
    return this.engine.breaker;
  }

  /** The store backend in use (module, functions, scripts, memory), once resolved. */
  get backend() {
    return this.store.backend;
  }

  /** Whether the circuit breaker holds store calls back. */
  get storeUnreachable() {
    return this.engine.breaker.isOpen;
  }

  policy(name) {
    const state = this.states.get(name);
    return state === undefined ? null : state.policy;
  }

  get policies() {
    return [...this.states.values()].map((state) => state.policy);
  }

  /**
   * Resolves the store backend now (it is otherwise resolved on the first check); resolves
   * with its name. Rejects with the store's error if it is unreachable.
   */
  async connect({ timeoutMs = 1000 } = {}) {
    try {
      return await this.store.connect(timeoutMs);
    } catch (error) {
      throw classify(error);
    }
  }

  stateFor(registered, inputs) {
    const tenantInput = registered.policy.tenantInput;
    if (tenantInput === null || this.plans === null) return registered;
    const tenant = inputs[tenantInput];
    if (tenant === undefined) throw new CheckError(new MissingInput(tenantInput).message);
    checkText(`the input '${tenantInput}'`, tenant);
    const policy = this.plans.policyFor(registered.policy, tenant);
    const signature = `${policy.name}\u0000${policy.limits
      .map((limit) => `${limit.name}\u0001${limit.key.text}\u0001${limit.algorithm.kind}\u0001${limit.algorithm.wireArgs().join(' ')}\u0001${limit.weight}`)
      .join('\u0000')}`;
    let state = this.resolved.get(signature);
    if (state === undefined) {
      if (this.resolved.size >= MAX_RESOLVED) this.resolved.delete(this.resolved.keys().next().value);
      state = new PolicyState(policy, this.maxKeys);
    } else {
      this.resolved.delete(signature);
    }
    this.resolved.set(signature, state);
    return state;
  }

  prepare(policy, cost, inputs) {
    const wanted = units(cost);
    if (wanted === null || wanted < 1n) throw new CheckError(`a check costs at least 1 unit (got ${cost})`);
    const registered = this.states.get(policy);
    if (registered === undefined) throw new CheckError(`no policy is named '${policy}'`);
    const state = this.stateFor(registered, inputs);
    const most = maxUnits(this.store.backend);
    if (wanted * state.heaviest > most) {
      const on = this.store.backend ? ` on the ${this.store.backend}` : '';
      throw new CheckError(
        `policy '${policy}': a cost of ${wanted} (x weight ${state.heaviest}) is more than the store takes (${most} units${on})`,
      );
    }
    let keys;
    try {
      keys = state.policy.limits.map((limit) => limit.key.render(inputs));
    } catch (error) {
      if (error instanceof MissingInput) throw new CheckError(error.message);
      throw error;
    }
    state.policy.limits.forEach((limit, index) => checkText(`policy '${policy}': limit '${limit.name}': the key`, keys[index]));
    const keySet = keys.join('\u0000');
    const target = new Target(state, keys, keySet, state.holdsSlots ? newHolder() : null);
    const started = now();
    const cached = state.policy.denyCache ? state.deny.get(keySet, wanted, started) : null;
    const lease = state.policy.lease;
    const leasable = lease !== null && wanted <= BigInt(lease.units) && this.store.capabilities()[1] && state.leases.hasRoom(keySet);
    return { target, cached, leasable, started, cost: wanted };
  }

  finish(prepared, decision) {
    const state = prepared.target.state;
    const binding = decision.bindingLimit;
    if (state.policy.denyCache && !decision.allowed && decision.source === STORE && !(binding !== null && binding.inFlight)) {
      state.deny.insert(prepared.target.keySet, prepared.cost, decision, prepared.started);
    }
    decision.inFlight = this.engine.inFlightOf(prepared.target, decision);
    if (decision.inFlight !== null) {
      const limiter = this;
      Object.defineProperty(decision, 'release', { value: () => limiter.release(decision), enumerable: false });
      Object.defineProperty(decision, Symbol.asyncDispose, { value: () => limiter.release(decision), enumerable: false });
    }
    this.metrics.decision(decision);
    return decision;
  }

  /** Records a store call's outcome: latency and errors in the metrics, the breaker. */
  answered(op, sent, result) {
    const breaker = this.engine.breaker;
    const at = now();
    this.metrics.storeLatency(op.policy, op.op, (at - sent) / 1000);
    if (result instanceof StoreError) {
      this.metrics.storeError(op.policy, result.kind);
      if (result.kind === 'server' || result.kind === 'config') log.warn(`redis-ratelimit: policy '${op.policy}': ${result.message}`);
      if (result.unavailable && breaker.failure(sent, at)) {
        this.metrics.circuitOpened();
        log.warn(`redis-ratelimit: the store is out of reach (${result.message}): circuit open`);
      }
    } else if (breaker.success(at)) {
      this.metrics.circuit(false);
      log.info('redis-ratelimit: the store answers again: circuit closed');
    }
    return result;
  }

  async timedAcquire(op) {
    const sent = now();
    let result;
    try {
      result = await this.store.acquire(op.request, op.timeoutMs);
    } catch (error) {
      result = classify(error);
    }
    return this.answered(op, sent, result);
  }

  async refunds(op) {
    const one = async (request) => {
      const started = now();
      let ok = true;
      try {
        await this.store.refund(request, op.timeoutMs);
      } catch (error) {
        this.metrics.storeError(op.policy, classify(error).kind);
        ok = false;
      }
      this.metrics.storeLatency(op.policy, 'refund', (now() - started) / 1000);
      return ok;
    };
    const results = await Promise.all(op.requests.map(one));
    return results.every(Boolean);
  }

  spawn(work) {
    const task = Promise.resolve(work).catch((error) => log.warn(`redis-ratelimit: background work failed: ${error.message}`));
    this.tasks.add(task);
    task.finally(() => this.tasks.delete(task));
  }

  /** Checks without a store call that `policy` exists and `inputs` fill its keys. */
  validate(policy, inputs = {}) {
    this.prepare(policy, 1n, inputsOf(inputs));
  }

  /**
   * Checks a request against `policy`; `inputs` fill the key templates (`{ key: 'alice' }`);
   * `options.cost` (default 1; a number or a BigInt). Admitted only if every limit admits
   * it, and then every limit is charged.
   */
  async check(policy, inputs = {}, options = {}) {
    const prepared = this.prepare(policy, costOf(options), inputsOf(inputs));
    this.startSweeper(prepared.target.state);
    if (prepared.cached !== null) {
      this.metrics.decision(prepared.cached);
      return prepared.cached;
    }
    const target = prepared.target;
    let decision;
    if (prepared.leasable) {
      const slot = target.state.leases.slot(target.keySet, target.keys);
      slot.waiting += 1;
      let release;
      try {
        release = await slot.lock.acquire();
      } finally {
        slot.waiting -= 1;
      }
      try {
        slot.busy = true;
        decision = await this.engine.leasedFlow(target, prepared.cost, slot, prepared.started);
      } finally {
        slot.busy = false;
        release();
      }
    } else {
      decision = await this.engine.storeFlow(target, prepared.cost);
    }
    return this.finish(prepared, decision);
  }

  releaseTarget(decision) {
    const held = decision.inFlight;
    if (held === null || held === undefined) return null;
    let state = this.states.get(held.policy);
    if (state === undefined) return null;
    if (state.policy.limits.length !== held.keys.length) {
      for (const resolved of this.resolved.values()) {
        if (resolved.name === held.policy && resolved.policy.limits.length === held.keys.length) state = resolved;
      }
    }
    return new Target(state, held.keys, held.keys.join('\u0000'), held.holder);
  }

  /** Gives back the in-flight slots an admitted request holds (when it ends). Idempotent. */
  async release(decision) {
    const target = this.releaseTarget(decision);
    if (target === null) return;
    decision.inFlight = null;
    if (target.holder !== null && decision.source === FALLBACK) {
      this.engine.releaseLocal(target);
      return;
    }
    await this.engine.releaseFlow(target);
  }

  /**
   * Checks, runs `work(decision)` when admitted, and gives the in-flight slots back when it
   * ends (however it ends); resolves with work's result, or with the refused decision.
   */
  async hold(policy, inputs, work, options = {}) {
    const decision = await this.check(policy, inputs, options);
    if (!decision.allowed) return decision;
    try {
      return await work(decision);
    } finally {
      if (decision.inFlight !== null) await this.release(decision);
    }
  }

  /**
   * Reserves `estimate` units (an LLM call's token budget, say); settle with the actual amount
   * once known (see Reservation).
   */
  async reserve(policy, inputs, { estimate } = {}) {
    const merged = inputsOf(inputs);
    const decision = await this.check(policy, merged, { cost: estimate });
    return new Reservation(this, policy, merged, units(estimate), decision);
  }

  /** Refunds every outstanding lease now (call it on shutdown). */
  async releaseLeases() {
    await this.sweep(true);
  }

  /** Stops the background sweeper and gives unspent leases back; the Redis client stays open. */
  async close() {
    if (this.sweeper !== null) {
      clearInterval(this.sweeper);
      this.sweeper = null;
    }
    await this.releaseLeases();
    await Promise.all([...this.tasks]);
    this.store.close();
  }

  startSweeper(state) {
    if (this.sweeper !== null || state.policy.lease === null) return;
    const leased = [...this.states.values()].filter((s) => s.policy.lease !== null).map((s) => s.policy.lease.lifetimeMs);
    const every = Math.max(Math.min(...leased, state.policy.lease.lifetimeMs) / 2, 10);
    this.sweeper = setInterval(() => this.spawn(this.sweep(false)), every);
    this.sweeper.unref();
  }

  async sweep(everything) {
    const at = now();
    for (const state of [...this.states.values(), ...this.resolved.values()]) {
      state.deny.purge(at);
      for (const [keys, taken] of state.leases.takeExpired(at, everything)) {
        await this.engine.refundLease(state, keys, taken);
      }
    }
  }

  async reservationSettle(reservation, actual) {
    const prepared = this.prepare(reservation.policy, 1n, reservation.inputs);
    const target = prepared.target;
    const difference = actual - reservation.estimate;
    if (difference < 0n) {
      await this.reserveRefund(target, -difference);
      return 0n;
    }
    if (difference > 0n) return this.reserveDebit(target, difference);
    return 0n;
  }

  /**
   * An Express middleware checking each request against `policy` (see express.js): options
   * key(req), cost(req), skip(req), inputName, onAdmitted, legacy.
   */
  express(policy, options = {}) {
    return require('./express').middleware(this, policy, options);
  }

  /** A plain `(req) => result` check for any framework (see http.js's checker). */
  checker(policy, options = {}) {
    return require('./http').checker(this, policy, options);
  }

  /** A store for express-rate-limit, deciding with `policy` (see express.js's RateLimitStore). */
  rateLimitStore(policy, options = {}) {
    const { RateLimitStore } = require('./express');
    return new RateLimitStore(this, policy, options);
  }

  async reserveRefund(target, amount) {
    const refunds = this.engine
      .plan(target.state, target.keys)
      .map((group) => [group.filter((index) => !target.state.inFlight(index)), amount])
      .filter(([group]) => group.length);
    await this.engine.refundGroups(target, refunds);
    // A denial remembered while these units were spent is stale now.
    target.state.deny.forget(target.keySet);
  }

  /** Takes `amount` more (as much as the limits hold); the rest is owed. Resolves with the units owed. */
  async reserveDebit(target, amount) {
    const groups = this.engine
      .plan(target.state, target.keys)
      .map((group) => group.filter((index) => !target.state.inFlight(index)))
      .filter((group) => group.length);
    const unheld = new Target(target.state, target.keys, target.keySet, null);
    const acquired = await this.engine.acquireGroups(unheld, groups, amount, 1n, 'settle');
    const taken = acquired instanceof StoreError ? 0n : acquired.granted;
    const owed = amount - taken;
    if (owed > 0n) target.state.answers.owe(target.keySet, owed, nowUs());
    return owed;
  }
}

/** Whether an admitted decision charged the store (a store's or a lease's decision). */
function chargedTheStore(decision) {
  return decision.allowed && (decision.source === STORE || decision.source === LEASE);
}

/**
 * Units reserved before the real amount is known (LLM tokens, bytes of an upload).
 *
 * settle(actual) refunds estimate - actual when the call used less, and debits actual -
 * estimate when it used more: as much as every limit holds at once, and the rest is owed by the
 * key set, charged (as partial grants, before deciding) by this replica's next checks of it.
 * Debt bound: at any instant a key set's admissions exceed its allowance by at most the
 * overshoot of its settled reservations still owed, each at most actual - estimate (a replica
 * that stops forgets its debts: that much over-admission, never more). release() gives the
 * whole estimate back. A denied reservation has nothing to settle.
 */
class Reservation {
  constructor(limiter, policy, inputs, estimate, decision) {
    this.limiter = limiter;
    this.policy = policy;
    this.inputs = inputs;
    this.estimate = estimate;
    this.decision = decision;
    this.settled = false;
    /** Units the last settle could not take from the limits (owed by the key set; BigInt). */
    this.owed = 0n;
  }

  get allowed() {
    return this.decision.allowed;
  }

  /** Refunds or debits the difference to `actual`; resolves with the units owed (BigInt). */
  async settle(actual) {
    const amount = units(actual);
    const most = maxUnits(null);
    if (amount === null || amount < 0n || amount > most) {
      throw new CheckError(`a reservation settles with a whole number of units from 0 to ${most} (got ${actual})`);
    }
    if (this.settled) throw new CheckError('this reservation was already settled or released');
    this.settled = true;
    if (!this.decision.allowed) return 0n;
    this.owed = await this.limiter.reservationSettle(this, amount);
    return this.owed;
  }

  /** The call was not made: every reserved unit goes back. */
  async release() {
    await this.settle(0n);
  }
}

module.exports = { RateLimiter, Reservation, chargedTheStore, inputsOf };
