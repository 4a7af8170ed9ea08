//! The write verbs of the policy store, from what an administrator asks to the audited,
//! atomic write: one code path for `rlctl` and the service's operator console, so both
//! check a change by the same rules, refuse it with the same words, record it the same way
//! in the audit stream and say the same thing about what it moves.
//!
//! [`Change::plan`] is pure: the edits a change makes of a snapshot, or why it is refused.
//! [`apply`] reads what a write needs besides (the server's limit settings), refuses a
//! stale version, and writes (or, for a dry run, only previews).

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::edit::{self, Edit, Table};
use super::file;
use super::plan_store::{self, PlanStoreError, printable};
use super::preview::{self, Moved};
use super::snapshot::Snapshot;
use super::spec::{LimitSpec, Pattern, ServerLimits, SpecError};

/// A change of the store, as `rlctl`'s write commands and the console's forms ask it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `plan set NAME --limit LIMIT... [--replace]`.
    PlanSet {
        /// The plan.
        name: String,
        /// Its limits, as text (`per-minute=sliding:1000/60s`).
        limits: Vec<String>,
        /// Drop the plan's limits not given (else their drop is refused).
        replace: bool,
    },
    /// `plan delete NAME`.
    PlanDelete {
        /// The plan.
        name: String,
    },
    /// `tenant set TENANT --plan PLAN`.
    TenantSet {
        /// The tenant.
        tenant: String,
        /// The plan, which must exist.
        plan: String,
    },
    /// `tenant delete TENANT`.
    TenantDelete {
        /// The tenant.
        tenant: String,
    },
    /// `override set PATTERN LIMIT... [--all] [--add] [--ttl D]`.
    OverrideSet {
        /// A tenant or `PREFIX*`.
        pattern: String,
        /// The limits, as text.
        limits: Vec<String>,
        /// Replace the whole set rather than each limit named.
        all: bool,
        /// Allow a limit the tenant does not have.
        add: bool,
        /// Temporary: gone after this long (from the server's clock).
        ttl: Option<Duration>,
    },
    /// `override delete PATTERN [LIMIT]`.
    OverrideDelete {
        /// The pattern (or a field no pattern parses to, written by hand).
        pattern: String,
        /// One limit's override (`None`: all of the pattern's).
        limit: Option<String>,
    },
    /// `override prune`.
    OverridePrune,
    /// `import FILE`: the store made to hold exactly `text` (TOML, as `export` writes it).
    Import {
        /// Where the text came from (a file's path), for the audit stream.
        label: String,
        /// The TOML.
        text: String,
    },
}

/// What a change does to a snapshot: its description for the audit stream, the edits, and
/// a note to show with them (the limits a `plan set --replace` drops).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The operation, as the audit stream's `op` records it (`plan set pro`).
    pub op: String,
    /// The edits (none: nothing to change).
    pub edits: Vec<Edit>,
    /// A note, if any.
    pub note: Option<String>,
}

impl Change {
    /// Whether the change writes limits, which are checked against the server's settings
    /// (so [`apply`] reads them first).
    pub fn writes_limits(&self) -> bool {
        matches!(
            self,
            Change::PlanSet { .. } | Change::OverrideSet { .. } | Change::Import { .. }
        )
    }

    /// Checks the change's own input, before any store is read (a bad import file is
    /// refused before connecting).
    pub fn check_input(&self) -> Result<(), SpecError> {
        match self {
            Change::Import { text, .. } => file::import(text).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// The edits this change makes of `snapshot` at `now_ms` (the server's clock), every
    /// limit checked against `server`; or why it is refused (nothing may be written then).
    pub fn plan(
        &self,
        snapshot: &Snapshot,
        now_ms: u64,
        server: &ServerLimits,
    ) -> Result<Planned, SpecError> {
        let parse = |texts: &[String]| {
            let limits = texts
                .iter()
                .map(|text| LimitSpec::parse(text))
                .collect::<Result<Vec<_>, _>>()?;
            for limit in &limits {
                server.check(limit)?;
            }
            Ok::<_, SpecError>(limits)
        };
        let planned = |op: String, edits: Vec<Edit>| Planned {
            op,
            edits,
            note: None,
        };
        Ok(match self {
            Change::PlanSet {
                name,
                limits,
                replace,
            } => {
                let limits = parse(limits)?;
                let edits = edit::plan_set(snapshot, name, &limits)?;
                let dropped = edit::plan_dropped(snapshot, name, &limits);
                let listed = dropped
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ");
                if !dropped.is_empty() && !replace {
                    let it = if dropped.len() == 1 { "it" } else { "them" };
                    return Err(SpecError(format!(
                        "plan '{name}' also has {listed}, which this would drop: give {it} again \
                         (--limit) to keep {it}, or add --replace to drop {it}"
                    )));
                }
                Planned {
                    op: format!("plan set {name}"),
                    edits,
                    note: (!dropped.is_empty())
                        .then(|| format!("dropped from plan '{name}': {listed}")),
                }
            }
            Change::PlanDelete { name } => planned(
                format!("plan delete {name}"),
                edit::plan_delete(snapshot, name)?,
            ),
            Change::TenantSet { tenant, plan } => planned(
                format!("tenant set {tenant} --plan {plan}"),
                edit::tenant_set(snapshot, tenant, plan)?,
            ),
            Change::TenantDelete { tenant } => planned(
                format!("tenant delete {tenant}"),
                edit::tenant_delete(snapshot, tenant)?,
            ),
            Change::OverrideSet {
                pattern,
                limits,
                all,
                add,
                ttl,
            } => {
                let expires_at_ms = ttl.map(|ttl| {
                    now_ms.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
                });
                let pattern = Pattern::parse(pattern)?;
                let limits = parse(limits)?;
                if !all && !add {
                    edit::check_override_names(snapshot, &pattern, &limits, now_ms)?;
                }
                planned(
                    format!("override set {pattern}"),
                    edit::override_set(snapshot, &pattern, &limits, *all, expires_at_ms)?,
                )
            }
            Change::OverrideDelete { pattern, limit } => {
                let raw = match limit {
                    Some(limit) => format!("{pattern} {limit}"),
                    None => pattern.clone(),
                };
                // A field no pattern parses to (written by hand) is deleted by its name.
                if let Some(edits) = edit::unreadable_delete(snapshot, Table::Overrides, &raw) {
                    return Ok(planned(format!("override delete {raw}"), edits));
                }
                let pattern = Pattern::parse(pattern)?;
                planned(
                    format!("override delete {pattern}"),
                    edit::override_delete(snapshot, &pattern, limit.as_deref())?,
                )
            }
            Change::OverridePrune => planned(
                "override prune".to_string(),
                edit::override_prune(snapshot, now_ms),
            ),
            Change::Import { label, text } => {
                let wanted = file::import(text)?;
                for limit in wanted
                    .plans
                    .values()
                    .flatten()
                    .chain(wanted.overrides.values().flat_map(|entry| &entry.limits))
                {
                    server.check(limit)?;
                }
                planned(
                    format!("import {}", printable(label, 256)),
                    edit::replace_all(snapshot, &wanted)?,
                )
            }
        })
    }
}

/// How a write is made.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions<'a> {
    /// Recorded in the audit stream as `who`.
    pub who: &'a str,
    /// Preview only: nothing is written.
    pub dry_run: bool,
    /// Write only if the store is still at this version (else [`PlanStoreError::Stale`]).
    pub if_version: Option<u64>,
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The change is refused as asked (bad input, or it would break the store): nothing was
    /// written.
    #[error("{0}")]
    Input(SpecError),
    /// The store failed, or moved on (`Stale`).
    #[error(transparent)]
    Store(#[from] PlanStoreError),
}

impl From<SpecError> for ChangeError {
    fn from(error: SpecError) -> Self {
        ChangeError::Input(error)
    }
}

/// What [`apply`] did.
#[derive(Clone, Debug)]
pub struct Applied {
    /// The edits and their description.
    pub planned: Planned,
    /// The store's version the change was computed from.
    pub from_version: u64,
    /// The version written (`None`: a dry run, or nothing to change).
    pub version: Option<u64>,
    /// The tenants whose limits the change moves (as of the server's clock).
    pub moved: Moved,
    /// How the limits written were checked when the server's setting could not be read (a
    /// warning to show once the change is accepted).
    pub assumed: Option<String>,
}

/// Plans `change` on `snapshot` (read from `con` at `now_ms`) and writes it as one atomic,
/// audited change, unless it is a dry run, changes nothing, or the store is no longer at
/// `options.if_version`.
pub async fn apply(
    con: &mut (impl ConnectionLike + Send),
    snapshot: &Snapshot,
    now_ms: u64,
    change: &Change,
    options: WriteOptions<'_>,
) -> Result<Applied, ChangeError> {
    let server = if change.writes_limits() {
        plan_store::server_limits(con).await
    } else {
        ServerLimits::defaults("no limit is written")
    };
    let planned = change.plan(snapshot, now_ms, &server)?;
    let assumed = match (&server.assumed, change.writes_limits()) {
        (Some(why), true) => Some(format!(
            "limits checked against the module's default ratelimit.max-log-entries ({}): {why}",
            server.max_log_entries
        )),
        _ => None,
    };
    if let Some(wanted) = options
        .if_version
        .filter(|wanted| *wanted != snapshot.version)
    {
        return Err(ChangeError::Store(PlanStoreError::Stale {
            expected: wanted,
            current: snapshot.version,
        }));
    }
    let moved = preview::moved(snapshot, &preview::after(snapshot, &planned.edits), now_ms);
    let version = if planned.edits.is_empty() || options.dry_run {
        None
    } else {
        Some(
            plan_store::write(
                con,
                snapshot.version,
                options.who,
                &planned.op,
                &planned.edits,
            )
            .await?,
        )
    };
    Ok(Applied {
        planned,
        from_version: snapshot.version,
        version,
        moved,
        assumed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Snapshot {
        let mut snapshot = Snapshot::default();
        snapshot.plans.insert(
            "pro".into(),
            vec![
                LimitSpec::parse("a=fixed:5/1d").unwrap(),
                LimitSpec::parse("b=fixed:9/1d").unwrap(),
            ],
        );
        snapshot.tenants.insert("acme".into(), "pro".into());
        snapshot
    }

    fn server() -> ServerLimits {
        ServerLimits::defaults("test")
    }

    #[test]
    fn a_dropped_limit_needs_replace() {
        let change = Change::PlanSet {
            name: "pro".into(),
            limits: vec!["a=fixed:6/1d".into()],
            replace: false,
        };
        let refused = change.plan(&store(), 0, &server()).unwrap_err();
        assert!(refused.0.contains("add --replace to drop it"), "{refused}");
        let change = Change::PlanSet {
            name: "pro".into(),
            limits: vec!["a=fixed:6/1d".into()],
            replace: true,
        };
        let planned = change.plan(&store(), 0, &server()).unwrap();
        assert_eq!(planned.op, "plan set pro");
        assert_eq!(
            planned.note.as_deref(),
            Some("dropped from plan 'pro': b=fixed:9/1d")
        );
    }

    #[test]
    fn a_temporary_override_expires_on_the_servers_clock() {
        let change = Change::OverrideSet {
            pattern: "acme".into(),
            limits: vec!["a=fixed:50/1d".into()],
            all: false,
            add: false,
            ttl: Some(Duration::from_secs(60)),
        };
        let planned = change.plan(&store(), 1_000, &server()).unwrap();
        assert_eq!(planned.edits.len(), 1);
        assert_eq!(
            planned.edits.first().and_then(|edit| edit.value.as_deref()),
            Some("expires=61000 a=fixed:50/1d")
        );
        let misspelt = Change::OverrideSet {
            pattern: "acme".into(),
            limits: vec!["aa=fixed:50/1d".into()],
            all: false,
            add: false,
            ttl: None,
        };
        assert!(misspelt.plan(&store(), 0, &server()).is_err());
    }
}
