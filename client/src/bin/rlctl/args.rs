//! The command line, parsed by hand (a handful of commands and flags).

use std::time::Duration;

use redis_ratelimit_client::plans::spec::{LIMIT_SYNTAX, parse_duration};

pub const USAGE: &str = "\
usage: rlctl [--redis URL[,URL...]] [--cluster] [--who NAME] [--dry-run] [--if-version N] COMMAND

  plan set PLAN --limit LIMIT [--limit LIMIT ...]   create or replace a plan
  plan delete PLAN                                  delete a plan no tenant is on
  tenant set TENANT --plan PLAN                     put a tenant on a plan
  tenant delete TENANT                              take a tenant off its plan (defaults apply)
  override set PATTERN LIMIT... [--all] [--ttl DURATION]
                                                    override limits of a tenant or of every
                                                    tenant matching PREFIX* (--all: replace
                                                    the whole set; --ttl: temporary)
  override delete PATTERN [LIMIT_NAME]              delete an override (all of PATTERN's)
  override prune                                    delete the overrides that have expired
  get TENANT                                        effective limits and the rule of each
  list                                              plans, tenants, overrides
  history [--tenant TENANT] [--count N]             the audit trail, newest first (default 20)
  export                                            the store as TOML, on stdout
  import FILE                                       make the store hold exactly FILE (TOML)

LIMIT is NAME=KIND:AMOUNT/PERIOD, KIND token, sliding, fixed, log or gcra, PERIOD a whole
number of ms, s, m, h or d: per-minute=sliding:1000/60s, per-day=fixed:100000/1d.
Precedence: exact override > longest matching wildcard > the tenant's plan > the policy's default.

--redis    default $RLCTL_REDIS, else redis://127.0.0.1:6379/; or the primary Redis
           Sentinels name: redis+sentinel://HOST:PORT[,HOST:PORT...]/NAME
--cluster  the --redis URLs are nodes of a Redis Cluster (any of them: the store's
           commands go to the primary of its {rl-policy} slot)
--who      recorded in the audit stream; default $USER, else rlctl
--dry-run  show what a write would change, write nothing
--if-version N  write only if the store is still at version N (else exit 3, nothing written)";

/// What to do.
pub enum Command {
    PlanSet {
        name: String,
        limits: Vec<String>,
    },
    PlanDelete {
        name: String,
    },
    TenantSet {
        tenant: String,
        plan: String,
    },
    TenantDelete {
        tenant: String,
    },
    OverrideSet {
        pattern: String,
        limits: Vec<String>,
        all: bool,
        ttl: Option<Duration>,
    },
    OverridePrune,
    OverrideDelete {
        pattern: String,
        limit: Option<String>,
    },
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

/// Parses the arguments; `Ok(None)` for `--help`.
pub fn parse(raw: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut redis =
        std::env::var("RLCTL_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut who = std::env::var("USER").unwrap_or_else(|_| "rlctl".into());
    let mut dry_run = false;
    let mut cluster = false;
    let mut if_version = None;
    let mut all = false;
    let mut limits = Vec::new();
    let mut plan = None;
    let mut ttl = None;
    let mut tenant_filter = None;
    let mut count = 20;
    let mut words = Vec::new();
    let mut raw = raw;
    while let Some(arg) = raw.next() {
        let mut value = |flag: &str| raw.next().ok_or(format!("{flag} needs a value"));
        match arg.as_str() {
            "--help" | "-h" | "help" => return Ok(None),
            "--redis" => redis = value("--redis")?,
            "--who" => who = value("--who")?,
            "--dry-run" => dry_run = true,
            "--cluster" => cluster = true,
            "--all" => all = true,
            "--if-version" => {
                let text = value("--if-version")?;
                if_version =
                    Some(text.parse().map_err(|_| {
                        format!("--if-version takes a version number (got '{text}')")
                    })?);
            }
            "--limit" => limits.push(value("--limit")?),
            "--plan" => plan = Some(value("--plan")?),
            "--ttl" => {
                ttl = Some(
                    parse_duration(&value("--ttl")?).map_err(|error| format!("--ttl: {error}"))?,
                )
            }
            "--tenant" => tenant_filter = Some(value("--tenant")?),
            "--count" => {
                let text = value("--count")?;
                count = text
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or(format!("--count takes a positive number (got '{text}')"))?;
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ => words.push(arg),
        }
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let refuse_flags = |allowed: &[&str]| -> Result<(), String> {
        let given = [
            ("--limit", !limits.is_empty()),
            ("--plan", plan.is_some()),
            ("--all", all),
            ("--ttl", ttl.is_some()),
            ("--tenant", tenant_filter.is_some()),
            ("--count", count != 20),
        ];
        match given
            .iter()
            .find(|(flag, set)| *set && !allowed.contains(flag))
        {
            Some((flag, _)) => Err(format!("{flag} does not apply to '{}'", words.join(" "))),
            None => Ok(()),
        }
    };
    let command = match words.as_slice() {
        ["plan", "set", name] => {
            refuse_flags(&["--limit"])?;
            if limits.is_empty() {
                return Err(format!(
                    "plan set needs at least one --limit {LIMIT_SYNTAX}"
                ));
            }
            Command::PlanSet {
                name: (*name).into(),
                limits: limits.clone(),
            }
        }
        ["plan", "delete", name] => {
            refuse_flags(&[])?;
            Command::PlanDelete {
                name: (*name).into(),
            }
        }
        ["tenant", "set", tenant] => {
            refuse_flags(&["--plan"])?;
            let plan = plan.clone().ok_or("tenant set needs --plan PLAN")?;
            Command::TenantSet {
                tenant: (*tenant).into(),
                plan,
            }
        }
        ["tenant", "delete", tenant] => {
            refuse_flags(&[])?;
            Command::TenantDelete {
                tenant: (*tenant).into(),
            }
        }
        ["override", "set", pattern, given @ ..] => {
            refuse_flags(&["--limit", "--all", "--ttl"])?;
            let mut all_limits: Vec<String> =
                given.iter().map(|text| (*text).to_string()).collect();
            all_limits.extend(limits.iter().cloned());
            if all_limits.is_empty() {
                return Err(format!(
                    "override set needs at least one limit, {LIMIT_SYNTAX}"
                ));
            }
            Command::OverrideSet {
                pattern: (*pattern).into(),
                limits: all_limits,
                all,
                ttl,
            }
        }
        ["override", "delete", pattern] => {
            refuse_flags(&[])?;
            Command::OverrideDelete {
                pattern: (*pattern).into(),
                limit: None,
            }
        }
        ["override", "delete", pattern, limit] => {
            refuse_flags(&[])?;
            Command::OverrideDelete {
                pattern: (*pattern).into(),
                limit: Some((*limit).into()),
            }
        }
        ["override", "prune"] => {
            refuse_flags(&[])?;
            Command::OverridePrune
        }
        ["get", tenant] => {
            refuse_flags(&[])?;
            Command::Get {
                tenant: (*tenant).into(),
            }
        }
        ["list"] => {
            refuse_flags(&[])?;
            Command::List
        }
        ["history"] => {
            refuse_flags(&["--tenant", "--count"])?;
            Command::History {
                tenant: tenant_filter.clone(),
                count,
            }
        }
        ["export"] => {
            refuse_flags(&[])?;
            Command::Export
        }
        ["import", path] => {
            refuse_flags(&[])?;
            Command::Import {
                path: (*path).into(),
            }
        }
        [] => return Err("no command given".into()),
        other => return Err(format!("unknown command '{}'", other.join(" "))),
    };
    if !cluster && redis.contains(',') {
        return Err(format!(
            "--redis '{redis}' names several servers: add --cluster if they are nodes of a cluster"
        ));
    }
    Ok(Some(Args {
        redis,
        cluster,
        who,
        dry_run,
        if_version,
        command,
    }))
}
