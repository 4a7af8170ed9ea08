'use strict';
/**
 * Policies from the Rust client's TOML format, read unchanged (client/src/config.rs):
 * [[policy]] with name, fallback, timeout_ms, deny_cache, lease = { units, max_units,
 * lifetime_ms }, from_store, and [[policy.limit]] with name, key, algorithm and exactly that
 * algorithm's parameters (from the generated table of kinds). Unknown fields and another
 * algorithm's parameters are refused, naming the policy and the limit.
 */

const fs = require('node:fs');
const { BY_CONFIG_NAME, GCRA, KINDS, TOKEN_BUCKET } = require('./kinds');
const { Algorithm, orList } = require('./algorithms');
const { AlgorithmError, ConfigError, PolicyError } = require('./errors');
const { Lease, Limit, Policy } = require('./policy');
const { TomlError, parse } = require('./toml');

const POLICY_FIELDS = new Set(['name', 'fallback', 'timeout_ms', 'deny_cache', 'lease', 'from_store', 'limit']);
const LEASE_FIELDS = new Set(['units', 'max_units', 'lifetime_ms']);
const LIMIT_FIELDS = new Set(['name', 'key', 'algorithm', 'weight']);

/**
 * The fields a parameter may be given as (client/src/config.rs's fields): its name, or for a
 * duration its name in seconds or in milliseconds, and a rate as the time its tokens take to
 * refill instead.
 */
function fieldsOf(param) {
  if (param.cls === 'rate') return [param.name, 'refill_s', 'refill_ms'];
  if (param.cls === 'seconds') return [`${param.name}_s`, `${param.name}_ms`];
  if (param.cls === 'whole_seconds') return [`${param.name}_s`];
  return [param.name];
}

/** Each kind's fields, by short name (from the generated table, kinds.js). */
const PARAMETERS = Object.fromEntries(
  KINDS.map((kind) => [kind.name, [...kind.params.flatMap(fieldsOf), ...(kind.paced ? ['max_wait_ms'] : [])]]),
);
const ALL_PARAMETERS = [...new Set(Object.values(PARAMETERS).flat())];

const isTable = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);

/** Reads policies from a TOML file; every error is a ConfigError naming the file. */
function fromFile(path) {
  let data;
  try {
    data = fs.readFileSync(path);
  } catch (error) {
    throw new ConfigError(`cannot read the configuration file ${path}: ${error.message}`);
  }
  let text;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(data);
  } catch {
    throw new ConfigError(`the configuration file ${path} is not UTF-8 text`);
  }
  try {
    return fromToml(text);
  } catch (error) {
    if (error instanceof ConfigError) throw new ConfigError(`the configuration file ${path}: ${error.message}`);
    throw error;
  }
}

/** Reads policies from TOML text. */
function fromToml(text) {
  let document;
  try {
    document = parse(text);
  } catch (error) {
    if (error instanceof TomlError) throw new ConfigError(`bad configuration: ${error.message}`);
    throw error;
  }
  const unknown = Object.keys(document).filter((name) => name !== 'policy');
  if (unknown.length) throw new ConfigError(`bad configuration: unknown field '${unknown.sort()[0]}', expected 'policy'`);
  const policies = document.policy === undefined ? [] : document.policy;
  if (!Array.isArray(policies) || policies.length === 0) {
    throw new ConfigError(
      'bad configuration: no policy: add at least one [[policy]] with a [[policy.limit]] ' +
        '(without one, every check is refused as naming an unknown policy)',
    );
  }
  return policies.map(policyOf);
}

function checkFields(table, allowed, where) {
  for (const name of Object.keys(table)) {
    if (!allowed.has(name)) throw new ConfigError(`bad configuration: ${where}: unknown field '${name}'`);
  }
}

/** A field of `type` (string, integer, boolean), or undefined when absent. */
function typed(table, name, type, where) {
  const value = table[name];
  if (value === undefined) return undefined;
  const ok =
    type === 'integer'
      ? (typeof value === 'number' && Number.isInteger(value)) || typeof value === 'bigint'
      : typeof value === type; // eslint-disable-line valid-typeof
  if (!ok) throw new ConfigError(`bad configuration: ${where}: '${name}' must be ${type === 'string' ? 'str' : type === 'boolean' ? 'bool' : 'int'}, got ${JSON.stringify(typeof value === 'bigint' ? String(value) : value)}`);
  if (type === 'integer' && value < 0) throw new ConfigError(`bad configuration: ${where}: '${name}' must be at least 0, got ${value}`);
  return value;
}

/** Milliseconds as exact seconds (1500 -> 1.500). */
function msText(ms) {
  const value = BigInt(ms);
  return `${value / 1000n}.${String(value % 1000n).padStart(3, '0')}`;
}

function policyOf(entry) {
  if (!isTable(entry)) throw new ConfigError('bad configuration: each [[policy]] is a table');
  const { name } = entry;
  if (typeof name !== 'string') throw new ConfigError('bad configuration: a [[policy]] needs a name');
  const where = `policy '${name}'`;
  checkFields(entry, POLICY_FIELDS, where);
  let lease = null;
  if ('lease' in entry) {
    const table = entry.lease;
    if (!isTable(table)) throw new ConfigError(`bad configuration: ${where}: lease is a table`);
    checkFields(table, LEASE_FIELDS, `${where}, lease`);
    const units = typed(table, 'units', 'integer', `${where}, lease`);
    if (units === undefined) throw new ConfigError(`bad configuration: ${where}, lease: missing field 'units'`);
    const lifetime = typed(table, 'lifetime_ms', 'integer', `${where}, lease`);
    const maxUnits = typed(table, 'max_units', 'integer', `${where}, lease`);
    lease = new Lease({ units: Number(units), maxUnits: maxUnits === undefined ? null : Number(maxUnits), lifetimeMs: lifetime === undefined ? 1000 : Number(lifetime) });
  }
  const limitTables = entry.limit === undefined ? [] : entry.limit;
  if (!Array.isArray(limitTables)) throw new ConfigError(`bad configuration: ${where}: limit is a list of [[policy.limit]] tables`);
  const limits = limitTables.map((table) => limitOf(name, table));
  const fallback = typed(entry, 'fallback', 'string', where);
  const timeoutMs = typed(entry, 'timeout_ms', 'integer', where);
  const denyCache = typed(entry, 'deny_cache', 'boolean', where);
  const tenantInput = typed(entry, 'from_store', 'string', where);
  try {
    return new Policy(name, limits, {
      lease,
      fallback: fallback || 'local',
      timeoutMs: timeoutMs === undefined ? 50 : Number(timeoutMs),
      denyCache: denyCache === undefined ? true : denyCache,
      tenantInput: tenantInput === undefined ? null : tenantInput,
    });
  } catch (error) {
    if (!(error instanceof PolicyError)) throw error;
    const prefix = error.message.startsWith(`policy '${name}'`) ? '' : `policy '${name}': `;
    throw new ConfigError(`bad configuration: ${prefix}${error.message}`);
  }
}

function limitOf(policy, table) {
  if (!isTable(table)) throw new ConfigError(`bad configuration: policy '${policy}': each [[policy.limit]] is a table`);
  const { name } = table;
  const where = `policy '${policy}', limit '${name}'`;
  checkFields(table, new Set([...LIMIT_FIELDS, ...ALL_PARAMETERS]), where);
  for (const field of ['name', 'key', 'algorithm']) {
    if (typeof table[field] !== 'string') throw new ConfigError(`bad configuration: ${where}: missing field '${field}'`);
  }
  const algorithmName = table.algorithm;
  const kind = BY_CONFIG_NAME[algorithmName];
  if (kind === undefined) {
    throw new ConfigError(`bad configuration: ${where}: algorithm is ${orList(KINDS.map((k) => k.configName))} (got '${algorithmName}')`);
  }
  const allowed = PARAMETERS[kind.name];
  for (const parameter of ALL_PARAMETERS.filter((p) => p in table)) {
    if (!allowed.includes(parameter)) throw new ConfigError(`bad configuration: ${where}: '${parameter}' is not a parameter of ${algorithmName}`);
  }
  const numbers = Object.fromEntries(allowed.map((p) => [p, typed(table, p, p === 'rate' ? 'string' : 'integer', where)]));
  const need = (parameter) => {
    if (numbers[parameter] === undefined) throw new ConfigError(`bad configuration: ${where}: '${parameter}' is missing`);
    return numbers[parameter];
  };
  let algorithm;
  try {
    if (kind.name === TOKEN_BUCKET) {
      const capacity = need('capacity');
      const { rate, refill_s: seconds, refill_ms: millis } = numbers;
      if (rate !== undefined && (seconds !== undefined || millis !== undefined)) {
        throw new ConfigError(`bad configuration: ${where}: give either 'rate' or a refill time, not both`);
      }
      if (rate !== undefined) algorithm = Algorithm.tokenBucket(capacity, { rate });
      else {
        if ((seconds === undefined) === (millis === undefined)) {
          throw new ConfigError(`bad configuration: ${where}: give exactly one of 'refill_s' and 'refill_ms'`);
        }
        algorithm = Algorithm.tokenBucket(capacity, { refill: seconds !== undefined ? String(seconds) : msText(millis) });
      }
    } else if (kind.name === GCRA) {
      algorithm = Algorithm.gcra(need('max_burst'), need('count'), String(need('period_s')));
    } else {
      // A count, then a duration (in seconds or milliseconds), or whole milliseconds.
      const words = kind.params.map((param) => {
        if (param.cls !== 'seconds') return String(need(param.name));
        const seconds = numbers[`${param.name}_s`];
        const millis = numbers[`${param.name}_ms`];
        if ((seconds === undefined) === (millis === undefined)) {
          throw new ConfigError(`bad configuration: ${where}: give exactly one of '${param.name}_s' and '${param.name}_ms'`);
        }
        return seconds !== undefined ? String(seconds) : msText(millis);
      });
      algorithm = Algorithm.fromParams(kind.name, words);
    }
  } catch (error) {
    if (error instanceof AlgorithmError) throw new ConfigError(`bad configuration: ${where}: ${error.message}`);
    throw error;
  }
  const weight = typed(table, 'weight', 'integer', where);
  const maxWaitMs = numbers.max_wait_ms;
  try {
    return Limit.of(String(name), algorithm, {
      key: String(table.key),
      weight: weight === undefined || weight < 1 ? 1 : weight,
      maxWaitMs: maxWaitMs === undefined ? null : Number(maxWaitMs),
    });
  } catch (error) {
    if (error instanceof PolicyError) throw new ConfigError(`bad configuration: policy '${policy}': ${error.message}`);
    throw error;
  }
}

module.exports = { fromFile, fromToml };
