// Type declarations of redis-ratelimit-client (hand-written; checked by `tsc -p tsconfig.json`
// on examples/typed.ts). No dependency on @types/node, redis, ioredis or express: the Redis
// client and the framework objects are typed by the shapes the package uses.

/** A number of units: a safe integer or a BigInt. */
export type Units = number | bigint;
/** Seconds: a number, a BigInt or exact decimal text ("1.5"). */
export type Seconds = number | bigint | string;

/** node-redis v4+ (`createClient`), a node-redis cluster (`createCluster`) or ioredis: by shape. */
export type RedisClientLike =
  | { sendCommand(args: string[], options?: object): Promise<unknown>; isReady?: boolean }
  | {
      sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[], options?: object): Promise<unknown>;
      getSlotMaster(slot: number): unknown;
      getMasters(): unknown[];
    }
  | { call(command: string, ...args: string[]): Promise<unknown>; status?: string; duplicate?(options?: object): unknown };

export type Fallback = 'local' | 'open' | 'closed';
export type Backend = 'auto' | 'module' | 'functions' | 'scripts';
export type Source = 'store' | 'lease' | 'cache' | 'fallback';
export type Outcome = 'allowed' | 'denied' | 'fallback_allowed' | 'fallback_denied' | 'error';

export class AlgorithmError extends RangeError {}
export class PolicyError extends Error {}
export class ConfigError extends Error {}
/** A check that cannot be made (an unknown policy, a missing input, a bad key or cost): the caller's mistake. */
export class CheckError extends Error {}
export class StoreError extends Error {
  constructor(kind: StoreErrorKind, detail?: string);
  readonly kind: StoreErrorKind;
  readonly detail: string;
  readonly unavailable: boolean;
}
export type StoreErrorKind = 'timeout' | 'unavailable' | 'server' | 'invalid' | 'config';

export const DEFAULT_TIMEOUT_MS: 50;
export const version: string;

export class Rate {
  readonly text: string;
  readonly intervalNs: bigint;
  static perSecond(value: number | string): Rate;
  static every(intervalNs: bigint): Rate;
  static per(tokens: bigint, periodNs: bigint): Rate;
}

export class Algorithm {
  readonly kind: 'token' | 'sliding' | 'fixed' | 'log' | 'gcra' | 'concurrency';
  readonly quota: bigint;
  static tokenBucket(capacity: Units | string, options: { rate?: number | string; refill?: Seconds }): Algorithm;
  static fixedWindow(limit: Units | string, window: Seconds): Algorithm;
  static slidingWindow(limit: Units | string, window: Seconds): Algorithm;
  static slidingLog(limit: Units | string, window: Seconds): Algorithm;
  static gcra(maxBurst: Units | string, count: Units | string, period: Seconds): Algorithm;
  static concurrency(limit: Units | string, ttl: Seconds): Algorithm;
  static fromParams(kind: string, params: string[]): Algorithm;
  readonly wireName: string;
  readonly command: string | null;
  readonly inFlight: boolean;
  wireArgs(): string[];
  equals(other: Algorithm): boolean;
}

/** Where a limit's key comes from: `{name}` is a check's input, `{{` and `}}` literal braces. */
export interface KeyTemplate {
  readonly text: string;
  inputs(): string[];
  render(inputs: Record<string, string>): string;
}

interface LimitCommon {
  /** The key template: `rl:{{{key}}}` renders `rl:{alice}` (a Cluster hash tag). */
  key: string;
  /** Units charged per unit of cost (default 1). */
  weight?: Units;
}

export class Limit {
  readonly name: string;
  readonly algorithm: Algorithm;
  readonly key: KeyTemplate;
  readonly weight: bigint;
  readonly maxWaitMs: number | null;
  static of(name: string, algorithm: Algorithm, options: LimitCommon & { maxWaitMs?: number }): Limit;
  /** `capacity` tokens refilled at `rate` per second, or completely over `refill` seconds (`refillMs`); `maxWaitMs` paces. */
  static tokenBucket(
    name: string,
    options: LimitCommon & { capacity: Units | string; rate?: number | string; refill?: Seconds; refillMs?: Units; maxWaitMs?: number },
  ): Limit;
  static fixedWindow(name: string, options: LimitCommon & { limit: Units | string; window?: Seconds; windowMs?: Units }): Limit;
  static slidingWindow(name: string, options: LimitCommon & { limit: Units | string; window?: Seconds; windowMs?: Units }): Limit;
  static slidingLog(name: string, options: LimitCommon & { limit: Units | string; window?: Seconds; windowMs?: Units }): Limit;
  static gcra(name: string, options: LimitCommon & { maxBurst: Units | string; count: Units | string; period: Seconds }): Limit;
  static concurrency(name: string, options: { key: string; limit: Units | string; ttl?: Seconds; ttlMs?: Units }): Limit;
}

export interface LeaseOptions {
  units: number;
  maxUnits?: number | null;
  lifetimeMs?: number;
}

export class Lease {
  constructor(options: LeaseOptions);
  readonly units: number;
  readonly maxUnits: number | null;
  readonly lifetimeMs: number;
  readonly cap: number;
}

export interface PolicyOptions {
  lease?: Lease | LeaseOptions | null;
  fallback?: Fallback;
  /** The store timeout (default 50 ms): a call times out when the store is silent this long. */
  timeoutMs?: number;
  denyCache?: boolean;
  tenantInput?: string | null;
}

export class Policy {
  constructor(name: string, limits: Limit[], options?: PolicyOptions);
  static fromStore(name: string, options?: Omit<PolicyOptions, 'tenantInput'> & { tenant?: string; defaults?: Limit[] }): Policy;
  readonly name: string;
  readonly limits: readonly Limit[];
  readonly lease: Lease | null;
  readonly fallback: Fallback;
  readonly timeoutMs: number;
  readonly denyCache: boolean;
  readonly tenantInput: string | null;
  readonly inputs: readonly string[];
  readonly holdsSlots: boolean;
}

export class View {
  readonly allowed: boolean;
  readonly remaining: number;
  readonly retryAfterMs: number | null;
  readonly resetAfterMs: number;
  readonly limit: number;
}

/** One limit's state as a decision saw it. */
export class LimitStatus {
  name: string;
  quota: number;
  configuredQuota: number;
  windowNs: bigint;
  inFlight: boolean;
  allowed: boolean;
  remaining: number;
  retryAfterMs: number | null;
  resetAfterMs: number;
  moreInNs: bigint;
}

export interface InFlight {
  policy: string;
  holder: string;
  keys: string[];
  local: boolean;
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  'violated-policies'?: string[];
}

/** The answer to a check. */
export class Decision {
  readonly allowed: boolean;
  readonly policy: string;
  readonly source: Source;
  readonly backend: 'module' | 'functions' | 'scripts' | 'memory' | null;
  readonly outcome: Outcome;
  /** 0 when admitted, null when no wait helps. */
  readonly retryAfterMs: number | null;
  readonly limits: LimitStatus[];
  readonly bindingIndex: number;
  /** For a paced request, the wait before it proceeds. */
  readonly waitMs: number;
  inFlight: InFlight | null;
  readonly bindingLimit: LimitStatus | null;
  readonly binding: string | null;
  readonly remaining: number;
  readonly resetAfterMs: number;
  readonly limit: number;
  /** 200, 429, or 503 (the store is out of reach and the policy fails closed). */
  readonly status: number;
  violated(): string[];
  retryAfterSeconds(): number | null;
  /** The response header fields, lower case: ratelimit-policy, ratelimit, retry-after (x-ratelimit-* with legacy). */
  headers(options?: { onAdmitted?: boolean; legacy?: boolean }): Record<string, string>;
  problem(): Problem;
  problemJson(): string;
  /** Gives back the in-flight slots (present when the decision holds some); also `await using`. */
  release?(): Promise<void>;
}

export interface CheckOptions {
  cost?: Units;
}

export class Reservation {
  readonly policy: string;
  readonly estimate: bigint;
  readonly decision: Decision;
  readonly allowed: boolean;
  settled: boolean;
  owed: bigint;
  /** Refunds or debits the difference to `actual`; resolves with the units owed. */
  settle(actual: Units): Promise<bigint>;
  release(): Promise<void>;
}

/** The metrics recorder: the three primitives, and the named events (which call them). */
export class Metrics {
  inc(name: string, labels: Record<string, string>, amount?: number): void;
  set(name: string, labels: Record<string, string>, value: number): void;
  observe(name: string, labels: Record<string, string>, seconds: number): void;
}
export class MemoryMetrics extends Metrics {
  value(name: string, labels?: Record<string, string>): number;
  /** The Prometheus text exposition format. */
  text(): string;
}
export class PrometheusMetrics extends Metrics {
  /** `registry`: a prom-client Registry (default: prom-client's); `client`: the prom-client module. */
  constructor(registry?: unknown, client?: unknown);
}

export class MemoryStore {
  constructor(options?: { multi?: boolean; cluster?: boolean; clock?: () => bigint });
  down: boolean;
  delayMs: number;
  offsetUs: bigint;
  calls: number;
  readonly backend: 'memory';
}

export class RedisStore {
  constructor(client: RedisClientLike, options?: { backend?: Backend; multi?: boolean | null });
  readonly backend: 'module' | 'functions' | 'scripts' | null;
  connect(timeoutMs?: number): Promise<string>;
  /** Runs a module command (RL.PEEK key ...) on the backend in use. */
  call(args: Array<string | number | bigint>, options?: { timeoutMs?: number }): Promise<unknown>;
}

/** Minimal shapes of the HTTP objects the middleware touches (Express's, Node's). */
export interface RequestLike {
  ip?: string;
  headers?: Record<string, string | string[] | undefined>;
  [name: string]: unknown;
}
export interface ResponseLike {
  status(code: number): unknown;
  setHeader(name: string, value: string): unknown;
  getHeader(name: string): unknown;
  removeHeader(name: string): unknown;
  end(body?: string): unknown;
  once(event: string, listener: () => void): unknown;
}
export type Middleware = (req: any, res: any, next: (error?: unknown) => void) => Promise<void>;

export type KeyValue = string | number | Record<string, string | number> | null | undefined;

export interface HttpOptions<Req = any> {
  /** The policy's input for a request (default: the client address, IPv6 by /56), or an object of inputs; null: unchecked. */
  key?: (req: Req) => KeyValue | Promise<KeyValue>;
  cost?: (req: Req) => Units | Promise<Units>;
  inputName?: string;
  legacy?: boolean;
}

export interface MiddlewareOptions<Req = any> extends HttpOptions<Req> {
  skip?: (req: Req) => boolean | Promise<boolean>;
  onAdmitted?: boolean;
}

export interface CheckResult {
  decision: Decision | null;
  allowed: boolean;
  status: number;
  headers: Record<string, string>;
  body: string | null;
}

/** A store for express-rate-limit (its Store interface, duck-typed). */
export class RateLimitStore {
  constructor(limiter: RateLimiter, policy: string, options?: { inputName?: string });
  /** The policy's tightest quota: give it to express-rate-limit as `limit`. */
  readonly limit: number;
  readonly localKeys: false;
  readonly prefix: string;
  init(options: object): void;
  increment(key: string): Promise<{ totalHits: number; resetTime: Date }>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
}

export interface LimiterOptions {
  /** Replicas sharing the quota in the local fallback (a number, or read at each fallback decision). */
  replicas?: number | (() => number);
  breaker?: { failures?: number; openForMs?: number };
  metrics?: Metrics | null;
  plans?: PlanSource | null;
  backend?: Backend;
  maxKeys?: number;
}

export class RateLimiter {
  constructor(redis: RedisClientLike | RedisStore | MemoryStore, policies?: Policy[], options?: LimiterOptions);
  readonly backend: string | null;
  readonly storeUnreachable: boolean;
  readonly policies: Policy[];
  policy(name: string): Policy | null;
  connect(options?: { timeoutMs?: number }): Promise<string>;
  validate(policy: string, inputs?: Record<string, string | number>): void;
  /** Admitted only if every limit admits it, and then every limit is charged. */
  check(policy: string, inputs?: Record<string, string | number>, options?: CheckOptions | Units): Promise<Decision>;
  release(decision: Decision): Promise<void>;
  hold<T>(policy: string, inputs: Record<string, string | number>, work: (decision: Decision) => Promise<T> | T, options?: CheckOptions): Promise<T | Decision>;
  reserve(policy: string, inputs: Record<string, string | number>, options: { estimate: Units }): Promise<Reservation>;
  releaseLeases(): Promise<void>;
  close(): Promise<void>;
  express<Req = any>(policy: string, options?: MiddlewareOptions<Req>): Middleware;
  checker<Req = any>(policy: string, options?: HttpOptions<Req>): (req: Req) => Promise<CheckResult | null>;
  rateLimitStore(policy: string, options?: { inputName?: string }): RateLimitStore;
}

/** Plans from the policy store (rlctl), followed as they change. */
export class PlanSource {
  constructor(redis: RedisClientLike, options?: { checkEveryMs?: number; subscribe?: boolean; timeoutMs?: number; metrics?: Metrics | null });
  /** Reads the store once (its defaults apply meanwhile if Redis is not there) and follows it. */
  start(): Promise<PlanSource>;
  refresh(): Promise<void>;
  close(): Promise<void>;
  readonly loaded: boolean;
  readonly version: number;
  readonly status: string;
}

/** Policies from the Rust client's TOML format (client/src/config.rs), read unchanged. */
export function fromToml(text: string): Policy[];
export function fromFile(path: string): Policy[];

/** A client address as a key: IPv4 as it is, IPv6 by its /56 (ipv6Subnet), IPv4-mapped as IPv4. */
export function ipKey(ip: string, options?: { ipv6Subnet?: number | false }): string;
/** The Redis Cluster hash slot of a key. */
export function keySlot(key: string): number;
/** Where the client logs (console, pino...); null: silent. */
export function setLogger(logger: { info(message: string): void; warn(message: string): void; error(message: string): void } | null): void;
