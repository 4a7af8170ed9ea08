'use strict';
/**
 * What every HTTP adapter shares (the Python client's contrib/_http.py and _ledger.py):
 * choosing the check for a request, the refusal a denied decision is answered with (429 or 503,
 * Retry-After, the IETF fields, application/problem+json) exactly as the Rust client's tower
 * layer answers, and all or nothing across the policies one request is checked against: when a
 * later policy refuses, what the earlier ones charged is given back (refunded once, never
 * resent; in-flight slots released), and the refusal carries the refusing policy's fields alone.
 */

const { INTERNAL_ERROR_BODY, LEASE, STORE } = require('./decision');
const { ipKey } = require('./ip');
const log = require('./log');

const PROBLEM_JSON = 'application/problem+json';
/** The fields whose values are lists: an admitted response joins every policy's items. */
const LIST_FIELDS = ['ratelimit-policy', 'ratelimit'];
/** Every field a decision may write (a refusal clears the earlier policies' ones). */
const FIELDS = ['ratelimit-policy', 'ratelimit', 'retry-after', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'];

/** The status, header fields and body of a refused request. */
function refusal(decision, { legacy = false } = {}) {
  const headers = decision.headers({ legacy });
  headers['content-type'] = PROBLEM_JSON;
  return { status: decision.status, headers, body: decision.problemJson() };
}

/** A check that could not be made is a bug of the service: 500, the detail in the log. */
function internalError(policy, error) {
  log.error(`redis-ratelimit: a request for policy '${policy}' could not be checked (${error.message}); answered 500`);
  return { status: 500, headers: { 'content-type': PROBLEM_JSON }, body: INTERNAL_ERROR_BODY };
}

/**
 * The inputs of a check from a key function's answer: a value (for input `inputName`) or an
 * object of inputs; null or undefined: the request goes unchecked.
 */
function inputsOf(value, inputName) {
  if (value === null || value === undefined) return null;
  if (typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, String(v)]));
  return { [inputName]: String(value) };
}

/** The input a policy's key function fills: its tenant input, else its only input, else `key`. */
function defaultInputName(definition) {
  if (definition === null) return 'key';
  if (definition.tenantInput !== null) return definition.tenantInput;
  return definition.inputs.length === 1 ? definition.inputs[0] : 'key';
}

/** The request's client address, keyed by ipKey (IPv6 by /56). */
function clientKey(req) {
  const address = req.ip || (req.socket && req.socket.remoteAddress) || (req.connection && req.connection.remoteAddress);
  return address ? ipKey(address) : 'anonymous';
}

/** The checks one request passed so far, and the refusal that ended it (if any). */
class Ledger {
  constructor() {
    this.spent = [];
    this.refused = null;
  }

  admitted(entry) {
    this.spent.push(entry);
  }

  /** Gives back every admitted check, once. */
  async giveBackAll() {
    const taken = this.spent;
    this.spent = [];
    for (const entry of taken) await giveBack(entry);
  }
}

/** Refunds what an admitted check charged the store (a store's or a lease's decision) and releases its in-flight slots. */
async function giveBack({ limiter, policy, inputs, cost, decision }) {
  if (decision.allowed && (decision.source === STORE || decision.source === LEASE)) {
    const prepared = limiter.prepare(policy, 1n, inputs);
    await limiter.reserveRefund(prepared.target, BigInt(cost));
  }
  if (decision.inFlight !== null) await limiter.release(decision);
}

/**
 * The fields of an admitted response checked against several policies: the list fields joined
 * in check order; the legacy X-RateLimit-* of the decision with the fewest units remaining.
 */
function admittedFields(decisions, { legacy = false } = {}) {
  const fields = {};
  for (const decision of decisions) {
    for (const [name, value] of Object.entries(decision.headers())) {
      fields[name] = LIST_FIELDS.includes(name) && name in fields ? `${fields[name]}, ${value}` : value;
    }
  }
  const bound = decisions.filter((decision) => decision.bindingLimit !== null);
  if (legacy && bound.length) {
    const tightest = bound.reduce((a, b) => (b.remaining < a.remaining ? b : a));
    for (const [name, value] of Object.entries(tightest.headers({ legacy: true }))) {
      if (name.startsWith('x-ratelimit-')) fields[name] = value;
    }
  }
  return fields;
}

/**
 * A plain check of a request for any framework (Fastify, Koa, Hono...): `key(req)` gives the
 * policy's input (or an object of inputs; null: unchecked), `cost(req)` the cost. Resolves with
 * null (unchecked) or { decision, allowed, status, headers, body }: send status, headers and
 * body when not allowed; set headers on the response when allowed. A check that cannot be made
 * resolves with status 500 and the problem body (the detail logged).
 */
function checker(limiter, policy, { key = clientKey, cost = null, inputName = null, legacy = false } = {}) {
  const name = inputName || defaultInputName(limiter.policy(policy));
  return async (req) => {
    const inputs = inputsOf(await key(req), name);
    if (inputs === null) return null;
    let decision;
    try {
      decision = await limiter.check(policy, inputs, { cost: cost === null ? 1 : await cost(req) });
    } catch (error) {
      if (error && error.name === 'CheckError') return { decision: null, allowed: false, ...internalError(policy, error) };
      throw error;
    }
    if (!decision.allowed) return { decision, allowed: false, ...refusal(decision, { legacy }) };
    return { decision, allowed: true, status: 200, headers: decision.headers({ legacy }), body: null };
  };
}

module.exports = {
  PROBLEM_JSON,
  LIST_FIELDS,
  FIELDS,
  Ledger,
  admittedFields,
  checker,
  clientKey,
  defaultInputName,
  giveBack,
  inputsOf,
  internalError,
  refusal,
};
