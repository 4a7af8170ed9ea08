'use strict';
/** The errors a check can raise. */

/**
 * A check that cannot be made: a mistake of the caller (an unknown policy, a missing input, a
 * key that is not text, a cost out of range, arguments the store refuses as invalid), never of
 * the store: the middleware answers it 500, never with the fallback.
 */
class CheckError extends Error {
  constructor(message) {
    super(message);
    this.name = 'CheckError';
  }
}

/** An algorithm's parameters are out of range (the server's rules). */
class AlgorithmError extends RangeError {
  constructor(message) {
    super(message);
    this.name = 'AlgorithmError';
  }
}

/** A policy or limit that cannot work. */
class PolicyError extends Error {
  constructor(message) {
    super(message);
    this.name = 'PolicyError';
  }
}

/** A configuration that cannot be used; the message names what is wrong. */
class ConfigError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** How a StoreError's kind is said. */
const STORE_ERROR_TEXT = {
  timeout: () => 'the store did not answer in time',
  unavailable: (detail) => `the store is unavailable: ${detail}`,
  server: (detail) => `the store refused the request: ${detail}`,
  invalid: (detail) => `the store refused the request as invalid: ${detail}`,
  config: (detail) => `bad store configuration: ${detail}`,
};

/**
 * A store call that failed: `kind` is `timeout` or `unavailable` (the store is out of reach:
 * fall back, count for the breaker), `invalid` (the store refused the request's arguments, or
 * they cannot be sent: the caller's error, raised as CheckError) or `server` / `config` (it
 * refused).
 */
class StoreError extends Error {
  constructor(kind, detail = '') {
    // A refused command's text can quote its arguments (a whole script): keep the start.
    const kept = detail.length <= 300 ? detail : `${detail.slice(0, 300)}...`;
    const text = STORE_ERROR_TEXT[kind];
    super(text === undefined ? kept || kind : text(kept));
    this.name = 'StoreError';
    this.kind = kind;
    this.detail = kept;
  }

  /** Whether the store is out of reach (fall back, and count for the breaker). */
  get unavailable() {
    return this.kind === 'timeout' || this.kind === 'unavailable';
  }
}

module.exports = { CheckError, AlgorithmError, PolicyError, ConfigError, StoreError };
