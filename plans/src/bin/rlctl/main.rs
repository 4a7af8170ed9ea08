//! `rlctl`: plans, tenants and overrides in the policy store, changed in one place and
//! followed by every replica (see the client's README, "Plans").
//!
//! Every write is one atomic change against the version read just before (or the one
//! `--if-version` names); a change that would break the store or a limit the server would
//! refuse is refused with the reason, and nothing is written. Exit status: 0 done, 1 Redis
//! failed, 2 bad input, 3 stale (someone else changed the store first).

/// `print!` that never panics: a closed pipe (`rlctl list | head -1`) just ends the output.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `println!` that never panics.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `eprintln!` that never panics.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod args;
mod show;

use std::process::ExitCode;

use redis_ratelimit_client::top::{self, TopQuery, merge, report};
use redis_ratelimit_plans::PlanServer;
use redis_ratelimit_plans::edit::{self, Edit, Table};
use redis_ratelimit_plans::file;
use redis_ratelimit_plans::plan_store::{self, PlanStoreError};
use redis_ratelimit_plans::snapshot::Snapshot;
use redis_ratelimit_plans::spec::{LimitSpec, Pattern, ServerLimits, SpecError, check_tenant};

use self::args::{Args, Command, Stop};

/// How a run fails, and its exit status.
enum Failure {
    Input(String),
    Store(PlanStoreError),
}

impl From<SpecError> for Failure {
    fn from(error: SpecError) -> Self {
        Failure::Input(error.0)
    }
}

impl From<PlanStoreError> for Failure {
    fn from(error: PlanStoreError) -> Self {
        Failure::Store(error)
    }
}

impl From<redis::RedisError> for Failure {
    fn from(error: redis::RedisError) -> Self {
        Failure::Store(PlanStoreError::Redis(error))
    }
}

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(Stop::Help(text)) => {
            out!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(Stop::Refused(error)) => {
            errln!("rlctl: {error}\n\n{}", args::usage());
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            errln!("rlctl: cannot start: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Input(error)) => {
            errln!("rlctl: {error}; nothing was written");
            ExitCode::from(2)
        }
        Err(Failure::Store(error @ PlanStoreError::Stale { .. })) => {
            errln!("rlctl: {error}");
            ExitCode::from(3)
        }
        Err(Failure::Store(error)) => {
            let moved = matches!(&error, PlanStoreError::Redis(e) if is_moved(e));
            if moved {
                errln!(
                    "rlctl: {error}\nrlctl: this server is a cluster node that does not hold the \
                     store's {{rl-policy}} slot: add --cluster (nothing was written)"
                );
            } else {
                errln!("rlctl: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), Failure> {
    // Check the input completely before touching Redis.
    if let Command::Import { path } = &args.command {
        let text = std::fs::read_to_string(path)
            .map_err(|error| Failure::Input(format!("cannot read {path}: {error}")))?;
        file::import(&text)?;
    }
    let patience = std::time::Duration::from_secs(5);
    let server = if args.cluster {
        let nodes: Vec<&str> = args.redis.split(',').map(str::trim).collect();
        PlanServer::cluster(&nodes, patience)?
    } else {
        PlanServer::from_url(&args.redis, patience)?
    };
    let mut con = server.connect().await?;
    if let Command::Top {
        policy,
        limit,
        minutes,
        count,
    } = &args.command
    {
        let mut query = TopQuery::new(policy)
            .minutes(*minutes)
            .count(usize::try_from(*count).unwrap_or(usize::MAX));
        if let Some(limit) = limit {
            query = query.limit(limit);
        }
        query
            .check()
            .map_err(|error| Failure::Input(error.to_string()))?;
        // Buckets are minutes of the reporting replicas' clocks; this host's reads them.
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let keys = report::window_keys(now_s, query.minutes);
        let mut pipeline = redis::pipe();
        for key in &keys {
            pipeline.hgetall(key);
        }
        let hashes: Vec<std::collections::HashMap<String, String>> =
            pipeline.query_async(&mut con).await?;
        let hashes: Vec<Vec<(String, String)>> = hashes
            .into_iter()
            .map(|hash| hash.into_iter().collect())
            .collect();
        let (reports, unreadable) = top::decode_all(&hashes);
        if unreadable > 0 {
            errln!(
                "rlctl: warning: {unreadable} top-keys reports cannot be read (another version?)"
            );
        }
        let merged = merge::merge(&reports, &query.policy, query.limit.as_deref(), query.count);
        out!("{}", show::top(&query, &merged));
        return Ok(());
    }
    let (snapshot, now_ms) = plan_store::read(&mut con).await?;
    for bad in &snapshot.unreadable {
        errln!("rlctl: warning: {}", show::unreadable(bad));
    }
    // How the limits written were checked, when the server's setting could not be read.
    let mut assumed: Option<String> = None;
    let (op, edits, note) = match &args.command {
        Command::Get { tenant } => {
            check_tenant(tenant)?;
            out!("{}", show::effective(&snapshot, tenant, now_ms));
            return Ok(());
        }
        Command::List => {
            out!("{}", show::list(&snapshot, now_ms));
            return Ok(());
        }
        Command::History { tenant, count } => {
            let scanned = if tenant.is_some() { 10_000 } else { *count };
            let entries = plan_store::history(&mut con, scanned).await?;
            out!(
                "{}",
                show::history(&snapshot, &entries, tenant.as_deref(), *count)
            );
            return Ok(());
        }
        Command::Export => {
            out!("{}", file::export(&snapshot)?);
            return Ok(());
        }
        command => {
            let server = match command {
                // A limit the server would refuse on every check is refused here.
                Command::PlanSet { .. } | Command::OverrideSet { .. } | Command::Import { .. } => {
                    let server = plan_store::server_limits(&mut con).await;
                    // Said once the change is accepted: a refusal says it itself, and a
                    // write the server refuses (no Lua engine) was not checked for nothing.
                    assumed = server.assumed.as_ref().map(|why| {
                        format!(
                            "rlctl: warning: limits checked against the module's default \
                             ratelimit.max-log-entries ({}): {why}",
                            server.max_log_entries
                        )
                    });
                    server
                }
                _ => ServerLimits::defaults("no limit is written"),
            };
            changes(&snapshot, command, now_ms, &server)?
        }
    };
    let warn_assumed = || {
        if let Some(warning) = &assumed {
            errln!("{warning}");
        }
    };
    if let Some(wanted) = args.if_version.filter(|wanted| *wanted != snapshot.version) {
        return Err(Failure::Store(PlanStoreError::Stale {
            expected: wanted,
            current: snapshot.version,
        }));
    }
    if edits.is_empty() {
        warn_assumed();
        outln!(
            "nothing to change (the store is at version {})",
            snapshot.version
        );
        return Ok(());
    }
    if args.dry_run {
        warn_assumed();
        outln!(
            "dry run, nothing written: {op} would change, at version {}:",
            snapshot.version
        );
        out!("{}", show::edits(&snapshot, &edits));
        if let Some(note) = &note {
            outln!("{note}");
        }
        return Ok(());
    }
    let version = plan_store::write(&mut con, snapshot.version, &args.who, &op, &edits).await?;
    warn_assumed();
    outln!("{op}: version {} -> {version}", snapshot.version);
    out!("{}", show::edits(&snapshot, &edits));
    if let Some(note) = &note {
        outln!("{note}");
    }
    Ok(())
}

/// The edits a write command makes, its description for the audit stream, and a note to
/// print with them (the limits a `plan set --replace` drops). Every limit written is checked
/// against `server`.
fn changes(
    snapshot: &Snapshot,
    command: &Command,
    now_ms: u64,
    server: &ServerLimits,
) -> Result<(String, Vec<Edit>, Option<String>), Failure> {
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
    Ok(match command {
        Command::PlanSet {
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
                return Err(Failure::Input(format!(
                    "plan '{name}' also has {listed}, which this would drop: give {it} again \
                     (--limit) to keep {it}, or add --replace to drop {it}"
                )));
            }
            let note =
                (!dropped.is_empty()).then(|| format!("dropped from plan '{name}': {listed}"));
            (format!("plan set {name}"), edits, note)
        }
        Command::PlanDelete { name } => (
            format!("plan delete {name}"),
            edit::plan_delete(snapshot, name)?,
            None,
        ),
        Command::TenantSet { tenant, plan } => (
            format!("tenant set {tenant} --plan {plan}"),
            edit::tenant_set(snapshot, tenant, plan)?,
            None,
        ),
        Command::TenantDelete { tenant } => (
            format!("tenant delete {tenant}"),
            edit::tenant_delete(snapshot, tenant)?,
            None,
        ),
        Command::OverrideSet {
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
            (
                format!("override set {pattern}"),
                edit::override_set(snapshot, &pattern, &limits, *all, expires_at_ms)?,
                None,
            )
        }
        Command::OverrideDelete { pattern, limit } => {
            let raw = match limit {
                Some(limit) => format!("{pattern} {limit}"),
                None => pattern.clone(),
            };
            // A field no pattern parses to (written by hand) is deleted by its name.
            if let Some(edits) = edit::unreadable_delete(snapshot, Table::Overrides, &raw) {
                return Ok((format!("override delete {raw}"), edits, None));
            }
            let pattern = Pattern::parse(pattern)?;
            (
                format!("override delete {pattern}"),
                edit::override_delete(snapshot, &pattern, limit.as_deref())?,
                None,
            )
        }
        Command::OverridePrune => (
            "override prune".to_string(),
            edit::override_prune(snapshot, now_ms),
            None,
        ),
        Command::Import { path } => {
            let text = std::fs::read_to_string(path)
                .map_err(|error| Failure::Input(format!("cannot read {path}: {error}")))?;
            let wanted = file::import(&text)?;
            for limit in wanted
                .plans
                .values()
                .flatten()
                .chain(wanted.overrides.values().flat_map(|entry| &entry.limits))
            {
                server.check(limit)?;
            }
            (
                format!("import {}", plan_store::printable(path, 256)),
                edit::replace_all(snapshot, &wanted)?,
                None,
            )
        }
        Command::Get { .. }
        | Command::List
        | Command::History { .. }
        | Command::Export
        | Command::Top { .. } => (String::new(), Vec::new(), None),
    })
}

/// Whether a node answered `MOVED`: alone, or for the commands of a transaction (the store's
/// writes are one `MULTI`/`EXEC`, which the `redis` crate reports as aborted with each
/// command's error).
fn is_moved(error: &redis::RedisError) -> bool {
    error.clone().into_server_errors().is_some_and(|errors| {
        errors
            .iter()
            .any(|(_, error)| error.kind() == Some(redis::ServerErrorKind::Moved))
    })
}
