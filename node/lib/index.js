'use strict';
/**
 * redis-ratelimit for Node.js: one exact rate limit for every replica of a service, decided in
 * Redis by the redis-ratelimit module or its Functions library, with leases, a bounded local
 * fallback, a circuit breaker, the IETF RateLimit header fields and metrics. No runtime
 * dependency: bring your Redis client (node-redis v4+, a node-redis cluster, ioredis).
 *
 * ```js
 * const { createClient } = require('redis');
 * const { RateLimiter, Policy, Limit } = require('redis-ratelimit-client');
 * const api = new Policy('api', [Limit.tokenBucket('per-key', { capacity: 100, refill: 60, key: 'rl:{{{key}}}' })]);
 * const limiter = new RateLimiter(client, [api], { replicas: 3 });
 * const decision = await limiter.check('api', { key: 'alice' });
 * ```
 */

const { Algorithm, Rate } = require('./algorithms');
const { Decision, LimitStatus, View } = require('./decision');
const { AlgorithmError, CheckError, ConfigError, PolicyError, StoreError } = require('./errors');
const { RateLimiter, Reservation } = require('./limiter');
const { Metrics, MemoryMetrics, PrometheusMetrics } = require('./metrics');
const { DEFAULT_TIMEOUT_MS, Lease, Limit, Policy } = require('./policy');
const { MemoryStore, RedisStore } = require('./store');
const { setLogger } = require('./log');
const { keySlot } = require('./connection');
const { ipKey } = require('./ip');
const { fromFile, fromToml } = require('./config');
const { PlanSource } = require('./plans');
const { RateLimitStore } = require('./express');

const version = '0.1.0';

// Each entry a bare name: Node reads this object's names statically (cjs-module-lexer) to
// give the ESM entry (index.mjs, `export *`) its named exports, and an entry whose value is
// a literal or a call ends that reading: the names after it would be missing from ESM
// (test/package.test.js compares the two entries).
module.exports = {
  DEFAULT_TIMEOUT_MS,
  Algorithm,
  AlgorithmError,
  CheckError,
  ConfigError,
  Decision,
  Lease,
  Limit,
  LimitStatus,
  MemoryMetrics,
  MemoryStore,
  Metrics,
  Policy,
  PolicyError,
  PrometheusMetrics,
  Rate,
  RateLimiter,
  RedisStore,
  Reservation,
  StoreError,
  PlanSource,
  View,
  fromFile,
  fromToml,
  ipKey,
  keySlot,
  RateLimitStore,
  setLogger,
  version,
};
