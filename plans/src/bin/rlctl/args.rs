//! The command line (`clap`), then checked into a [`Command`]. `-h` / `--help` are options
//! only: a word in a name's place (`tenant set help --plan free`) is that name. A name that
//! starts with `-` goes after `--` (`rlctl tenant set --plan free -- -x`).

use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser, Subcommand};
use redis_ratelimit_plans::change::Change;
use redis_ratelimit_plans::spec::{LIMIT_SYNTAX, SpecError, parse_duration, plan_kind_names};

/// The help's closing text; `{kinds}` is the kinds a plan's limit can be, from core's table.
const AFTER_HELP: &str = "\
Commands in full:
  plan set PLAN --limit LIMIT [--limit LIMIT ...] [--replace]
                                                    create a plan, or change its limits
                                                    (--replace: drop the limits not given)
  plan delete PLAN                                  delete a plan no tenant is on
  tenant set TENANT --plan PLAN                     put a tenant on a plan
  tenant delete TENANT                              take a tenant off its plan (defaults apply)
  override set PATTERN LIMIT... [--all] [--add] [--ttl DURATION]
                                                    override limits of a tenant or of every
                                                    tenant matching PREFIX* (--all: replace
                                                    the whole set; --add: a limit it does
                                                    not have yet; --ttl: temporary)
  override delete PATTERN [LIMIT_NAME]              delete an override (all of PATTERN's)
  override prune                                    delete the overrides that have expired
  get TENANT                                        effective limits and the rule of each
  list                                              plans, tenants, overrides
  history [--tenant TENANT] [--count N]             the audit trail, newest first (default 20)
  export                                            the store as TOML, on stdout
  import FILE                                       make the store hold exactly FILE (TOML)
  top POLICY [--limit NAME] [--minutes N] [--count N]
                                                    the fleet's most denied keys of each
                                                    limit of POLICY (a service's domain),
                                                    with each count's bound (default: the
                                                    last 5 minutes, 10 keys)

A name that starts with '-' goes after '--': rlctl tenant set --plan free -- -x.

LIMIT is NAME=KIND:AMOUNT/PERIOD, KIND {kinds}, PERIOD a whole
number of ms, s, m, h or d: per-minute=sliding:1000/60s, per-day=fixed:100000/1d.
Precedence: exact override > longest matching wildcard > the tenant's plan > the policy's default.
Limits are checked against the server's settings (CONFIG GET ratelimit.max-log-entries; the
module's default, 10000, when it cannot be read, which rlctl says).

Exit status: 0 done, 1 Redis failed, 2 bad input (nothing written), 3 stale (someone else
changed the store first; nothing written).";

/// [`AFTER_HELP`] with the kinds a plan's limit can be.
fn after_help() -> String {
    AFTER_HELP.replace("{kinds}", &plan_kind_names())
}

/// Plans, tenants and overrides in the policy store, changed in one place and followed by
/// every replica.
#[derive(Parser)]
#[command(name = "rlctl", after_help = after_help(), disable_help_subcommand = true)]
struct Cli {
    /// The Redis holding the store, or the primary Redis Sentinels name:
    /// redis+sentinel://HOST:PORT[,HOST:PORT...]/NAME
    #[arg(
        long,
        global = true,
        env = "RLCTL_REDIS",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379/",
        value_name = "URL[,URL...]"
    )]
    redis: String,
    /// The --redis URLs are nodes of a Redis Cluster (any of them: the store's commands go
    /// to the primary of its {rl-policy} slot)
    #[arg(long, global = true)]
    cluster: bool,
    /// Recorded in the audit stream [default: $USER, else rlctl]
    #[arg(long, global = true, value_name = "NAME")]
    who: Option<String>,
    /// Show what a write would change, write nothing
    #[arg(long, global = true)]
    dry_run: bool,
    /// Write only if the store is still at version N (else exit 3, nothing written)
    #[arg(long, global = true, value_name = "N", value_parser = version_number)]
    if_version: Option<u64>,
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand)]
enum Top {
    /// Plans: named sets of limits
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Which plan a tenant is on
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Overrides of a tenant's limits, or of every tenant matching PREFIX*
    #[command(subcommand)]
    Override(OverrideCommand),
    /// Effective limits of a tenant and the rule of each
    Get {
        /// The tenant
        tenant: String,
    },
    /// Plans, tenants, overrides
    List,
    /// The audit trail, newest first
    History {
        /// Only the entries that concern this tenant
        #[arg(long, value_name = "TENANT")]
        tenant: Option<String>,
        /// How many entries
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = positive)]
        count: u64,
    },
    /// The store as TOML, on stdout
    Export,
    /// Make the store hold exactly FILE (TOML), in one change
    Import {
        /// The TOML file (as export writes it)
        file: String,
    },
    /// The fleet's most denied keys of a policy (a service's domain), per limit, merged
    /// from every replica's reports, each count with its bound
    #[command(name = "top")]
    Denied {
        /// The policy (a service's domain)
        policy: String,
        /// Only this limit
        #[arg(long, value_name = "NAME")]
        limit: Option<String>,
        /// The minutes read: the current one and those before it
        #[arg(long, value_name = "N", default_value_t = 5, value_parser = positive)]
        minutes: u64,
        /// Keys listed per limit
        #[arg(long, value_name = "N", default_value_t = 10, value_parser = positive)]
        count: u64,
    },
}

#[derive(Subcommand)]
enum PlanCommand {
    /// Create a plan, or change its limits (dropping one it has needs --replace)
    Set {
        /// The plan's name
        plan: String,
        /// A limit of the plan (at least one)
        #[arg(long = "limit", value_name = "LIMIT")]
        limits: Vec<String>,
        /// Drop the plan's limits that are not given (else their drop is refused)
        #[arg(long)]
        replace: bool,
    },
    /// Delete a plan no tenant is on
    Delete {
        /// The plan's name
        plan: String,
    },
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Put a tenant on a plan
    Set {
        /// The tenant
        tenant: String,
        /// The plan (it must exist)
        #[arg(long, value_name = "PLAN")]
        plan: Option<String>,
    },
    /// Take a tenant off its plan (the defaults apply)
    Delete {
        /// The tenant
        tenant: String,
    },
}

#[derive(Subcommand)]
enum OverrideCommand {
    /// Override limits of a tenant or of every tenant matching PREFIX*
    Set {
        /// A tenant, or PREFIX* (* alone: every tenant)
        pattern: String,
        /// The limits to override (or give them with --limit)
        limits: Vec<String>,
        /// More limits
        #[arg(long = "limit", value_name = "LIMIT")]
        more: Vec<String>,
        /// Replace the whole set of limits, not each limit named
        #[arg(long)]
        all: bool,
        /// Allow a limit the tenant does not have (else refused: a misspelt name would add one)
        #[arg(long)]
        add: bool,
        /// Temporary: gone after this long (90s, 7d)
        #[arg(long, value_name = "DURATION", value_parser = duration)]
        ttl: Option<Duration>,
    },
    /// Delete an override of one limit of PATTERN, or all of PATTERN's
    Delete {
        /// The tenant or PREFIX* of the override
        pattern: String,
        /// The limit (none: every override of PATTERN)
        limit: Option<String>,
    },
    /// Delete the overrides that have expired
    Prune,
}

/// Why a flag's value is refused (clap names the flag before it).
#[derive(Debug, thiserror::Error)]
enum ValueError {
    /// Not a whole number.
    #[error("takes a version number (got '{0}')")]
    Version(String),
    /// Not a whole number above zero.
    #[error("takes a positive number (got '{0}')")]
    Positive(String),
    /// Not a duration.
    #[error("{0}")]
    Duration(SpecError),
}

fn version_number(text: &str) -> Result<u64, ValueError> {
    text.parse()
        .map_err(|_| ValueError::Version(text.to_string()))
}

fn positive(text: &str) -> Result<u64, ValueError> {
    text.parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| ValueError::Positive(text.to_string()))
}

fn duration(text: &str) -> Result<Duration, ValueError> {
    parse_duration(text).map_err(ValueError::Duration)
}

/// What to do.
pub enum Command {
    /// A change of the store (every write but `import`).
    Write(Change),
    Get {
        tenant: String,
    },
    List,
    History {
        tenant: Option<String>,
        count: u64,
    },
    Export,
    Import {
        path: String,
    },
    Top {
        policy: String,
        limit: Option<String>,
        minutes: u64,
        count: u64,
    },
}

/// A parsed command line.
pub struct Args {
    pub redis: String,
    pub cluster: bool,
    pub who: String,
    pub dry_run: bool,
    pub if_version: Option<u64>,
    pub command: Command,
}

/// How parsing ended without a command to run.
#[derive(Debug)]
pub enum Stop {
    /// `--help` or `--version`: the text to print, exit 0.
    Help(String),
    /// Bad input: why, exit 2.
    Refused(String),
}

/// The short usage line and where to read more, for error messages.
pub fn usage() -> String {
    format!(
        "{}\nrun 'rlctl --help' (or 'rlctl COMMAND --help') for more",
        Cli::command().render_usage()
    )
}

/// Parses the arguments (without the program name).
pub fn parse(raw: impl Iterator<Item = String>) -> Result<Args, Stop> {
    let raw: Vec<String> = raw.collect();
    let cli = Cli::try_parse_from(std::iter::once("rlctl".to_string()).chain(raw.iter().cloned()))
        .map_err(|error| match error.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                Stop::Help(error.render().to_string())
            }
            _ => Stop::Refused(refusal(&error, &raw)),
        })?;
    let command = match cli.command {
        Top::Plan(PlanCommand::Set {
            plan,
            limits,
            replace,
        }) => {
            if limits.is_empty() {
                return Err(Stop::Refused(format!(
                    "plan set needs at least one --limit {LIMIT_SYNTAX}"
                )));
            }
            Command::Write(Change::PlanSet {
                name: plan,
                limits,
                replace,
            })
        }
        Top::Plan(PlanCommand::Delete { plan }) => {
            Command::Write(Change::PlanDelete { name: plan })
        }
        Top::Tenant(TenantCommand::Set { tenant, plan }) => Command::Write(Change::TenantSet {
            tenant,
            plan: plan.ok_or(Stop::Refused("tenant set needs --plan PLAN".into()))?,
        }),
        Top::Tenant(TenantCommand::Delete { tenant }) => {
            Command::Write(Change::TenantDelete { tenant })
        }
        Top::Override(OverrideCommand::Set {
            pattern,
            mut limits,
            more,
            all,
            add,
            ttl,
        }) => {
            limits.extend(more);
            if limits.is_empty() {
                return Err(Stop::Refused(format!(
                    "override set needs at least one limit, {LIMIT_SYNTAX}"
                )));
            }
            Command::Write(Change::OverrideSet {
                pattern,
                limits,
                all,
                add,
                ttl,
            })
        }
        Top::Override(OverrideCommand::Delete { pattern, limit }) => {
            Command::Write(Change::OverrideDelete { pattern, limit })
        }
        Top::Override(OverrideCommand::Prune) => Command::Write(Change::OverridePrune),
        Top::Get { tenant } => Command::Get { tenant },
        Top::List => Command::List,
        Top::History { tenant, count } => Command::History { tenant, count },
        Top::Export => Command::Export,
        Top::Denied {
            policy,
            limit,
            minutes,
            count,
        } => Command::Top {
            policy,
            limit,
            minutes,
            count,
        },
        Top::Import { file } => Command::Import { path: file },
    };
    if let Some(who) = cli
        .who
        .as_ref()
        .filter(|who| who.chars().any(char::is_control))
    {
        return Err(Stop::Refused(format!(
            "--who '{}': control characters are not allowed (it is one field of the audit trail)",
            who.escape_debug()
        )));
    }
    if !cli.cluster && cli.redis.contains(',') {
        return Err(Stop::Refused(format!(
            "--redis '{}' names several servers: add --cluster if they are nodes of a cluster",
            cli.redis
        )));
    }
    Ok(Args {
        redis: cli.redis,
        cluster: cli.cluster,
        who: cli
            .who
            .unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "rlctl".into())),
        dry_run: cli.dry_run,
        if_version: cli.if_version,
        command,
    })
}

/// A context string of a clap error.
fn context(error: &clap::Error, kind: ContextKind) -> Option<String> {
    match error.get(kind)? {
        ContextValue::String(text) => Some(text.clone()),
        ContextValue::Strings(texts) => Some(texts.join(", ")),
        _ => None,
    }
}

/// The words of the command `raw` names (`tenant set`), as far as they are commands.
fn command_words(raw: &[String]) -> Vec<String> {
    let mut command = Cli::command();
    let mut words = Vec::new();
    let mut args = raw.iter();
    while let Some(arg) = args.next() {
        if arg.starts_with('-') {
            let takes_value = command
                .get_arguments()
                .chain(Cli::command().get_arguments())
                .any(|known| {
                    known
                        .get_long()
                        .is_some_and(|long| arg == &format!("--{long}"))
                        && known.get_action().takes_values()
                });
            if takes_value {
                args.next();
            }
            continue;
        }
        let Some(sub) = command.find_subcommand(arg).cloned() else {
            break;
        };
        words.push(arg.clone());
        command = sub;
    }
    words
}

/// Whether `flag` (`--ttl`) is an option of some rlctl command.
fn is_some_commands_flag(flag: &str) -> bool {
    fn walk(command: &clap::Command, flag: &str) -> bool {
        command.get_arguments().any(|arg| {
            arg.get_long()
                .is_some_and(|long| flag == format!("--{long}"))
        }) || command.get_subcommands().any(|sub| walk(sub, flag))
    }
    walk(&Cli::command(), flag)
}

/// One line saying what is wrong with the command line.
fn refusal(error: &clap::Error, raw: &[String]) -> String {
    let invalid = context(error, ContextKind::InvalidArg).unwrap_or_default();
    let words = command_words(raw).join(" ");
    match error.kind() {
        ErrorKind::InvalidSubcommand => {
            let given = context(error, ContextKind::InvalidSubcommand).unwrap_or_default();
            let full = if words.is_empty() {
                given
            } else {
                format!("{words} {given}")
            };
            format!("unknown command '{full}'")
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            if words.is_empty() {
                "no command given".into()
            } else {
                format!("'{words}' needs a command: run rlctl {words} --help")
            }
        }
        ErrorKind::UnknownArgument if invalid.starts_with("--") => {
            let flag = invalid.split('=').next().unwrap_or_default();
            if is_some_commands_flag(flag) {
                format!("{flag} does not apply to '{words}'")
            } else {
                format!("unknown option {flag}")
            }
        }
        ErrorKind::UnknownArgument if invalid.starts_with('-') => {
            format!("unknown option {invalid} (a name that starts with '-' goes after '--')")
        }
        ErrorKind::UnknownArgument => format!("'{words}' takes no '{invalid}'"),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let flag = invalid.split(' ').next().unwrap_or_default();
            let reason = std::error::Error::source(error)
                .map(ToString::to_string)
                .unwrap_or_else(|| {
                    let value = context(error, ContextKind::InvalidValue).unwrap_or_default();
                    format!("bad value '{value}'")
                });
            format!("{flag}: {reason}")
        }
        ErrorKind::MissingRequiredArgument => {
            format!("'{words}' needs {invalid}")
        }
        ErrorKind::ArgumentConflict => format!("{invalid} is given twice"),
        _ => {
            // Clap's own words, without its "error: " and usage lines.
            let rendered = error.render().to_string();
            rendered
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Args, Stop> {
        parse(words.iter().map(|word| word.to_string()))
    }

    fn refused(words: &[&str]) -> String {
        match parse_words(words) {
            Err(Stop::Refused(why)) => why,
            Err(Stop::Help(_)) => panic!("{words:?}: help"),
            Ok(_) => panic!("{words:?}: accepted"),
        }
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_go_anywhere_and_help_is_only_an_option() {
        let args = parse_words(&["tenant", "set", "help", "--plan", "free", "--dry-run"]).unwrap();
        assert!(args.dry_run);
        assert!(
            matches!(args.command, Command::Write(Change::TenantSet { tenant, plan }) if tenant == "help" && plan == "free")
        );
        for help in [&["-h"][..], &["--help"], &["tenant", "set", "--help"]] {
            assert!(matches!(parse_words(help), Err(Stop::Help(_))), "{help:?}");
        }
        let args = parse_words(&["tenant", "set", "--plan", "free", "--", "-h"]).unwrap();
        assert!(
            matches!(args.command, Command::Write(Change::TenantSet { tenant, .. }) if tenant == "-h")
        );
    }

    #[test]
    fn replace_and_add_are_flags_of_their_commands_only() {
        let args = parse_words(&["plan", "set", "p", "--limit", "a=fixed:1/1s", "--replace"]);
        assert!(matches!(
            args.unwrap().command,
            Command::Write(Change::PlanSet { replace: true, .. })
        ));
        let args = parse_words(&["override", "set", "acme", "x=fixed:1/1s", "--add"]);
        assert!(matches!(
            args.unwrap().command,
            Command::Write(Change::OverrideSet { add: true, .. })
        ));
        assert_eq!(
            refused(&["tenant", "set", "a", "--plan", "p", "--replace"]),
            "--replace does not apply to 'tenant set'"
        );
        assert_eq!(
            refused(&["plan", "set", "p", "--limit", "a=fixed:1/1s", "--add"]),
            "--add does not apply to 'plan set'"
        );
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        assert_eq!(refused(&["frobnicate"]), "unknown command 'frobnicate'");
        assert_eq!(refused(&["plan", "frob"]), "unknown command 'plan frob'");
        assert_eq!(refused(&["--bogus", "list"]), "unknown option --bogus");
        assert_eq!(
            refused(&["tenant", "set", "a", "--plan", "p", "--ttl", "1d"]),
            "--ttl does not apply to 'tenant set'"
        );
        assert_eq!(refused(&[]), "no command given");
        assert!(refused(&["plan"]).contains("'plan' needs a command"));
        assert!(
            refused(&["override", "set", "a", "x=fixed:1/1s", "--ttl", "0s"])
                .starts_with("--ttl: bad duration '0s'")
        );
        assert_eq!(
            refused(&["history", "--count", "0"]),
            "--count: takes a positive number (got '0')"
        );
        assert_eq!(
            refused(&["--if-version", "x", "list"]),
            "--if-version: takes a version number (got 'x')"
        );
        assert_eq!(
            refused(&["plan", "delete", "a", "b"]),
            "'plan delete' takes no 'b'"
        );
    }
}
