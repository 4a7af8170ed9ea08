'use strict';
/**
 * How a check runs (the Rust client's limiter/, the Python client's flows.py):
 *
 * 1. Deny cache: a key set the store denied for d is denied from memory until d passed.
 * 2. Lease (opt-in): paid from units claimed earlier; one claim (a partial grant) serves every
 *    request waiting for it.
 * 3. Store: limits whose keys share a slot in one RL.MULTI; across slots, most specific group
 *    first, and earlier groups refunded when a later one denies (all or nothing).
 * 4. Fallback: on a timeout or a connection error, open, closed or local: this replica's
 *    share, quota / replicas, continuing from the store's last answer, and what it admits is
 *    owed to the store and charged when it answers again.
 *
 * Units are BigInt; monotonic instants performance.now() ms; the fallback's clock Unix µs.
 */

const crypto = require('node:crypto');
const { NEVER, NOW, Decision: CoreDecision } = require('./core/decision');
const { bind: coreBind, KindMismatch } = require('./core/engine');
const { FALLBACK, LEASE, STORE, Decision, LimitStatus, View } = require('./decision');
const { CheckError, StoreError } = require('./errors');
const { LocalLimits } = require('./local');
const { Answers, DenyCache, Leases } = require('./state');
const { DEFAULT_MAX_KEYS } = require('./tables');
const { nowUs } = require('./clock');
const { now } = require('./timing');
const protocol = require('./protocol');

/** A policy with what the limiter keeps for it. */
class PolicyState {
  constructor(policy, maxKeys = DEFAULT_MAX_KEYS) {
    this.policy = policy;
    this.name = policy.name;
    this.shapes = policy.limits.map((limit) => limit.algorithm.shape());
    let longestNs = 0n;
    for (const shape of this.shapes) if (shape.windowNs() > longestNs) longestNs = shape.windowNs();
    // Most specific key first (stable: declaration order among equals).
    this.order = policy.limits
      .map((limit, index) => [index, limit.key.specificity()])
      .sort((a, b) => b[1] - a[1] || a[0] - b[0])
      .map(([index]) => index);
    this.deny = new DenyCache(maxKeys);
    this.leases = new Leases(maxKeys);
    this.answers = new Answers(longestNs / 1000n, maxKeys);
    this.holdsSlots = policy.holdsSlots;
    /** The largest weight of the policy's limits (a call's cost times it must fit the store). */
    this.heaviest = policy.limits.reduce((most, limit) => (limit.weight > most ? limit.weight : most), 1n);
  }

  inFlight(index) {
    return this.policy.limits[index].algorithm.inFlight;
  }

  weight(index) {
    return this.policy.limits[index].weight;
  }

  paced(index) {
    return this.policy.limits[index].maxWaitMs !== null;
  }

  status(index, view) {
    return LimitStatus.fromView(this.policy.limits[index].name, this.shapes[index], view);
  }
}

/**
 * What one check is about: the policy state, its rendered keys (policy order), the key set's
 * id, and the holder id of the slots it takes in in-flight limits.
 */
class Target {
  constructor(state, keys, keySet, holder) {
    this.state = state;
    this.keys = keys;
    this.keySet = keySet;
    this.holder = holder;
  }

  call(index) {
    const limit = this.state.policy.limits[index];
    return protocol.call(this.keys[index], limit.algorithm, limit.weight, limit.maxWaitMs);
  }

  calls(group) {
    return group.map((index) => this.call(index));
  }
}

const HOLDER_PREFIX = `${process.pid.toString(16)}.${Date.now().toString(16)}.${crypto.randomBytes(3).toString('hex')}`;
let holderCounter = 0;

/** A holder id no other request of the fleet uses: process id, start instant, random, counter. */
function newHolder() {
  holderCounter += 1;
  return `${HOLDER_PREFIX}.${holderCounter.toString(16)}`;
}

function toCore(view) {
  let retry;
  if (view.retryAfterMs === null) retry = NEVER;
  else retry = view.retryAfterMs > 0 ? BigInt(view.retryAfterMs) : NOW;
  return new CoreDecision(view.allowed, BigInt(view.remaining), retry, BigInt(view.resetAfterMs), BigInt(view.limit));
}

/** The binding limit over every group's views ([index, view]), by RL.MULTI's rule. */
function bindingOf(state, views, units) {
  if (views.length === 1) return views[0][0];
  const costs = views.map(([index]) => units * state.weight(index));
  const bound = coreBind(
    views.map(([, view]) => toCore(view)),
    costs,
  );
  const position = bound === null ? 0 : bound[0];
  return position < views.length ? views[position][0] : 0;
}

function decided(state, allowed, source, backend, limits, binding) {
  const retry = allowed ? 0 : binding < limits.length ? limits[binding].retryAfterMs : null;
  let waitMs = 0;
  if (allowed) {
    for (const limit of limits) if (limit.allowed && !limit.inFlight) waitMs = Math.max(waitMs, limit.retryAfterMs || 0);
  }
  return new Decision({
    allowed,
    policy: state.name,
    source,
    backend,
    outcome: allowed ? 'allowed' : 'denied',
    retryAfterMs: retry,
    limits,
    bindingIndex: binding,
    waitMs,
    definition: state.policy,
  });
}

function viewsDecision(state, allowed, views, bindingIndex, source, backend) {
  const limits = [];
  let binding = 0;
  for (const [index, view] of views) {
    if (index === bindingIndex) binding = limits.length;
    limits.push(state.status(index, view));
  }
  return decided(state, allowed, source, backend, limits, binding);
}

function storeDecision(state, acquired) {
  return viewsDecision(state, acquired.granted > 0n, acquired.views, acquired.binding, STORE, acquired.backend);
}

/** Units this replica holds in its lease count as remaining to it. */
function addLeased(decision, state, leased) {
  const weights = new Map(state.policy.limits.map((limit) => [limit.name, limit.weight]));
  for (const limit of decision.limits) {
    const more = BigInt(limit.remaining) + leased * (weights.get(limit.name) || 1n);
    limit.remaining = Math.min(Number(more), limit.quota);
  }
}

/** A decision that consulted no limit: admit or deny everything. */
function blanket(target, allowed, waitMs) {
  return new Decision({
    allowed,
    policy: target.state.name,
    source: FALLBACK,
    backend: null,
    outcome: 'fallback_allowed',
    retryAfterMs: allowed ? 0 : Math.max(Math.ceil(waitMs), 1000),
    definition: target.state.policy,
  });
}

function charge(state, index, units) {
  return state.inFlight(index) ? 1n : units * state.weight(index);
}

function giveBack(view, units) {
  return new View(view.allowed, Math.min(Number(BigInt(view.remaining) + units), view.limit), view.retryAfterMs, view.resetAfterMs, view.limit);
}

/** The limiter's logic: planning, store calls with all-or-nothing refunds, leases, the fallback. */
class Engine {
  /**
   * `call(op)`: makes one acquire (op: { request, op, policy, timeoutMs }) and resolves with a
   * grant or a StoreError (never rejects); `refunds(op)`: gives units back to groups
   * concurrently, resolving with whether every refund reached the store; `spawn(promise)`:
   * runs work in the background.
   */
  constructor({ store, replicas, breaker, metrics, maxKeys = DEFAULT_MAX_KEYS, call, refunds, spawn }) {
    this.store = store;
    this.replicas = replicas;
    this.breaker = breaker;
    this.metrics = metrics;
    this.local = new LocalLimits({ maxKeys });
    this.call = call;
    this.refunds = refunds;
    this.spawn = spawn;
  }

  /**
   * The store calls a check makes: limits grouped by slot (one group off a cluster), most
   * specific group first; without RL.MULTI one group per limit.
   */
  plan(state, keys) {
    const multi = this.store.capabilities()[0];
    const groups = [];
    for (const index of state.order) {
      const key = keys[index];
      const slot = this.store.slot(key);
      const fits = (group) => !state.paced(index) && group.every((other) => !state.paced(other) && keys[other] !== key);
      const found = groups.find(([groupSlot, group]) => multi && groupSlot === slot && fits(group));
      if (found !== undefined) found[1].push(index);
      else groups.push([slot, [index]]);
    }
    return groups.map(([, group]) => group);
  }

  /**
   * Takes `units` from every group in turn; a group granting fewer lowers the grant (earlier
   * groups refunded the difference); a denial or failure refunds them all. Resolves with
   * { granted, views, binding, backend } or a StoreError.
   */
  async acquireGroups(target, groups, units, partialMin, op) {
    const state = target.state;
    let wanted = units > 1n ? units : 1n;
    let charged = [];
    let views = [];
    let backend = '';
    for (const group of groups) {
      const request = protocol.acquireRequest(
        target.calls(group),
        wanted,
        partialMin === null ? null : partialMin < wanted ? partialMin : wanted,
        target.holder,
      );
      const granted = await this.call({ request, op, policy: state.name, timeoutMs: state.policy.timeoutMs });
      if (granted instanceof StoreError) {
        await this.refundGroups(target, charged);
        return granted;
      }
      backend = granted.backend;
      group.forEach((index, position) => views.push([index, granted.views[position]]));
      if (granted.granted === 0n) {
        let evaluated = wanted;
        if (partialMin !== null) {
          evaluated = partialMin < wanted ? partialMin : wanted;
          if (evaluated < 1n) evaluated = 1n;
        }
        views = views.map(([index, view]) =>
          group.includes(index) && view.allowed ? [index, giveBack(view, charge(state, index, evaluated))] : [index, view],
        );
        const binding = granted.binding < group.length ? group[granted.binding] : 0;
        views = await this.refundAll(target, charged, views);
        return { granted: 0n, views, binding, backend: granted.backend };
      }
      if (granted.granted < wanted) {
        const excess = charged.map(([g, c]) => [g, c - granted.granted]);
        await this.refundGroups(target, excess);
        charged = charged.map(([g]) => [g, granted.granted]);
        wanted = granted.granted;
      }
      charged.push([[...group], granted.granted]);
    }
    views.sort((a, b) => a[0] - b[0]);
    return { granted: wanted, views, binding: bindingOf(state, views, wanted), backend };
  }

  async refundAll(target, charged, views) {
    let result = views;
    if (charged.length) {
      const state = target.state;
      this.metrics.groupRefunded(state.name);
      if (await this.refundGroups(target, charged)) {
        for (const [group, units] of charged) {
          result = result.map(([i, v]) => (group.includes(i) ? [i, giveBack(v, charge(state, i, units))] : [i, v]));
        }
      }
    }
    result.sort((a, b) => a[0] - b[0]);
    return result;
  }

  async refundGroups(target, refunds) {
    const requests = refunds
      .filter(([, units]) => units > 0n)
      .map(([group, units]) => protocol.refundRequest(target.calls(group), units, target.holder));
    if (requests.length === 0) return true;
    const policy = target.state.policy;
    return this.refunds({ requests, policy: policy.name, timeoutMs: policy.timeoutMs });
  }

  /** A check without leases. */
  async storeFlow(target, cost) {
    const skip = this.breaker.permit(now());
    if (skip !== null) return this.fallback(target, cost, null, skip);
    const error = await this.settle(target);
    if (error !== null) return this.fallback(target, cost, error, this.breaker.openForMs);
    const groups = this.plan(target.state, target.keys);
    const acquired = await this.acquireGroups(target, groups, cost, null, 'acquire');
    if (acquired instanceof StoreError) return this.fallback(target, cost, acquired, this.breaker.openForMs);
    this.remember(target, acquired, cost);
    return storeDecision(target.state, acquired);
  }

  /** A check paid from a lease (the caller holds the slot's lock). */
  async leasedFlow(target, cost, slot, started) {
    const state = target.state;
    const lease = state.policy.lease;
    const at = now();
    if (slot.expires <= at && slot.units > 0n) {
      const units = slot.units;
      slot.units = 0n;
      this.spawn(this.refundLease(state, slot.keys, units));
    }
    if (slot.backend !== null && slot.units >= cost) {
      slot.units -= cost;
      const binding = bindingOf(state, slot.views, 1n);
      const decision = viewsDecision(state, true, slot.views, binding, LEASE, slot.backend);
      addLeased(decision, state, slot.units);
      return decision;
    }
    const last = slot.lastClaim;
    if (last !== null && last.at >= started) {
      if (last.result === 'denied' && cost - slot.units >= last.minimum) {
        return viewsDecision(state, false, last.views, last.binding, LEASE, last.backend);
      }
      if (last.result === 'failed') {
        this.metrics.storeError(state.name, 'lease_wait');
        return this.fallback(target, cost, new StoreError('timeout'), this.breaker.openForMs);
      }
    }
    const skip = this.breaker.permit(at);
    if (skip !== null) return this.fallback(target, cost, null, skip);
    const error = await this.settle(target);
    if (error !== null) {
      slot.lastClaim = { at: now(), result: 'failed' };
      return this.fallback(target, cost, error, this.breaker.openForMs);
    }
    const held = slot.units;
    const hot = last !== null && last.result === 'granted' && at - last.at < lease.lifetimeMs / 4;
    const recent = hot ? Number(slot.claimUnits) * 2 : lease.units;
    const size = BigInt(lease.claimFor(Number(cost), slot.waiting, recent));
    slot.claimUnits = size;
    const want = size > held ? size - held : 0n;
    const minimum = cost - held > 1n ? cost - held : 1n;
    const groups = this.plan(state, target.keys);
    const claimed = await this.acquireGroups(target, groups, want, minimum, 'claim');
    const answered = now();
    if (claimed instanceof StoreError) {
      slot.lastClaim = { at: answered, result: 'failed' };
      return this.fallback(target, cost, claimed, this.breaker.openForMs);
    }
    this.remember(target, claimed, minimum);
    if (claimed.granted === 0n) {
      slot.lastClaim = {
        at: answered,
        result: 'denied',
        minimum,
        views: [...claimed.views],
        binding: claimed.binding,
        backend: claimed.backend,
      };
      return storeDecision(state, claimed);
    }
    this.metrics.leaseClaimed(state.name, claimed.granted);
    slot.units = held + claimed.granted - cost;
    slot.expires = at + lease.lifetimeMs;
    slot.views = [...claimed.views];
    slot.backend = claimed.backend;
    slot.lastClaim = { at: answered, result: 'granted' };
    const decision = storeDecision(state, claimed);
    addLeased(decision, state, slot.units);
    return decision;
  }

  async refundLease(state, keys, units) {
    const target = new Target(state, keys, keys.join('\0'), null);
    const refunds = this.plan(state, keys).map((group) => [group, units]);
    if (await this.refundGroups(target, refunds)) this.metrics.leaseRefunded(state.name, units);
  }

  /** Gives back the target holder's slots in the in-flight limits. */
  async releaseFlow(target) {
    const state = target.state;
    const releases = [];
    for (const group of this.plan(state, target.keys)) {
      const slots = group.filter((index) => state.inFlight(index));
      if (slots.length) releases.push([slots, 1n]);
    }
    await this.refundGroups(target, releases);
  }

  /**
   * The decision when the store cannot decide (`error` null: the breaker is open). A request
   * the store refused as invalid is the caller's error: thrown, never decided.
   */
  fallback(target, cost, error, waitMs) {
    if (error !== null && error.kind === 'invalid') throw new CheckError(`policy '${target.state.name}': ${error.message}`);
    const refused = error !== null && !error.unavailable;
    const mode = target.state.policy.fallback;
    let decision;
    if (mode === 'open') decision = blanket(target, true, waitMs);
    else if (mode === 'closed') decision = blanket(target, false, waitMs);
    else decision = this.localDecision(target, cost, waitMs);
    if (refused) decision.outcome = 'error';
    else decision.outcome = decision.allowed ? 'fallback_allowed' : 'fallback_denied';
    return decision;
  }

  localCalls(target) {
    const replicas = this.replicas();
    const calls = [];
    for (let index = 0; index < target.state.policy.limits.length; index += 1) {
      const limit = target.state.policy.limits[index];
      const share = target.state.shapes[index].share(replicas);
      if (share === null) return null;
      try {
        let quota = share.unitQuota();
        if (limit.maxWaitMs !== null) quota = quota.withMaxWaitNs(BigInt(limit.maxWaitMs) * 1000000n);
        if (target.state.inFlight(index)) quota = quota.withHolder(target.holder || '-');
        calls.push([share, quota]);
      } catch (error) {
        if (error instanceof RangeError) return null;
        throw error;
      }
    }
    return calls;
  }

  localDecision(target, cost, waitMs) {
    const state = target.state;
    const at = nowUs();
    const leftMs = state.answers.deniedFor(target.keySet, cost, at);
    if (leftMs !== null) return blanket(target, false, leftMs);
    const calls = this.localCalls(target);
    if (calls === null) return blanket(target, false, waitMs);
    const quotas = calls.map(([, quota]) => quota);
    const weights = state.policy.limits.map((limit) => limit.weight);
    let verdict;
    try {
      const seed = state.answers.seed(target.keySet, at);
      if (seed !== null) this.seedLocal(target, calls, seed[0], seed[1]);
      verdict = this.local.acquire(target.keys, quotas, weights, cost, null, at);
    } catch (error) {
      if (error instanceof KindMismatch || error instanceof RangeError) return blanket(target, false, waitMs);
      throw error;
    }
    if (verdict.units > 0n) state.answers.owe(target.keySet, verdict.units, at);
    const limits = calls.map(([share], index) => {
      const view = View.fromFields(verdict.perLimit[index].replyFields());
      const status = LimitStatus.fromView(state.policy.limits[index].name, share, view);
      status.configuredQuota = Number(state.policy.limits[index].algorithm.quota);
      return status;
    });
    return decided(state, verdict.units > 0n, FALLBACK, null, limits, verdict.binding);
  }

  seedLocal(target, calls, views, answeredAtUs) {
    const replicas = BigInt(Math.max(this.replicas(), 1));
    for (const [index, view] of views) {
      if (target.state.inFlight(index) || index >= calls.length) continue;
      const [share, quota] = calls[index];
      try {
        this.local.seed(target.keys[index], quota, share.quota, BigInt(view.remaining) / replicas, answeredAtUs);
      } catch (error) {
        if (!(error instanceof KindMismatch || error instanceof RangeError)) throw error;
      }
    }
  }

  releaseLocal(target) {
    const calls = this.localCalls(target);
    if (calls === null) return;
    const slots = calls.map(([, quota], index) => [target.keys[index], quota, index]).filter(([, , i]) => target.state.inFlight(i));
    if (slots.length) {
      this.local.refund(
        slots.map(([key]) => key),
        slots.map(([, quota]) => quota),
        nowUs(),
      );
    }
  }

  /** Remembers what the store answered, for the fallback to continue from. */
  remember(target, acquired, cost) {
    const state = target.state;
    let denied = null;
    if (acquired.granted === 0n && !state.inFlight(acquired.binding)) {
      for (const [index, view] of acquired.views) {
        if (index === acquired.binding && view.retryAfterMs !== null) denied = [view.retryAfterMs, cost];
      }
    }
    state.answers.record(target.keySet, acquired.views, denied, nowUs());
  }

  /**
   * Charges the store what the fallback (or an overrun reservation) admitted for the target's
   * keys while it could not ask: a partial grant, as much as the store has. Resolves with the
   * StoreError that kept it from the store, or null.
   */
  async settle(target) {
    const state = target.state;
    const owed = state.answers.takeOwed(target.keySet, nowUs());
    if (owed === null) return null;
    const groups = this.plan(state, target.keys)
      .map((group) => group.filter((index) => !state.inFlight(index)))
      .filter((group) => group.length);
    const unheld = new Target(state, target.keys, target.keySet, null);
    const acquired = await this.acquireGroups(unheld, groups, owed, 1n, 'settle');
    if (acquired instanceof StoreError) {
      if (acquired.unavailable) {
        state.answers.owe(target.keySet, owed, nowUs());
        return acquired;
      }
      return null;
    }
    this.metrics.fallbackSettled(state.name, owed, acquired.granted);
    return null;
  }

  inFlightOf(target, decision) {
    if (target.holder === null || !decision.allowed) return null;
    if (!decision.limits.some((limit) => limit.inFlight)) return null;
    return { policy: target.state.name, holder: target.holder, keys: target.keys, local: decision.source === FALLBACK };
  }
}

module.exports = { Engine, PolicyState, Target, newHolder, bindingOf };
