// Uses the declarations as an application would: `tsc -p tsconfig.json` checks them (make node-test).
import { createClient } from 'redis';
import {
  Decision,
  Lease,
  Limit,
  MemoryMetrics,
  Middleware,
  PlanSource,
  Policy,
  RateLimiter,
  fromToml,
  ipKey,
} from 'redis-ratelimit-client';

async function main(): Promise<void> {
  const client = createClient({ url: 'redis://127.0.0.1:6379' });
  await client.connect();
  const api = new Policy('api', [
    Limit.tokenBucket('per-key', { capacity: 100, refill: 60, key: 'rl:{{{key}}}' }),
    Limit.fixedWindow('daily', { limit: 10000, window: 86400, key: 'rl:{{{key}}}:day', weight: 2 }),
  ], { lease: new Lease({ units: 10 }), fallback: 'local', timeoutMs: 50 });
  const uploads = new Policy('uploads', [Limit.concurrency('in-flight', { limit: 5, ttlMs: 30000, key: 'up:{user}' })]);
  const metrics = new MemoryMetrics();
  const plans = await new PlanSource(client, { checkEveryMs: 500 }).start();
  const tenants = Policy.fromStore('tenants', { tenant: 'tenant', defaults: [Limit.slidingWindow('per-minute', { limit: 600, window: 60, key: 'x' })] });
  const limiter = new RateLimiter(client, [api, uploads, tenants, ...fromToml('')], { replicas: 3, metrics, plans });
  const decision: Decision = await limiter.check('api', { key: 'alice' }, { cost: 2 });
  const fields: Record<string, string> = decision.headers();
  const wait: number | null = decision.retryAfterMs;
  console.log(decision.allowed, decision.remaining, wait, decision.binding, decision.source, fields, metrics.text());
  await limiter.hold('uploads', { user: 'bob' }, async (held) => held.limits.length);
  const reservation = await limiter.reserve('api', { key: 'alice' }, { estimate: 2000 });
  const owed: bigint = await reservation.settle(2500n);
  console.log(owed, ipKey('2001:db8::1'));
  // Express's own types need @types/node, which Debian does not ship: the request typed by what the key uses.
  const middleware: Middleware = limiter.express('api', { key: (req: { get(name: string): string | undefined }) => req.get('x-api-key') ?? 'anonymous' });
  console.log(typeof middleware);
  const store = limiter.rateLimitStore('api');
  console.log(store.limit, await store.increment('k'));
  const check = limiter.checker('api', { key: (req: { headers: Record<string, string> }) => req.headers['x-api-key'] });
  const result = await check({ headers: { 'x-api-key': 'alice' } });
  if (result !== null && !result.allowed) console.log(result.status, result.body);
  await limiter.close();
}

void main();
