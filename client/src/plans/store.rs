//! The policy store in Redis: every key in one hash slot (the `{rl-policy}` hash tag), so a
//! change is one atomic script and a snapshot one `MULTI`, on a single server or a cluster.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{rl-policy}:version` | string | the version, incremented by every change |
//! | `{rl-policy}:plans` | hash | plan name -> `NAME=KIND:AMOUNT/PERIOD ...` |
//! | `{rl-policy}:tenants` | hash | tenant -> plan name |
//! | `{rl-policy}:overrides` | hash | `PATTERN` or `PATTERN LIMIT` -> `[expires=MS ]NAME=KIND:AMOUNT/PERIOD ...` |
//! | `{rl-policy}:audit` | stream | one entry per changed field: version, at_ms, who, op, kind, name, old, new |
//!
//! Every change is published on the channel `{rl-policy}:changes` (the new version).

use std::collections::BTreeMap;
use std::fmt;

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

use super::edit::{Edit, Table};
use super::snapshot::Snapshot;
use super::spec::SpecError;

/// The version counter.
pub const VERSION_KEY: &str = "{rl-policy}:version";
/// Plans.
pub const PLANS_KEY: &str = "{rl-policy}:plans";
/// Tenant -> plan.
pub const TENANTS_KEY: &str = "{rl-policy}:tenants";
/// Overrides.
pub const OVERRIDES_KEY: &str = "{rl-policy}:overrides";
/// The audit stream.
pub const AUDIT_KEY: &str = "{rl-policy}:audit";
/// The channel every change is published on.
pub const CHANNEL: &str = "{rl-policy}:changes";
/// Audit entries kept (approximately: `XADD MAXLEN ~`).
pub const AUDIT_KEPT: u64 = 100_000;

/// Compare the version, apply the edits, bump the version, audit each edit, publish.
const WRITE_SCRIPT: &str = r"
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current ~= tonumber(ARGV[1]) then return {'stale', tostring(current)} end
local version = current + 1
redis.call('SET', KEYS[1], version)
local time = redis.call('TIME')
local at_ms = tostring(tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
local kinds = {'plan', 'tenant', 'override'}
local count = tonumber(ARGV[4])
for i = 0, count - 1 do
  local index = tonumber(ARGV[6 + i * 4])
  local field = ARGV[7 + i * 4]
  local present = ARGV[8 + i * 4] == '1'
  local value = ARGV[9 + i * 4]
  local key = KEYS[1 + index]
  local old = redis.call('HGET', key, field) or ''
  if present then redis.call('HSET', key, field, value) else redis.call('HDEL', key, field); value = '' end
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[5], '*', 'version', version, 'at_ms', at_ms,
    'who', ARGV[2], 'op', ARGV[3], 'kind', kinds[index], 'name', field, 'old', old, 'new', value)
end
redis.call('PUBLISH', KEYS[6], version)
return {'ok', tostring(version)}
";

/// Why a store operation failed.
#[derive(Debug)]
pub enum PlanStoreError {
    /// Redis could not be reached or refused the call.
    Redis(RedisError),
    /// Another change came first: the store is at `current`, the change was computed from
    /// `expected`.
    Stale {
        /// The version the change was computed from.
        expected: u64,
        /// The store's version now.
        current: u64,
    },
    /// The store holds something this version cannot read.
    Corrupt(SpecError),
}

impl fmt::Display for PlanStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis(error) => write!(f, "Redis: {error}"),
            Self::Stale { expected, current } => write!(
                f,
                "stale write refused: the policy store is at version {current}, this change \
                 was computed from version {expected}; nothing was written (read it again and retry)"
            ),
            Self::Corrupt(error) => write!(f, "the policy store holds bad data: {error}"),
        }
    }
}

impl std::error::Error for PlanStoreError {}

impl From<RedisError> for PlanStoreError {
    fn from(error: RedisError) -> Self {
        Self::Redis(error)
    }
}

/// Reads the whole store at one version (one `MULTI`), with the server's clock in ms.
pub async fn read(
    con: &mut (impl ConnectionLike + Send),
) -> Result<(Snapshot, u64), PlanStoreError> {
    type Hash = BTreeMap<String, String>;
    let (version, plans, tenants, overrides, (seconds, micros)): (
        Option<u64>,
        Hash,
        Hash,
        Hash,
        (u64, u64),
    ) = redis::pipe()
        .atomic()
        .get(VERSION_KEY)
        .hgetall(PLANS_KEY)
        .hgetall(TENANTS_KEY)
        .hgetall(OVERRIDES_KEY)
        .cmd("TIME")
        .query_async(con)
        .await?;
    let snapshot = Snapshot::decode(
        version.unwrap_or(0),
        plans.into_iter().collect(),
        tenants.into_iter().collect(),
        overrides.into_iter().collect(),
    )
    .map_err(PlanStoreError::Corrupt)?;
    let now_ms = seconds.saturating_mul(1_000).saturating_add(micros / 1_000);
    Ok((snapshot, now_ms))
}

/// The store's version (0 before the first change).
pub async fn version(con: &mut (impl ConnectionLike + Send)) -> Result<u64, PlanStoreError> {
    let version: Option<u64> = redis::cmd("GET").arg(VERSION_KEY).query_async(con).await?;
    Ok(version.unwrap_or(0))
}

/// Applies `edits` as one atomic change if the store is still at `expected`; returns the
/// new version. `who` and `op` go into the audit stream.
pub async fn write(
    con: &mut (impl ConnectionLike + Send),
    expected: u64,
    who: &str,
    op: &str,
    edits: &[Edit],
) -> Result<u64, PlanStoreError> {
    let mut command = redis::cmd("EVAL");
    command
        .arg(WRITE_SCRIPT)
        .arg(6)
        .arg(VERSION_KEY)
        .arg(PLANS_KEY)
        .arg(TENANTS_KEY)
        .arg(OVERRIDES_KEY)
        .arg(AUDIT_KEY)
        .arg(CHANNEL)
        .arg(expected)
        .arg(who)
        .arg(op)
        .arg(edits.len())
        .arg(AUDIT_KEPT);
    for edit in edits {
        let index = match edit.table {
            Table::Plans => 1,
            Table::Tenants => 2,
            Table::Overrides => 3,
        };
        command
            .arg(index)
            .arg(&edit.field)
            .arg(if edit.value.is_some() { "1" } else { "0" })
            .arg(edit.value.as_deref().unwrap_or(""));
    }
    let (outcome, version): (String, u64) = command.query_async(con).await?;
    if outcome == "stale" {
        return Err(PlanStoreError::Stale {
            expected,
            current: version,
        });
    }
    Ok(version)
}

/// One audit entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// The stream entry id.
    pub id: String,
    /// Its fields: version, at_ms, who, op, kind, name, old, new.
    pub fields: BTreeMap<String, String>,
}

impl AuditEntry {
    /// A field, empty if absent.
    pub fn get(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// The latest `count` audit entries, newest first.
pub async fn history(
    con: &mut (impl ConnectionLike + Send),
    count: u64,
) -> Result<Vec<AuditEntry>, PlanStoreError> {
    let reply: Value = redis::cmd("XREVRANGE")
        .arg(AUDIT_KEY)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(count)
        .query_async(con)
        .await?;
    let rows: Vec<(String, Vec<String>)> = redis::from_redis_value(&reply)?;
    Ok(rows
        .into_iter()
        .map(|(id, flat)| {
            let mut fields = BTreeMap::new();
            let mut words = flat.into_iter();
            while let (Some(name), Some(value)) = (words.next(), words.next()) {
                fields.insert(name, value);
            }
            AuditEntry { id, fields }
        })
        .collect())
}
