'use strict';
/**
 * Plans and per-tenant overrides from the policy store rlctl edits (the Rust client's plans/,
 * the Python client's plans.py): a policy built with Policy.fromStore takes its limits, for the
 * tenant a check names, from one snapshot of the store, followed through its change
 * notifications ({rl-policy}:changes, on a node-redis client that can subscribe) and a version
 * check every `checkEveryMs` (500) as the backstop.
 *
 * Keys do not depend on the plan: limit per-minute of policy api for tenant acme is always
 * rl:plan:{acme}:api:per-minute:sliding, so a change applies to the tenant's state (nobody
 * reset to full, nothing charged twice).
 */

const { GCRA, KINDS, TOKEN_BUCKET } = require('./kinds');
const { Algorithm } = require('./algorithms');
const { AlgorithmError, PolicyError } = require('./errors');
const { Metrics } = require('./metrics');
const { Limit, Policy } = require('./policy');
const { connectionOf } = require('./connection');
const { timedSend } = require('./timing');
const log = require('./log');

const VERSION_KEY = '{rl-policy}:version';
const PLANS_KEY = '{rl-policy}:plans';
const TENANTS_KEY = '{rl-policy}:tenants';
const OVERRIDES_KEY = '{rl-policy}:overrides';
const CHANNEL = '{rl-policy}:changes';
/** The kinds a plan's limit can be, by short name (the generated table, kinds.js). */
const PLAN_KINDS = KINDS.filter((kind) => kind.inPlans).map((kind) => kind.name);
const UNITS = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 };
/** Most built policies kept (about as many as plans and overrides). */
const MAX_POLICIES = 1024;

/** A text of the policy store that cannot be read. */
class SpecError extends Error {}

function parseDurationMs(text) {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text);
  if (match === null || Number(match[1]) === 0) {
    throw new SpecError(`bad duration '${text}': a whole number above zero then ms, s, m, h or d (60s, 7d)`);
  }
  return BigInt(match[1]) * BigInt(UNITS[match[2]]);
}

function durationText(ms) {
  for (const [unit, size] of [['d', 86400000n], ['h', 3600000n], ['m', 60000n], ['s', 1000n]]) {
    if (ms >= size && ms % size === 0n) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

/** One named limit: NAME=KIND:AMOUNT/PERIOD (per-day=fixed:100000/1d). */
class LimitSpec {
  constructor(name, kind, amount, periodMs) {
    this.name = name;
    this.kind = kind;
    this.amount = amount;
    this.periodMs = periodMs;
    this.text = `${name}=${kind}:${amount}/${durationText(periodMs)}`;
    Object.freeze(this);
  }

  static parse(text) {
    const match = /^([A-Za-z0-9_.-]{1,64})=([a-z]+):(\d+)\/(\S+)$/.exec(text);
    if (match === null) throw new SpecError(`bad limit '${text}': write NAME=KIND:AMOUNT/PERIOD (per-minute=sliding:1000/60s)`);
    const [, name, kind, amount, period] = match;
    if (!PLAN_KINDS.includes(kind)) throw new SpecError(`bad limit '${text}': unknown algorithm '${kind}'`);
    const spec = new LimitSpec(name, kind, BigInt(amount), parseDurationMs(period));
    try {
      spec.algorithm();
    } catch (error) {
      if (error instanceof AlgorithmError) throw new SpecError(`bad limit '${text}': ${error.message}`);
      throw error;
    }
    return spec;
  }

  algorithm() {
    const seconds = `${this.periodMs / 1000n}.${String(this.periodMs % 1000n).padStart(3, '0')}`;
    if (this.kind === TOKEN_BUCKET) return Algorithm.tokenBucket(this.amount, { refill: seconds });
    if (this.kind === GCRA) return Algorithm.gcra(this.amount > 1n ? this.amount - 1n : 0n, this.amount, seconds);
    return Algorithm.fromParams(this.kind, [String(this.amount), seconds]);
  }

  /** The plan limit a policy's default stands for (null if it is not one). */
  static fromLimit(limit) {
    const { algorithm } = limit;
    if (limit.weight !== 1n || limit.maxWaitMs !== null || !PLAN_KINDS.includes(algorithm.kind)) return null;
    let amount;
    let periodNs;
    if (algorithm.kind === GCRA) [amount, periodNs] = [algorithm.count, algorithm.periodS * 1000000000n];
    else if (algorithm.kind === TOKEN_BUCKET) [amount, periodNs] = [algorithm.quota, algorithm.windowNs()];
    else [amount, periodNs] = [algorithm.quota, algorithm.windowUs * 1000n];
    if (periodNs % 1000000n !== 0n) return null;
    const spec = new LimitSpec(limit.name, algorithm.kind, amount, periodNs / 1000000n);
    try {
      return spec.algorithm().equals(algorithm) ? spec : null;
    } catch (error) {
      if (error instanceof AlgorithmError) return null;
      throw error;
    }
  }
}

/**
 * Whether the store would take `value` as a tenant id: 1 to 256 printable ASCII characters
 * other than space, *, { and } (the Rust check_tenant).
 */
function isTenant(value) {
  return value.length > 0 && value.length <= 256 && /^[!-~]+$/.test(value) && !/[*{}]/.test(value);
}

/** The policy store at one version. */
class Snapshot {
  constructor(version = 0, plans = new Map(), tenants = new Map(), overrides = []) {
    this.version = version;
    this.plans = plans;
    this.tenants = tenants;
    // The overrides by pattern (acme, acme-*), the whole-set one first, then by limit name.
    this.byPattern = new Map();
    for (const entry of overrides) {
      if (!this.byPattern.has(entry.pattern)) this.byPattern.set(entry.pattern, []);
      this.byPattern.get(entry.pattern).push(entry);
    }
    for (const entries of this.byPattern.values()) {
      entries.sort((a, b) => (a.limit !== null) - (b.limit !== null) || (a.limit || '').localeCompare(b.limit || ''));
    }
    this.longestPrefix = Math.max(0, ...[...this.byPattern.keys()].filter((p) => p.endsWith('*')).map((p) => p.length - 1));
  }

  static decode(version, plans, tenants, overrides) {
    const decodedPlans = new Map();
    for (const [name, value] of Object.entries(plans)) {
      const specs = value.split(/\s+/).filter(Boolean).map(LimitSpec.parse);
      if (!specs.length) throw new SpecError(`plan '${name}' has no limits`);
      decodedPlans.set(name, specs);
    }
    const decoded = Object.entries(overrides).map(([field, value]) => {
      const space = field.indexOf(' ');
      const pattern = space < 0 ? field : field.slice(0, space);
      const limit = space < 0 ? null : field.slice(space + 1) || null;
      let expires = null;
      const specs = [];
      for (const word of value.split(/\s+/).filter(Boolean)) {
        if (word.startsWith('expires=')) expires = Number(word.slice('expires='.length));
        else specs.push(LimitSpec.parse(word));
      }
      return { pattern, limit, limits: specs, expiresAtMs: expires };
    });
    return new Snapshot(version, decodedPlans, new Map(Object.entries(tenants)), decoded);
  }

  entries(pattern, nowMs) {
    return (this.byPattern.get(pattern) || []).filter((entry) => entry.expiresAtMs === null || entry.expiresAtMs > nowMs);
  }

  /** The limits for `tenant`: exact override > longest wildcard > plan > defaults. */
  resolve(tenant, defaults, nowMs) {
    const exact = isTenant(tenant) ? tenant : null;
    const plan = exact === null ? undefined : this.tenants.get(exact);
    let specs = [...(plan !== undefined && this.plans.has(plan) ? this.plans.get(plan) : defaults)];
    let wildcard = null;
    for (let length = Math.min(tenant.length, this.longestPrefix); length >= 0; length -= 1) {
      const text = `${tenant.slice(0, length)}*`;
      if (this.entries(text, nowMs).length) {
        wildcard = text;
        break;
      }
    }
    for (const pattern of [wildcard, exact]) {
      if (pattern === null) continue;
      for (const entry of this.entries(pattern, nowMs)) {
        if (entry.limit === null) specs = [];
        for (const spec of entry.limits) {
          const index = specs.findIndex((existing) => existing.name === spec.name);
          if (index >= 0) specs[index] = spec;
          else specs.push(spec);
        }
      }
    }
    return specs;
  }
}

/** The key of a store-backed policy's limit: one slot per tenant (the hash tag). */
function keyTemplate(tenantInput, policy, limit, kind) {
  return `rl:plan:{{{${tenantInput}}}}:${policy}:${limit}:${kind}`;
}

function hash(value) {
  if (value === null || value === undefined) return {};
  if (!Array.isArray(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [String(k), String(v)]));
  const out = {};
  for (let index = 0; index + 1 < value.length; index += 2) out[String(value[index])] = String(value[index + 1]);
  return out;
}

/**
 * The policy store as this replica sees it. `await source.start()` reads it once (if Redis is
 * not there, the defaults apply meanwhile) and follows it; `await source.close()` stops.
 */
class PlanSource {
  constructor(redis, { checkEveryMs = 500, subscribe = true, timeoutMs = 1000, metrics = null } = {}) {
    this.redis = redis;
    this.connection = connectionOf(redis);
    this.checkEveryMs = checkEveryMs;
    this.subscribe = subscribe;
    this.timeoutMs = timeoutMs;
    this.metrics = metrics || new Metrics();
    this.snapshot = new Snapshot();
    this.loaded = false;
    this.error = 'not read yet';
    this.offsetMs = 0;
    this.policies = new Map();
    this.defaults = new Map();
    this.timer = null;
    this.subscriber = null;
    this.reading = null;
  }

  get status() {
    if (this.loaded) return `policy store at version ${this.snapshot.version}`;
    return `policy store not read yet (${this.error}): the policies' defaults apply`;
  }

  get version() {
    return this.snapshot.version;
  }

  nowMs() {
    return Date.now() + this.offsetMs;
  }

  /** Reads the store now (a consistent reading: the version before and after agree). */
  refresh() {
    if (this.reading === null) {
      this.reading = this.read().finally(() => {
        this.reading = null;
      });
    }
    return this.reading;
  }

  async read() {
    const before = Date.now();
    const commands = [['GET', VERSION_KEY], ['HGETALL', PLANS_KEY], ['HGETALL', TENANTS_KEY], ['HGETALL', OVERRIDES_KEY], ['TIME'], ['GET', VERSION_KEY]];
    try {
      // TIME has no key: on a cluster it goes to the node of the store's slot.
      const replies = await Promise.all(commands.map((args) => timedSend(this.connection, args, VERSION_KEY, this.timeoutMs)));
      const failed = replies.find((reply) => reply instanceof Error);
      if (failed !== undefined) throw failed;
      this.apply(replies, before, Date.now());
    } catch (error) {
      this.failed(error);
    }
  }

  apply([version, plans, tenants, overrides, time, versionAgain], beforeMs, afterMs) {
    if (String(version) !== String(versionAgain)) return; // a change came between the reads
    const snapshot = Snapshot.decode(Number(version || 0), hash(plans), hash(tenants), hash(overrides));
    const serverMs = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    this.offsetMs = serverMs - Math.floor((beforeMs + afterMs) / 2);
    if (snapshot.version >= this.snapshot.version) {
      const changed = snapshot.version !== this.snapshot.version || !this.loaded;
      this.snapshot = snapshot;
      if (changed) log.info(`redis-ratelimit: policy store at version ${snapshot.version}`);
    }
    this.loaded = true;
    this.metrics.plans(true, snapshot.version);
  }

  failed(error) {
    this.metrics.plansReadError();
    if (!this.loaded) {
      this.error = (error && error.message) || String(error);
      this.metrics.plans(false);
    }
  }

  async start() {
    await this.refresh();
    if (this.timer === null) {
      this.timer = setInterval(() => {
        this.refresh();
      }, this.checkEveryMs);
      this.timer.unref();
      await this.subscribeChanges();
    }
    return this;
  }

  /** Subscribes to the change notifications on a node-redis client (else the version check alone follows the store). */
  async subscribeChanges() {
    if (!this.subscribe || typeof this.redis.duplicate !== 'function' || this.connection.cluster) return;
    try {
      const subscriber = this.redis.duplicate();
      if (typeof subscriber.on === 'function') subscriber.on('error', () => {});
      if (typeof subscriber.connect === 'function') await subscriber.connect();
      await subscriber.subscribe(CHANNEL, () => {
        this.refresh();
      });
      this.subscriber = subscriber;
    } catch (error) {
      log.info(`redis-ratelimit: no change notifications (${error.message}): checking the version instead`);
    }
  }

  async close() {
    if (this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
    if (this.subscriber !== null) {
      const subscriber = this.subscriber;
      this.subscriber = null;
      await Promise.resolve(subscriber.disconnect()).catch(() => {});
    }
  }

  defaultsOf(base) {
    let found = this.defaults.get(base.name);
    if (found === undefined) {
      found = base.limits.map((limit) => {
        const spec = LimitSpec.fromLimit(limit);
        if (spec === null) {
          throw new PolicyError(
            `policy '${base.name}', limit '${limit.name}': a store-backed policy's defaults are plan limits ` +
              '(amount per period of token, sliding, fixed, log or gcra; weight 1, not paced, not in-flight)',
          );
        }
        return spec;
      });
      this.defaults.set(base.name, found);
    }
    return found;
  }

  /** The tenant's effective policy now: `base` with the store's limits. */
  policyFor(base, tenant) {
    const defaults = this.defaultsOf(base);
    const specs = this.snapshot.resolve(tenant, defaults, this.nowMs());
    const cacheKey = `${base.name}\u0000${specs.map((spec) => spec.text).join(' ')}`;
    let policy = this.policies.get(cacheKey);
    if (policy === undefined) {
      try {
        policy = PlanSource.build(base, specs);
      } catch (error) {
        if (!(error instanceof PolicyError || error instanceof AlgorithmError)) throw error;
        policy = PlanSource.build(base, defaults);
      }
      if (this.policies.size >= MAX_POLICIES) this.policies.delete(this.policies.keys().next().value);
    } else {
      this.policies.delete(cacheKey);
    }
    this.policies.set(cacheKey, policy);
    return policy;
  }

  static build(base, specs) {
    const limits = specs.map((spec) =>
      Limit.of(spec.name, spec.algorithm(), { key: keyTemplate(base.tenantInput, base.name, spec.name, spec.kind) }),
    );
    return new Policy(base.name, limits, {
      lease: base.lease,
      fallback: base.fallback,
      timeoutMs: base.timeoutMs,
      denyCache: base.denyCache,
    });
  }
}

module.exports = { PlanSource, Snapshot, LimitSpec, SpecError, keyTemplate, isTenant, CHANNEL, VERSION_KEY };
