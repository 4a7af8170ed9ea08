'use strict';
/**
 * Express (4 and 5; no dependency on it): a middleware per policy, and a store for
 * express-rate-limit's Store interface (duck-typed: no dependency on express-rate-limit).
 *
 * ```js
 * app.get('/items', limiter.express('api', { key: (req) => req.get('x-api-key') }), handler);
 * ```
 *
 * A refused request is answered 429 (503 when the store is out of reach and the policy fails
 * closed) with Retry-After, RateLimit-Policy, RateLimit and a problem+json body; admitted
 * responses carry the fields too; a paced request waits its turn; in-flight slots are released
 * when the response has been sent (or the client went away). Several of these middlewares on one
 * request are all or nothing (see http.js).
 */

const { FIELDS, LIST_FIELDS, Ledger, checker, clientKey, defaultInputName, inputsOf, internalError, refusal } = require('./http');

const LEDGER = Symbol.for('redis-ratelimit.ledger');
/** Most keys whose refusals a RateLimitStore remembers. */
const UNCHARGED_KEYS = 10000;

function ledgerOf(req) {
  if (!(req[LEDGER] instanceof Ledger)) req[LEDGER] = new Ledger();
  return req[LEDGER];
}

function send(res, { status, headers, body }) {
  for (const name of FIELDS) res.removeHeader(name);
  res.status(status);
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  res.end(body);
}

/**
 * The middleware checking every request it sees against `policy`: `key(req)` gives the policy's
 * input (default: the client address, IPv6 by /56) or an object of inputs (null or undefined:
 * unchecked); `cost(req)` the cost; `skip(req)` true lets a request through unchecked;
 * `onAdmitted` false sends no fields on admitted responses; `legacy` adds X-RateLimit-*.
 */
function middleware(limiter, policy, options = {}) {
  const { key = clientKey, cost = null, skip = null, inputName = null, onAdmitted = true, legacy = false } = options;
  if (limiter.policy(policy) === null) throw new RangeError(`no policy is named '${policy}'`);
  const name = inputName || defaultInputName(limiter.policy(policy));
  return async function rateLimit(req, res, next) {
    try {
      if (skip !== null && (await skip(req))) return next();
      const inputs = inputsOf(await key(req), name);
      if (inputs === null) return next();
      const units = cost === null ? 1 : await cost(req);
      const ledger = ledgerOf(req);
      let decision;
      try {
        decision = await limiter.check(policy, inputs, { cost: units });
      } catch (error) {
        if (!error || error.name !== 'CheckError') throw error;
        await ledger.giveBackAll();
        return send(res, internalError(policy, error));
      }
      if (!decision.allowed) {
        await ledger.giveBackAll();
        ledger.refused = decision;
        return send(res, refusal(decision, { legacy }));
      }
      ledger.admitted({ limiter, policy, inputs, cost: units, decision });
      if (decision.inFlight !== null) {
        let released = false;
        const release = () => {
          if (released) return;
          released = true;
          limiter.release(decision).catch(() => {});
        };
        res.once('finish', release);
        res.once('close', release);
      }
      if (decision.waitMs) await new Promise((resolve) => setTimeout(resolve, decision.waitMs));
      if (onAdmitted) {
        for (const [field, value] of Object.entries(decision.headers({ legacy }))) {
          const earlier = res.getHeader(field);
          res.setHeader(field, LIST_FIELDS.includes(field) && earlier ? `${earlier}, ${value}` : value);
        }
      }
      return next();
    } catch (error) {
      return next(error);
    }
  };
}

/**
 * A store for express-rate-limit (its Store interface, duck-typed): `increment(key)` checks the
 * request against `policy` (whose input `inputName`, default the policy's only input, is
 * express-rate-limit's key), so the decision is this limiter's: exact across replicas, with
 * leases and the bounded fallback. Its `totalHits` is the units used (the quota when refused,
 * plus one), so give express-rate-limit a `limit` equal to the policy's quota
 * (`store.limit`). `decrement` refunds one unit (skipFailedRequests, skipSuccessfulRequests);
 * `resetKey` deletes the key's limits. A refused request is not counted (express-rate-limit's
 * own stores count it).
 */
class RateLimitStore {
  constructor(limiter, policy, { inputName = null } = {}) {
    const definition = limiter.policy(policy);
    if (definition === null) throw new RangeError(`no policy is named '${policy}'`);
    this.limiter = limiter;
    this.policyName = policy;
    this.inputName = inputName || defaultInputName(definition);
    /** The policy's tightest quota: express-rate-limit's `limit`. */
    this.limit = Math.min(...definition.limits.map((limit) => Number(limit.algorithm.quota)));
    /**
     * Refusals not yet matched by a decrement, by key (at most 10,000 keys, the oldest dropped):
     * express-rate-limit may decrement a refused request (skipFailedRequests), which this store
     * never charged, so that decrement must give nothing back.
     */
    this.uncharged = new Map();
    /** express-rate-limit keeps no keys of its own with this store: the limiter holds the state. */
    this.localKeys = false;
    this.prefix = `${policy}:`;
  }

  init(options) {
    this.options = options;
  }

  inputs(key) {
    return { [this.inputName]: key };
  }

  async increment(key) {
    const decision = await this.limiter.check(this.policyName, this.inputs(key));
    const binding = decision.bindingLimit;
    const quota = binding === null ? this.limit : binding.quota;
    const totalHits = decision.allowed ? Math.max(quota - decision.remaining, 1) : quota + 1;
    if (!decision.allowed) {
      const count = (this.uncharged.get(key) || 0) + 1;
      this.uncharged.delete(key);
      this.uncharged.set(key, count);
      if (this.uncharged.size > UNCHARGED_KEYS) this.uncharged.delete(this.uncharged.keys().next().value);
    }
    const resetMs = decision.allowed ? decision.resetAfterMs : decision.retryAfterMs === null ? decision.resetAfterMs : decision.retryAfterMs;
    return { totalHits, resetTime: new Date(Date.now() + resetMs) };
  }

  async decrement(key) {
    const uncharged = this.uncharged.get(key) || 0;
    if (uncharged > 0) {
      if (uncharged === 1) this.uncharged.delete(key);
      else this.uncharged.set(key, uncharged - 1);
      return;
    }
    const prepared = this.limiter.prepare(this.policyName, 1n, this.inputs(key));
    await this.limiter.reserveRefund(prepared.target, 1n);
  }

  async resetKey(key) {
    const prepared = this.limiter.prepare(this.policyName, 1n, this.inputs(key));
    for (const limitKey of prepared.target.keys) await this.limiter.store.call(['DEL', limitKey]);
    prepared.target.state.deny.forget(prepared.target.keySet);
  }
}

module.exports = { middleware, checker, RateLimitStore, LEDGER };
