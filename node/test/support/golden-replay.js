'use strict';
/**
 * Replays the Rust core's golden vectors (core/examples/golden.rs) through the JavaScript port
 * and lists every difference: exact integers (BigInt), the Python replay's rules
 * (python/tests/golden_replay.py). `node golden-replay.js FILE` prints a summary.
 */

const fs = require('node:fs');
const exact = require('./exact-json');

/** The port's modules, loaded from `lib` (a test may load a patched copy). */
function modules(lib = '../../lib') {
  return {
    concurrency: require(`${lib}/core/concurrency`),
    numbers: require(`${lib}/core/numbers`),
    engine: require(`${lib}/core/engine`),
    gcra: require(`${lib}/core/gcra`),
    slidingLog: require(`${lib}/core/sliding-log`),
    tokenBucket: require(`${lib}/core/token-bucket`),
    windows: require(`${lib}/core/windows`),
    local: require(`${lib}/local`),
  };
}

function replayWith(m, lines) {
  const { ConcurrencyParams, Concurrency } = m.concurrency;
  const { Decimal, NumberParseError, I64_MAX } = m.numbers;
  const { GcraParams, GcraParamError, Gcra, cellReply, emissionIntervalNs } = m.gcra;
  const { SlidingLogParams, SlidingLog } = m.slidingLog;
  const { TokenBucketParams, TokenBucket } = m.tokenBucket;
  const { FixedWindowParams, SlidingWindowParams, FixedWindow, SlidingWindow } = m.windows;
  const { KindMismatch } = m.engine;
  const { LocalLimits } = m.local;

  const quota = (spec) => {
    const kind = spec[0];
    if (kind === 'token') {
      const params = TokenBucketParams.fromInterval(spec[1], spec[2], spec[3]);
      return spec[4] ? params.withMaxWaitNs(spec[4]) : params;
    }
    if (kind === 'fixed') return FixedWindowParams.new(spec[1], spec[2], spec[3]);
    if (kind === 'sliding') return SlidingWindowParams.new(spec[1], spec[2], spec[3]);
    if (kind === 'log') return SlidingLogParams.new(spec[1], spec[2], spec[3]);
    if (kind === 'gcra') return GcraParams.fromInterval(spec[1], spec[2], spec[3]);
    if (kind !== 'concurrency') throw new Error(`golden vector of unknown kind '${kind}': the Node client has no twin of it`);
    let params = ConcurrencyParams.new(spec[1], spec[2]);
    if (spec[3] !== null) params = params.withHolder(spec[3]);
    return params.withCost(spec[4]);
  };

  const decision = (value) => {
    const fields = value.replyFields();
    // The vectors print remaining and limit unsaturated (u64), retry as the reply does.
    return [fields[0], value.remaining, value.retry < I64_MAX ? value.retry : I64_MAX, value.resetAfterMs, value.limit];
  };

  const digest = (limits, key) => {
    const stored = limits.state(key);
    if (stored === null) return null;
    const [, state, expires] = stored;
    let body;
    if (state instanceof TokenBucket) body = ['token', state.emptyAtNs, state.intervalNs];
    else if (state instanceof FixedWindow) body = ['fixed', state.windowStartUs, state.count];
    else if (state instanceof SlidingWindow) body = ['sliding', state.windowStartUs, state.previous, state.current];
    else if (state instanceof SlidingLog) {
      const { entries } = state;
      const first = entries.length ? entries[0] : -1n;
      const last = entries.length ? entries[entries.length - 1] : -1n;
      body = ['log', state.asOfUs, BigInt(entries.length), first, last, entries.reduce((a, b) => a + b, 0n)];
    } else if (state instanceof Gcra) body = ['gcra', state.tatNs];
    else if (state instanceof Concurrency) body = ['concurrency', state.holders.map(([expiry, holder]) => [expiry, holder])];
    else throw new TypeError(`unknown state ${state}`);
    return [body, expires];
  };

  const decimal = (text) => {
    let value;
    try {
      value = Decimal.parsePositive(text);
    } catch (error) {
      if (error instanceof NumberParseError) return error.kind;
      throw error;
    }
    return [value.ceilReciprocal(1000000000n), value.ceilTimes(1000000n), value.exceedsPowerOfTen(9)];
  };

  const gcraParameters = (c) => {
    let interval;
    let result;
    try {
      interval = emissionIntervalNs(c.c, c.p);
    } catch (error) {
      if (!(error instanceof GcraParamError)) throw error;
      interval = error.message;
    }
    try {
      const params = GcraParams.new(c.b, c.c, c.p);
      result = [params.intervalNs, params.toleranceNs()];
    } catch (error) {
      if (!(error instanceof GcraParamError)) throw error;
      result = error.message;
    }
    return [interval, result];
  };

  const operations = {
    acq(limits, c) {
      const quotas = c.q.map(quota);
      const out = {};
      try {
        const verdict = limits.acquire(c.keys, quotas, c.w, c.c, c.min, c.now);
        out.units = verdict.units;
        out.binding = BigInt(verdict.binding);
        out.d = decision(verdict.decision);
        out.per = verdict.perLimit.map(decision);
        out.exp = verdict.commits.map((commit) => (commit === null ? null : commit.expiresAtMs));
      } catch (error) {
        if (!(error instanceof KindMismatch)) throw error;
        out.err = BigInt(error.index);
      }
      out.s = c.keys.map((key) => digest(limits, key));
      return out;
    },
    ref(limits, c) {
      const quotas = c.q.map(quota);
      const evaluations = limits.refund(c.keys, quotas, c.now);
      const per = evaluations.map((e) => [decision(e.decision), e.commit === null ? null : e.commit.expiresAtMs]);
      return { per, s: c.keys.map((key) => digest(limits, key)) };
    },
    gra(limits, c) {
      const unit = quota(c.q[0]);
      const held = limits.held(c.keys, [unit], c.now)[0];
      const state = held.kind === unit.kind ? held.state : null;
      return { r: unit.grantable(state, c.up, c.now) };
    },
    thr(limits, c) {
      const params = quota(c.q[0]);
      const held = limits.held(c.keys, [params], c.now)[0];
      const [evaluation, cell] = params.throttle(held.kind === params.kind ? held.state : null, c.now);
      if (evaluation.commit !== null) limits.commit('k', params.kind, evaluation.commit, c.now);
      return {
        cell: cellReply(cell),
        d: decision(evaluation.decision),
        exp: evaluation.commit === null ? null : evaluation.commit.expiresAtMs,
        s: [digest(limits, 'k')],
      };
    },
  };
  const inputs = new Set(['t', 'tr', 'now', 'keys', 'q', 'w', 'c', 'min', 'up']);

  const counts = {};
  const differences = [];
  let trace = null;
  let limits = new LocalLimits();
  let number = 0;
  for (const line of lines) {
    number += 1;
    if (line.trim() === '') continue;
    const c = exact.parse(line);
    let got;
    let expected;
    let label;
    if (c.t === 'dec') {
      got = decimal(c.s);
      expected = c.r;
      label = 'decimal';
    } else if (c.t === 'gp') {
      got = gcraParameters(c);
      expected = [c.i, c.r];
      label = 'gcra-parameters';
    } else {
      if (c.tr !== trace) {
        trace = c.tr;
        limits = new LocalLimits();
      }
      got = operations[c.t](limits, c);
      expected = Object.fromEntries(Object.entries(c).filter(([key]) => !inputs.has(key)));
      label = c.keys.length > 1 || c.keys[0] !== 'k' ? 'multi' : c.q[0][0];
    }
    counts[label] = (counts[label] || 0) + 1;
    if (canonical(got) !== canonical(expected)) {
      differences.push(`line ${number}: ${line.trim()}\n  node: ${exact.stringify(got)}`);
    }
  }
  return { counts, differences };
}

/** A text equal for equal values: object keys sorted, integers exact. */
function canonical(value) {
  const sort = (item) => {
    if (Array.isArray(item)) return item.map(sort);
    if (item !== null && typeof item === 'object') {
      return Object.fromEntries(
        Object.keys(item)
          .sort()
          .map((key) => [key, sort(item[key])]),
      );
    }
    return item;
  };
  return exact.stringify(sort(value));
}

/** Replays every line; returns { counts (cases by kind), differences }. */
function replay(lines, lib) {
  return replayWith(modules(lib), lines);
}

if (require.main === module) {
  const lines = fs.readFileSync(process.argv[2], 'utf8').split('\n');
  const { counts, differences } = replay(lines);
  for (const difference of differences.slice(0, 20)) console.log(difference);
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  console.log(`${total} cases (${JSON.stringify(counts)}), ${differences.length} differences`);
  process.exitCode = differences.length ? 1 : 0;
}

module.exports = { replay, replayWith, modules };
