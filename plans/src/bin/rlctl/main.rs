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
use redis_ratelimit_plans::change::{self, Change, ChangeError, WriteOptions};
use redis_ratelimit_plans::plan_store::{self, PlanStoreError};
use redis_ratelimit_plans::snapshot::Snapshot;
use redis_ratelimit_plans::spec::{SpecError, check_tenant};
use redis_ratelimit_plans::{PlanConnection, PlanServer, file, history};

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
    let change = match &args.command {
        Command::Write(change) => Some(change.clone()),
        Command::Import { path } => Some(Change::Import {
            label: path.clone(),
            text: std::fs::read_to_string(path)
                .map_err(|error| Failure::Input(format!("cannot read {path}: {error}")))?,
        }),
        _ => None,
    };
    if let Some(change) = &change {
        change.check_input()?;
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
        return top_denied(&mut con, policy, limit.as_deref(), *minutes, *count).await;
    }
    let (snapshot, now_ms) = plan_store::read(&mut con).await?;
    for bad in &snapshot.unreadable {
        errln!("rlctl: warning: {}", show::unreadable(bad));
    }
    let Some(change) = change else {
        return read_only(&mut con, &args.command, &snapshot, now_ms).await;
    };
    let options = WriteOptions {
        who: &args.who,
        dry_run: args.dry_run,
        if_version: args.if_version,
    };
    let applied = change::apply(&mut con, &snapshot, now_ms, &change, options)
        .await
        .map_err(|error| match error {
            ChangeError::Input(error) => Failure::Input(error.0),
            ChangeError::Store(error) => Failure::Store(error),
        })?;
    // Said once the change is accepted: a refusal says it itself.
    if let Some(warning) = &applied.assumed {
        errln!("rlctl: warning: {warning}");
    }
    let planned = &applied.planned;
    if planned.edits.is_empty() {
        outln!(
            "nothing to change (the store is at version {})",
            snapshot.version
        );
        return Ok(());
    }
    match applied.version {
        None => outln!(
            "dry run, nothing written: {} would change, at version {}:",
            planned.op,
            snapshot.version
        ),
        Some(version) => outln!("{}: version {} -> {version}", planned.op, snapshot.version),
    }
    out!("{}", show::edits(&snapshot, &planned.edits));
    if let Some(note) = &planned.note {
        outln!("{note}");
    }
    if applied.version.is_none() {
        out!("{}", show::moved(&applied.moved));
    }
    Ok(())
}

/// The commands that only read: `get`, `list`, `history`, `export`.
async fn read_only(
    con: &mut PlanConnection,
    command: &Command,
    snapshot: &Snapshot,
    now_ms: u64,
) -> Result<(), Failure> {
    match command {
        Command::Get { tenant } => {
            check_tenant(tenant)?;
            out!("{}", show::effective(snapshot, tenant, now_ms));
        }
        Command::List => out!("{}", show::list(snapshot, now_ms)),
        Command::History { tenant, count } => {
            let scanned = if tenant.is_some() {
                history::SCANNED_FOR_TENANT
            } else {
                *count
            };
            let entries = plan_store::history(con, scanned).await?;
            out!(
                "{}",
                show::history(snapshot, &entries, tenant.as_deref(), *count)
            );
        }
        Command::Export => out!("{}", file::export(snapshot)?),
        Command::Write(_) | Command::Import { .. } | Command::Top { .. } => {}
    }
    Ok(())
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

/// `rlctl top`: the fleet's most denied keys of a policy, merged from every replica's
/// reports of the minutes asked, each count with its bound.
async fn top_denied(
    con: &mut PlanConnection,
    policy: &str,
    limit: Option<&str>,
    minutes: u64,
    count: u64,
) -> Result<(), Failure> {
    let mut query = TopQuery::new(policy)
        .minutes(minutes)
        .count(usize::try_from(count).unwrap_or(usize::MAX));
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
    let hashes: Vec<std::collections::HashMap<String, String>> = pipeline.query_async(con).await?;
    let hashes: Vec<Vec<(String, String)>> = hashes
        .into_iter()
        .map(|hash| hash.into_iter().collect())
        .collect();
    let (reports, unreadable) = top::decode_all(&hashes);
    if unreadable > 0 {
        errln!("rlctl: warning: {unreadable} top-keys reports cannot be read (another version?)");
    }
    let merged = merge::merge(&reports, &query.policy, query.limit.as_deref(), query.count);
    out!("{}", show::top(&query, &merged));
    Ok(())
}
