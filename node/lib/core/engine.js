'use strict';
/**
 * The engine (core/src/engine.rs, grant.rs, multi.rs): what a call on several keys decides,
 * every limit against one `now` before anything is written, all or nothing.
 */

const { NEVER, Decision, compareWaits } = require('./decision');
const { U64_MAX, clamp, satU64, min, max } = require('./numbers');

/** Key `index` holds another algorithm than its quota's. */
class KindMismatch extends Error {
  constructor(index) {
    super(`key ${index} holds another kind of limiter`);
    this.name = 'KindMismatch';
    this.index = index;
  }
}

/** A key's state as the engine sees it: its kind (null: missing) and state. */
class Held {
  constructor(kind, state) {
    this.kind = kind;
    this.state = state;
  }
}

const MISSING = Object.freeze(new Held(null, null));

function stateFor(held, quota, index) {
  if (held.kind === null) return null;
  if (held.kind !== quota.kind) throw new KindMismatch(index);
  return held.state;
}

/** The units every limit is asked for (multi::units_to_evaluate); `grantable`: [units, weight]. */
function unitsToEvaluate(cost, partialMin, grantable) {
  if (partialMin === null) return cost;
  const minimum = clamp(partialMin, 1n, max(cost, 1n));
  let allCanGive = cost;
  for (const [units, weight] of grantable) {
    allCanGive = min(allCanGive, weight !== 0n ? units / weight : units);
  }
  return max(allCanGive, minimum);
}

/** The binding limit and the call's decision (multi::bind): [binding, decision], or null. */
function bind(decisions, costs) {
  if (decisions.length === 0) return null;
  const allowed = decisions.every((decision) => decision.allowed);
  let resetAfterMs = 0n;
  for (const decision of decisions) resetAfterMs = max(resetAfterMs, decision.resetAfterMs);
  let binding;
  let retry;
  if (allowed) {
    const callsLeft = (index) => {
      const cost = max(index < costs.length ? costs[index] : 1n, 1n);
      return decisions[index].remaining / cost;
    };
    binding = 0;
    let fewest = callsLeft(0);
    for (let index = 1; index < decisions.length; index += 1) {
      const left = callsLeft(index);
      if (left < fewest) {
        fewest = left;
        binding = index;
      }
    }
    retry = decisions[0].retry;
    for (const decision of decisions) if (compareWaits(decision.retry, retry) > 0) retry = decision.retry;
  } else {
    binding = -1;
    for (let index = 0; index < decisions.length; index += 1) {
      if (decisions[index].allowed) continue;
      if (binding < 0 || compareWaits(decisions[index].retry, decisions[binding].retry) > 0) binding = index;
    }
    retry = decisions[binding].retry;
  }
  const chosen = decisions[binding];
  return [binding, new Decision(allowed, chosen.remaining, retry, resetAfterMs, chosen.limit)];
}

/**
 * What a multi-limit call decided: the units taken (0 when denied), the binding limit, the
 * call's decision, each limit's own view and the writes (null: unchanged).
 */
class Verdict {
  constructor(units, binding, decision, perLimit, commits) {
    this.units = units;
    this.binding = binding;
    this.decision = decision;
    this.perLimit = perLimit;
    this.commits = commits;
  }
}

/**
 * Every limit admits its cost and all are charged, or none is (engine::acquire_many).
 * `quotas` are each for one unit; limit i is charged units × weights[i].
 */
function acquireMany(held, quotas, weights, cost, partialMin, nowUs) {
  if (quotas.length === 0) throw new RangeError('a multi-limit call needs at least one limit');
  const quotaFor = (index, units) => quotas[index].withCost(satU64(units * weights[index]));
  let units = cost;
  if (partialMin !== null) {
    const grantable = [];
    for (let index = 0; index < quotas.length; index += 1) {
      const quota = quotaFor(index, cost);
      const state = stateFor(held[index], quota, index);
      grantable.push([quota.grantable(state, quota.cost, nowUs), weights[index]]);
    }
    units = unitsToEvaluate(cost, partialMin, grantable);
  }
  const perLimit = [];
  const commits = [];
  const costs = [];
  const charged = [];
  for (let index = 0; index < quotas.length; index += 1) {
    const quota = quotaFor(index, units);
    const state = stateFor(held[index], quota, index);
    const evaluation = quota.evaluate(state, nowUs);
    perLimit.push(evaluation.decision);
    commits.push(evaluation.commit);
    costs.push(quota.countedCost());
    charged.push(quota);
  }
  const [binding, decision] = bind(perLimit, costs);
  if (!decision.allowed) {
    decision.resetAfterMs = resetAsItStands(held, charged, perLimit, nowUs);
    return new Verdict(0n, binding, decision, perLimit, quotas.map(() => null));
  }
  return new Verdict(units, binding, decision, perLimit, commits);
}

function resetAsItStands(held, quotas, views, nowUs) {
  let reset = 0n;
  for (let index = 0; index < quotas.length; index += 1) {
    const view = views[index];
    let asItStands;
    if (view.allowed) {
      const unchanged = quotas[index].withCost(U64_MAX);
      const state = stateFor(held[index], unchanged, index);
      asItStands = unchanged.evaluate(state, nowUs).decision.resetAfterMs;
    } else {
      asItStands = view.resetAfterMs;
    }
    reset = max(reset, asItStands);
  }
  return reset;
}

/** Gives a call's cost back to one key's limiter (engine::refund). */
function refund(held, quota, nowUs) {
  return quota.refund(stateFor(held, quota, 0), nowUs);
}

module.exports = { KindMismatch, Held, MISSING, NEVER, Verdict, acquireMany, bind, refund, unitsToEvaluate };
