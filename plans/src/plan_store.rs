//! The policy store in Redis: every key in one hash slot (the `{rl-policy}` hash tag), so a
//! change is one atomic script and a snapshot one `MULTI`, on a single server or a cluster.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{rl-policy}:version` | string | the version, incremented by every change |
//! | `{rl-policy}:stamp` | string | the server's instant (µs) of the last change: with the version, names the content |
//! | `{rl-policy}:plans` | hash | plan name -> `NAME=KIND:AMOUNT/PERIOD ...` |
//! | `{rl-policy}:tenants` | hash | tenant -> plan name |
//! | `{rl-policy}:overrides` | hash | `PATTERN` or `PATTERN LIMIT` -> `[expires=MS ]NAME=KIND:AMOUNT/PERIOD ...` |
//! | `{rl-policy}:audit` | stream | one entry per changed field: version, at_ms, who, op, kind, name, old, new |
//!
//! Every change is published on the channel `{rl-policy}:changes` (the new version).

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

use super::edit::{Edit, Table};
use super::snapshot::Snapshot;
use super::spec::{ServerLimits, SpecError};

/// The version counter.
pub const VERSION_KEY: &str = "{rl-policy}:version";
/// The instant (server µs) of the last change, written by every change: a store wiped or
/// restored and changed again reaches versions it had before, never with the same stamp.
pub(crate) const STAMP_KEY: &str = "{rl-policy}:stamp";
/// Plans.
pub const PLANS_KEY: &str = "{rl-policy}:plans";
/// Tenant -> plan.
pub const TENANTS_KEY: &str = "{rl-policy}:tenants";
/// Overrides.
pub const OVERRIDES_KEY: &str = "{rl-policy}:overrides";
/// The audit stream.
pub(crate) const AUDIT_KEY: &str = "{rl-policy}:audit";
/// The channel every change is published on.
pub const CHANNEL: &str = "{rl-policy}:changes";
/// Audit entries kept (approximately: `XADD MAXLEN ~`).
pub(crate) const AUDIT_KEPT: u64 = 100_000;

/// Compare the version, apply the edits, bump the version, stamp it, audit each edit,
/// publish.
const WRITE_SCRIPT: &str = r"
local stored = redis.call('GET', KEYS[1]) or '0'
if not string.match(stored, '^%d+$') then return {'bad', stored} end
local current = tonumber(stored)
if current ~= tonumber(ARGV[1]) then return {'stale', stored} end
local version = current + 1
redis.call('SET', KEYS[1], version)
local time = redis.call('TIME')
local at_ms = tostring(tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
redis.call('SET', KEYS[7], string.format('%s%06d', time[1], tonumber(time[2])))
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
#[derive(Debug, thiserror::Error)]
pub enum PlanStoreError {
    /// Redis could not be reached or refused the call.
    #[error("Redis: {0}")]
    Redis(#[from] RedisError),
    /// Another change came first: the store is at `current`, the change was computed from
    /// `expected`.
    #[error(
        "stale write refused: the policy store is at version {current}, this change was \
         computed from version {expected}; nothing was written (read it again and retry)"
    )]
    Stale {
        /// The version the change was computed from.
        expected: u64,
        /// The store's version now.
        current: u64,
    },
    /// The store holds something this version cannot read.
    #[error("the policy store holds bad data: {0}")]
    Corrupt(SpecError),
    /// The server has no Lua engine (a Valkey 9.1 without its lua module): every write is
    /// one script, so that it is atomic.
    #[error(
        "this server has no Lua engine (a Valkey without its lua module), and the policy \
         store writes every change as one Lua script (EVAL) so that it is atomic: nothing was \
         written; give the server its Lua engine (reads work without it)"
    )]
    NoLuaEngine,
    /// The version key holds something other than a whole number (written by hand).
    #[error(
        "the policy store's version ({VERSION_KEY}) holds '{0}', not a whole number: nothing \
         was read or written; SET it to the version it should be (or delete the whole store)"
    )]
    BadVersion(String),
}

/// Parses the version key's value (absent: 0).
fn parse_version(stored: Option<String>) -> Result<u64, PlanStoreError> {
    match stored {
        None => Ok(0),
        Some(text) => text
            .parse()
            .map_err(|_| PlanStoreError::BadVersion(printable(&text, 40))),
    }
}

/// `text` as one line of at most `limit` characters: control characters escaped (`\n`,
/// `\u{1b}`), the rest cut with `...`.
pub fn printable(text: &str, limit: usize) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count >= limit {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// Reads the whole store at one version (one `MULTI`), with the server's clock in ms. A
/// field this version cannot read is left out and listed in the snapshot's
/// [`unreadable`](Snapshot::unreadable).
pub async fn read(
    con: &mut (impl ConnectionLike + Send),
) -> Result<(Snapshot, u64), PlanStoreError> {
    type Hash = BTreeMap<String, String>;
    let (version, stamp, plans, tenants, overrides, (seconds, micros)): (
        Option<String>,
        Option<String>,
        Hash,
        Hash,
        Hash,
        (u64, u64),
    ) = redis::pipe()
        .atomic()
        .get(VERSION_KEY)
        .get(STAMP_KEY)
        .hgetall(PLANS_KEY)
        .hgetall(TENANTS_KEY)
        .hgetall(OVERRIDES_KEY)
        .cmd("TIME")
        .query_async(con)
        .await?;
    let snapshot = Snapshot {
        stamp: stamp.unwrap_or_default(),
        ..Snapshot::decode(
            parse_version(version)?,
            plans.into_iter().collect(),
            tenants.into_iter().collect(),
            overrides.into_iter().collect(),
        )
    };
    let now_ms = seconds.saturating_mul(1_000).saturating_add(micros / 1_000);
    Ok((snapshot, now_ms))
}

/// The store's version (0 before the first change) and stamp (empty before the first
/// change of this version of the library): what a snapshot read now would hold in
/// [`Snapshot::version`] and [`Snapshot::stamp`].
pub(crate) async fn revision(
    con: &mut (impl ConnectionLike + Send),
) -> Result<(u64, String), PlanStoreError> {
    let (version, stamp): (Option<String>, Option<String>) = redis::cmd("MGET")
        .arg(VERSION_KEY)
        .arg(STAMP_KEY)
        .query_async(con)
        .await?;
    Ok((parse_version(version)?, stamp.unwrap_or_default()))
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
        .arg(7)
        .arg(VERSION_KEY)
        .arg(PLANS_KEY)
        .arg(TENANTS_KEY)
        .arg(OVERRIDES_KEY)
        .arg(AUDIT_KEY)
        .arg(CHANNEL)
        .arg(STAMP_KEY)
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
    let (outcome, stored): (String, String) = command
        .query_async(con)
        .await
        .map_err(no_lua_engine_named)?;
    if outcome == "bad" {
        return Err(PlanStoreError::BadVersion(printable(&stored, 40)));
    }
    let version = parse_version(Some(stored))?;
    if outcome == "stale" {
        return Err(PlanStoreError::Stale {
            expected,
            current: version,
        });
    }
    Ok(version)
}

/// The setting that bounds a sliding log's limit.
const MAX_LOG_ENTRIES: &str = "ratelimit.max-log-entries";

/// The server's settings that bound a limit (`CONFIG GET ratelimit.max-log-entries`), or the
/// module's defaults, saying why, when they cannot be read: the Functions library has no
/// such setting, an ACL may refuse `CONFIG`. Through a cluster connection every node that
/// answers counts, the smallest value wins.
pub async fn server_limits(con: &mut (impl ConnectionLike + Send)) -> ServerLimits {
    let reply: Result<Value, RedisError> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(MAX_LOG_ENTRIES)
        .query_async(con)
        .await;
    match reply {
        Ok(value) => match setting_values(&value, MAX_LOG_ENTRIES).into_iter().min() {
            Some(max_log_entries) => ServerLimits {
                max_log_entries,
                assumed: None,
            },
            None => ServerLimits::defaults(format!(
                "the server has no {MAX_LOG_ENTRIES} (the Functions library, or no module loaded)"
            )),
        },
        Err(error) => ServerLimits::defaults(format!("CONFIG GET {MAX_LOG_ENTRIES}: {error}")),
    }
}

/// Every value of setting `name` in a `CONFIG GET` reply: a flat name/value array (RESP2), a
/// map (RESP3), or those nested under each node of a cluster.
fn setting_values(value: &Value, name: &str) -> Vec<u64> {
    let is_name =
        |value: &Value| matches!(value, Value::BulkString(bytes) if bytes == name.as_bytes());
    let number = |value: &Value| match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    match value {
        Value::Array(items) => {
            let pairs = items
                .chunks(2)
                .filter_map(|pair| match pair {
                    [key, value] if is_name(key) => number(value),
                    _ => None,
                })
                .collect::<Vec<_>>();
            if pairs.is_empty() {
                items
                    .iter()
                    .flat_map(|item| setting_values(item, name))
                    .collect()
            } else {
                pairs
            }
        }
        Value::Map(entries) => entries
            .iter()
            .flat_map(|(key, value)| match number(value) {
                Some(n) if is_name(key) => vec![n],
                _ => setting_values(value, name),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A write's error, said plainly when the server refused the script for want of a Lua
/// engine (Valkey 9.1 answers `Could not find scripting engine 'lua'` when its lua module is
/// not loaded).
fn no_lua_engine_named(error: RedisError) -> PlanStoreError {
    let text = error.to_string().to_ascii_lowercase();
    if text.contains("could not find scripting engine") || text.contains("engine 'lua' not found") {
        PlanStoreError::NoLuaEngine
    } else {
        PlanStoreError::Redis(error)
    }
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
    let rows: Vec<(String, Vec<String>)> =
        redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
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
