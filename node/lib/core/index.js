'use strict';
/**
 * A port of the Rust core (redis-ratelimit-core): the algorithms as pure functions of
 * (state, parameters, now), BigInt arithmetic with the Rust core's rounding and saturation.
 *
 * It decides the local fallback and the in-memory store. The golden vectors written by the
 * Rust core (core/examples/golden.rs) are replayed by the tests with zero differences.
 */

const { ConcurrencyParams } = require('./concurrency');
const { FixedWindowParams, SlidingWindowParams } = require('./windows');
const { GcraParams } = require('./gcra');
const { SlidingLogParams } = require('./sliding-log');
const { TokenBucketParams } = require('./token-bucket');

/**
 * Each kind's quota class, by the kind's short name (the generated table's name: kinds.js);
 * the tests check that every kind of the table has one.
 */
const QUOTAS = Object.freeze(
  Object.fromEntries(
    [TokenBucketParams, FixedWindowParams, SlidingWindowParams, SlidingLogParams, GcraParams, ConcurrencyParams].map(
      (quota) => [quota.prototype.kind, quota],
    ),
  ),
);

module.exports = { QUOTAS };
