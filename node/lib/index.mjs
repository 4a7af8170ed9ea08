// The ESM entry (package.json's exports map): the CommonJS package's exports, named.
import api from './index.js';

export const {
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
} = api;

export default api;
