'use strict';
/**
 * Metrics with the Rust client's names and labels (client/src/metrics.rs), through a small
 * recorder interface; labels carry the policy name, never a key.
 *
 * | metric | type | labels |
 * |---|---|---|
 * | ratelimit_decisions_total | counter | policy, outcome, source, backend |
 * | ratelimit_store_latency_seconds | histogram | policy, op |
 * | ratelimit_store_errors_total | counter | policy, kind |
 * | ratelimit_lease_claims_total, ..._units_claimed_total, ..._units_refunded_total | counters | policy |
 * | ratelimit_fallback_units_owed_total, ratelimit_fallback_units_settled_total | counters | policy |
 * | ratelimit_group_refunds_total | counter | policy |
 * | ratelimit_store_backend | gauge | backend |
 * | ratelimit_circuit_open | gauge | |
 * | ratelimit_circuit_opened_total | counter | |
 * | ratelimit_plans_loaded, ratelimit_plans_version | gauges | |
 * | ratelimit_plans_read_errors_total | counter | |
 *
 * `Metrics` records nothing (the default); `PrometheusMetrics` records into a prom-client
 * registry; `MemoryMetrics` keeps them in memory and writes the Prometheus text format itself
 * (no dependency). A recorder of your own implements the same methods.
 */

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/** Every metric: [name, type, help, labels]. */
const DEFINITIONS = [
  ['ratelimit_decisions_total', 'counter', 'Rate-limit decisions by policy, outcome, source and backend', ['policy', 'outcome', 'source', 'backend']],
  ['ratelimit_store_latency_seconds', 'histogram', 'Round trip of rate-limit store calls', ['policy', 'op']],
  ['ratelimit_store_errors_total', 'counter', 'Rate-limit store calls that failed, by kind', ['policy', 'kind']],
  ['ratelimit_lease_claims_total', 'counter', 'Store calls claiming lease units', ['policy']],
  ['ratelimit_lease_units_claimed_total', 'counter', 'Units claimed into leases', ['policy']],
  ['ratelimit_lease_units_refunded_total', 'counter', 'Unspent lease units refunded', ['policy']],
  [
    'ratelimit_fallback_units_owed_total',
    'counter',
    'Units the local fallback admitted while the store was out of reach, owed to it',
    ['policy'],
  ],
  ['ratelimit_fallback_units_settled_total', 'counter', 'Owed fallback units the store took when it answered again', ['policy']],
  ['ratelimit_group_refunds_total', 'counter', 'Limit groups refunded because a later group denied', ['policy']],
  ['ratelimit_store_backend', 'gauge', 'The store backend in use', ['backend']],
  ['ratelimit_circuit_open', 'gauge', '1 while the circuit breaker holds store calls back', []],
  ['ratelimit_circuit_opened_total', 'counter', 'Times the circuit breaker opened', []],
  ['ratelimit_plans_loaded', 'gauge', '1 once the policy store has been read', []],
  ['ratelimit_plans_version', 'gauge', 'The policy store version in use', []],
  ['ratelimit_plans_read_errors_total', 'counter', 'Failed reads of the policy store', []],
];

/**
 * The recorder interface; records nothing. Each method gets what the Rust client records:
 * `inc(name, labels, amount)`, `set(name, labels, value)` and `observe(name, labels, seconds)`
 * are the three primitives the others go through, so a recorder need only implement those.
 */
class Metrics {
  inc() {}

  set() {}

  observe() {}

  decision(decision) {
    this.inc('ratelimit_decisions_total', {
      policy: decision.policy,
      outcome: decision.outcome,
      source: decision.source,
      backend: decision.backend || 'none',
    });
  }

  storeLatency(policy, op, seconds) {
    this.observe('ratelimit_store_latency_seconds', { policy, op }, seconds);
  }

  storeError(policy, kind) {
    this.inc('ratelimit_store_errors_total', { policy, kind });
  }

  leaseClaimed(policy, units) {
    this.inc('ratelimit_lease_claims_total', { policy });
    this.inc('ratelimit_lease_units_claimed_total', { policy }, Number(units));
  }

  leaseRefunded(policy, units) {
    this.inc('ratelimit_lease_units_refunded_total', { policy }, Number(units));
  }

  fallbackSettled(policy, owed, settled) {
    this.inc('ratelimit_fallback_units_owed_total', { policy }, Number(owed));
    this.inc('ratelimit_fallback_units_settled_total', { policy }, Number(settled));
  }

  groupRefunded(policy) {
    this.inc('ratelimit_group_refunds_total', { policy });
  }

  circuit(open) {
    this.set('ratelimit_circuit_open', {}, open ? 1 : 0);
  }

  circuitOpened() {
    this.set('ratelimit_circuit_open', {}, 1);
    this.inc('ratelimit_circuit_opened_total', {});
  }

  backend(name) {
    this.set('ratelimit_store_backend', { backend: name }, 1);
  }

  plans(loaded, version = null) {
    this.set('ratelimit_plans_loaded', {}, loaded ? 1 : 0);
    if (version !== null) this.set('ratelimit_plans_version', {}, Number(version));
  }

  plansReadError() {
    this.inc('ratelimit_plans_read_errors_total', {});
  }
}

function labelText(labels) {
  const names = Object.keys(labels);
  if (names.length === 0) return '';
  const escape = (value) => String(value).replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
  return `{${names.map((name) => `${name}="${escape(labels[name])}"`).join(',')}}`;
}

/** The metrics in memory, written in the Prometheus text format by `text()`. */
class MemoryMetrics extends Metrics {
  constructor() {
    super();
    /** name -> Map(labelText -> value | { buckets, sum, count }). */
    this.series = new Map(DEFINITIONS.map(([name]) => [name, new Map()]));
  }

  inc(name, labels, amount = 1) {
    const series = this.series.get(name);
    const key = labelText(labels);
    series.set(key, (series.get(key) || 0) + amount);
  }

  set(name, labels, value) {
    this.series.get(name).set(labelText(labels), value);
  }

  observe(name, labels, seconds) {
    const series = this.series.get(name);
    const key = labelText(labels);
    let histogram = series.get(key);
    if (histogram === undefined) {
      histogram = { labels, buckets: BUCKETS.map(() => 0), sum: 0, count: 0 };
      series.set(key, histogram);
    }
    BUCKETS.forEach((bound, index) => {
      if (seconds <= bound) histogram.buckets[index] += 1;
    });
    histogram.sum += seconds;
    histogram.count += 1;
  }

  /** The value of a counter or gauge series (0 when never recorded). */
  value(name, labels = {}) {
    const found = this.series.get(name).get(labelText(labels));
    return found === undefined ? 0 : typeof found === 'number' ? found : found.count;
  }

  /** The Prometheus text exposition format. */
  text() {
    const lines = [];
    for (const [name, type, help] of DEFINITIONS) {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
      for (const [labels, value] of this.series.get(name)) {
        if (type !== 'histogram') {
          lines.push(`${name}${labels} ${value}`);
          continue;
        }
        BUCKETS.forEach((bound, index) => {
          lines.push(`${name}_bucket${labelText({ ...value.labels, le: String(bound) })} ${value.buckets[index]}`);
        });
        lines.push(`${name}_bucket${labelText({ ...value.labels, le: '+Inf' })} ${value.count}`);
        lines.push(`${name}_sum${labels} ${value.sum}`, `${name}_count${labels} ${value.count}`);
      }
    }
    return `${lines.join('\n')}\n`;
  }
}

/**
 * The metrics in a prom-client registry (`registry`; prom-client's default registry when
 * omitted). `client` is the prom-client module (required from the application when omitted).
 * prom-client adds `_total` to a counter's name itself, so counters are registered without it.
 */
class PrometheusMetrics extends Metrics {
  constructor(registry = null, client = null) {
    super();
    // eslint-disable-next-line global-require
    const prom = client || require('prom-client');
    const registers = [registry || prom.register];
    this.metrics = new Map();
    for (const [name, type, help, labelNames] of DEFINITIONS) {
      const existing = registers[0].getSingleMetric(type === 'counter' ? name.replace(/_total$/, '') : name);
      if (existing) {
        this.metrics.set(name, existing);
        continue;
      }
      if (type === 'counter') {
        this.metrics.set(name, new prom.Counter({ name: name.replace(/_total$/, ''), help, labelNames, registers }));
      } else if (type === 'gauge') {
        this.metrics.set(name, new prom.Gauge({ name, help, labelNames, registers }));
      } else {
        this.metrics.set(name, new prom.Histogram({ name, help, labelNames, buckets: BUCKETS, registers }));
      }
    }
  }

  inc(name, labels, amount = 1) {
    this.metrics.get(name).inc(labels, amount);
  }

  set(name, labels, value) {
    this.metrics.get(name).set(labels, value);
  }

  observe(name, labels, seconds) {
    this.metrics.get(name).observe(labels, seconds);
  }
}

module.exports = { BUCKETS, DEFINITIONS, Metrics, MemoryMetrics, PrometheusMetrics };
