'use strict';
/**
 * What a check answers, and the HTTP fields a decision is sent as (the Rust client's
 * decision.rs and http/headers.rs: RateLimit-Policy / RateLimit of
 * draft-ietf-httpapi-ratelimit-headers-11, Retry-After, the problem+json body).
 */

const { CONCURRENCY, SLIDING_LOG, SLIDING_WINDOW } = require('./kinds');

/** Where a decision came from. */
const STORE = 'store';
const LEASE = 'lease';
const CACHE = 'cache';
const FALLBACK = 'fallback';
const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
const TEMPORARY_REDUCED_CAPACITY = 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity';

/**
 * One limit's view after a call, as the module replies it (numbers; `retryAfterMs` null:
 * never, the cost exceeds the limit).
 */
class View {
  constructor(allowed, remaining, retryAfterMs, resetAfterMs, limit) {
    this.allowed = allowed;
    this.remaining = remaining;
    this.retryAfterMs = retryAfterMs;
    this.resetAfterMs = resetAfterMs;
    this.limit = limit;
    Object.freeze(this);
  }

  /** From the module's five integer fields (numbers or BigInts). */
  static fromFields(fields) {
    const [allowed, remaining, retry, reset, limit] = fields.map(Number);
    return new View(allowed !== 0, Math.max(remaining, 0), retry < 0 ? null : retry, Math.max(reset, 0), Math.max(limit, 0));
  }
}

function ceilSecondsNs(ns) {
  const value = BigInt(ns);
  return value <= 0n ? 0n : (value + 999999999n) / 1000000000n;
}

/** One limit's state as a decision saw it: what the RateLimit field reports. */
class LimitStatus {
  constructor(fields) {
    /** The limit's name. */
    this.name = fields.name;
    /** The quota enforced for this decision (during a local fallback, this replica's share). */
    this.quota = fields.quota;
    /** The quota as configured (what RateLimit-Policy shows). */
    this.configuredQuota = fields.configuredQuota;
    /** The window the quota applies to, in ns (BigInt; a bucket's time to refill; 0 in-flight). */
    this.windowNs = fields.windowNs;
    this.inFlight = fields.inFlight;
    this.allowed = fields.allowed;
    this.remaining = fields.remaining;
    this.retryAfterMs = fields.retryAfterMs;
    this.resetAfterMs = fields.resetAfterMs;
    /** When at least one more unit than `remaining` is available, in ns (BigInt). */
    this.moreInNs = fields.moreInNs;
  }

  static fromView(name, shape, view) {
    let moreIn;
    if (!view.allowed && (shape.kind === SLIDING_WINDOW || shape.kind === SLIDING_LOG)) {
      // A denied sliding window's wait is exact, its reset only an upper bound.
      const moreMs = view.retryAfterMs === null ? view.resetAfterMs : view.retryAfterMs;
      moreIn = BigInt(moreMs) * 1000000n;
    } else {
      moreIn = shape.moreInNs(view.remaining, view.resetAfterMs);
    }
    return new LimitStatus({
      name,
      quota: view.limit,
      configuredQuota: view.limit,
      windowNs: shape.windowNs(),
      inFlight: shape.kind === CONCURRENCY,
      allowed: view.allowed,
      remaining: view.remaining,
      retryAfterMs: view.retryAfterMs,
      resetAfterMs: view.resetAfterMs,
      moreInNs: moreIn,
    });
  }

  copy() {
    return new LimitStatus(this);
  }
}

/**
 * The answer to a check.
 *
 * `allowed`; `remaining`, `resetAfterMs` and `limit` of the binding limit (the one that denied
 * with the longest wait, or when admitted the one closest to running out); `retryAfterMs` (0
 * when admitted, null when the request can never pass); `binding` the binding limit's name;
 * `source` store, lease, cache or fallback; `backend` module, functions, scripts or memory
 * (null for the fallback); `waitMs` for a paced request, the wait before it proceeds.
 */
class Decision {
  constructor(fields) {
    this.allowed = fields.allowed;
    this.policy = fields.policy;
    this.source = fields.source;
    this.backend = fields.backend;
    /** allowed, denied, fallback_allowed, fallback_denied, error. */
    this.outcome = fields.outcome;
    this.retryAfterMs = fields.retryAfterMs;
    this.limits = fields.limits || [];
    this.bindingIndex = fields.bindingIndex || 0;
    this.waitMs = fields.waitMs || 0;
    /** The in-flight slots an admitted request holds ({ policy, holder, keys, local }), or null. */
    this.inFlight = fields.inFlight || null;
    // The policy definition (for RateLimit-Policy when no limit was consulted); not enumerable.
    Object.defineProperty(this, 'definition', { value: fields.definition || null, writable: true, enumerable: false });
  }

  copy() {
    return new Decision({ ...this, definition: this.definition, limits: this.limits.map((limit) => limit.copy()) });
  }

  get bindingLimit() {
    return this.bindingIndex < this.limits.length ? this.limits[this.bindingIndex] : null;
  }

  get binding() {
    const limit = this.bindingLimit;
    return limit === null ? null : limit.name;
  }

  get remaining() {
    const limit = this.bindingLimit;
    return limit === null ? 0 : limit.remaining;
  }

  get resetAfterMs() {
    const limit = this.bindingLimit;
    return limit === null ? 0 : limit.resetAfterMs;
  }

  get limit() {
    const limit = this.bindingLimit;
    return limit === null ? 0 : limit.quota;
  }

  /** The names of the limits that refused. */
  violated() {
    return this.limits.filter((limit) => !limit.allowed).map((limit) => limit.name);
  }

  /**
   * What to answer: 200, 429, or 503 when the store is out of reach and the policy fails
   * closed (no quota was consulted).
   */
  get status() {
    if (this.allowed) return 200;
    if (this.source === FALLBACK && this.limits.length === 0 && this.failsClosed()) return 503;
    return 429;
  }

  failsClosed() {
    return this.definition !== null && this.definition.fallback === 'closed';
  }

  /** Retry-After: seconds rounded up, at least 1; null when admitted or hopeless. */
  retryAfterSeconds() {
    if (this.allowed || this.retryAfterMs === null) return null;
    return Math.max(Math.ceil(this.retryAfterMs / 1000), 1);
  }

  /** RateLimit-Policy: the quotas as configured, stable whatever decided. */
  policyField() {
    const items = [];
    if (this.limits.length === 0) {
      if (this.definition === null) return null;
      for (const limit of this.definition.limits) {
        const algorithm = limit.algorithm;
        items.push(policyItem(limit.name, algorithm.quota, algorithm.inFlight, algorithm.windowNs()));
      }
    } else {
      for (const status of this.limits) {
        items.push(policyItem(status.name, status.configuredQuota, status.inFlight, status.windowNs));
      }
    }
    return items.length ? items.join(', ') : null;
  }

  /** RateLimit: each consulted limit's remaining units and effective window. */
  serviceField() {
    const items = this.limits.map((status) => {
      let item = `"${status.name}";r=${status.remaining}`;
      if (!status.inFlight) item += `;t=${ceilSecondsNs(status.moreInNs)}`;
      return item;
    });
    return items.length ? items.join(', ') : null;
  }

  /**
   * The response header fields, exactly as the Rust client writes them (lower case).
   * `onAdmitted: false` gives none for an admitted request; `legacy` adds X-RateLimit-*.
   */
  headers({ onAdmitted = true, legacy = false } = {}) {
    const headers = {};
    if (this.allowed && !onAdmitted) return headers;
    const retry = this.retryAfterSeconds();
    if (this.status === 503) {
      if (retry !== null) headers['retry-after'] = String(retry);
      return headers;
    }
    const policy = this.policyField();
    if (policy !== null) headers['ratelimit-policy'] = policy;
    const service = this.serviceField();
    if (service !== null) headers.ratelimit = service;
    if (retry !== null) headers['retry-after'] = String(retry);
    const binding = this.bindingLimit;
    if (legacy && binding !== null) {
      headers['x-ratelimit-limit'] = String(binding.quota);
      headers['x-ratelimit-remaining'] = String(binding.remaining);
      headers['x-ratelimit-reset'] = String(Math.ceil(binding.resetAfterMs / 1000));
    }
    return headers;
  }

  /** The application/problem+json body of a refusal (an object). */
  problem() {
    const status = this.status;
    if (status === 503) {
      return {
        type: TEMPORARY_REDUCED_CAPACITY,
        title: 'Service Unavailable',
        status: 503,
        detail: 'The rate limiter cannot reach its store; try again later.',
      };
    }
    const violated = this.violated();
    const retry = this.retryAfterSeconds();
    let detail;
    if (violated.length && retry !== null) {
      detail = `Limit '${violated[0]}' of policy '${this.policy}' is exhausted; retry in ${retry} s.`;
    } else if (violated.length) {
      detail = `The request costs more than limit '${violated[0]}' of policy '${this.policy}' ever allows.`;
    } else {
      detail = `Policy '${this.policy}' refused the request.`;
    }
    return { type: QUOTA_EXCEEDED, title: 'Too Many Requests', status, detail, 'violated-policies': violated };
  }

  /** The problem body as the Rust client serialises it (compact, in that key order). */
  problemJson() {
    return JSON.stringify(this.problem());
  }
}

function policyItem(name, quota, inFlight, windowNs) {
  if (inFlight) return `"${name}";q=${quota};qu="concurrent-requests"`;
  const seconds = ceilSecondsNs(windowNs);
  return `"${name}";q=${quota};w=${seconds > 1n ? seconds : 1n}`;
}

/** The body of a check that could not be made (a bug in the service's configuration). */
const INTERNAL_ERROR_BODY =
  '{"title":"Internal Server Error","status":500,"detail":"The request could not be checked against its rate limit."}';

module.exports = {
  STORE,
  LEASE,
  CACHE,
  FALLBACK,
  QUOTA_EXCEEDED,
  TEMPORARY_REDUCED_CAPACITY,
  INTERNAL_ERROR_BODY,
  View,
  LimitStatus,
  Decision,
};
