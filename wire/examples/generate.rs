//! Writes the other languages' tables of kinds and commands from the Rust registries (core's
//! `kinds!`, this crate's `commands!` and parameter lists), and the golden command encodings
//! of [`redis_ratelimit_wire::encode`]:
//!
//! - `python/src/redis_ratelimit_client/_kinds.py`: the kinds and the commands, for the
//!   Python client;
//! - `node/lib/kinds.js`: the same tables for the Node.js client;
//! - `functions/ratelimit.lua`: the block between `-- BEGIN GENERATED: kinds` and
//!   `-- END GENERATED: kinds` (the Functions library's `NAMES`, `ALGORITHMS`,
//!   `PARAM_COUNT`), rewritten in place;
//! - `python/tests/vectors/encodings.json`: the exact command `wire::encode` writes for every
//!   kind alone and in groups, with every option, and for refunds, peeks and the regional
//!   commands; the Python tests replay them against `protocol.py`, the Node tests against
//!   `node/lib/protocol.js`.
//!
//! - `docs/reference/commands/<name>.md`: the block of each command's facts that opens its
//!   page in the docs book (`generate/command_pages.rs`).
//!
//! `make generate` runs it (`cargo run -p redis-ratelimit-wire --example generate -- ROOT`);
//! `make lint` runs it with `--check`, which writes nothing and fails naming every generated
//! file that differs from what it would write (stale: run `make generate`).

use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use redis_ratelimit_core::concurrency::ConcurrencyParams;
use redis_ratelimit_core::grant::Grant;
use redis_ratelimit_core::kinds::{Kind, Quota, or_list};
use redis_ratelimit_core::sliding_log::DEFAULT_MAX_LOG_ENTRIES;
use redis_ratelimit_wire::args::multi::MultiArgs;
use redis_ratelimit_wire::args::quota::{self, Param};
use redis_ratelimit_wire::args::regional::LeaseArgs;
use redis_ratelimit_wire::args::value::Settings;
use redis_ratelimit_wire::commands::{Command, Syntax};
use redis_ratelimit_wire::encode::{self, Args, EncodeError};

#[path = "generate/command_pages.rs"]
mod command_pages;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const PYTHON_KINDS: &str = "python/src/redis_ratelimit_client/_kinds.py";
const NODE_KINDS: &str = "node/lib/kinds.js";
const LUA_LIBRARY: &str = "functions/ratelimit.lua";
const ENCODINGS: &str = "python/tests/vectors/encodings.json";
const LUA_BEGIN: &str = "-- BEGIN GENERATED: kinds";
const LUA_END: &str = "-- END GENERATED: kinds";
const HOW: &str = "make generate (cargo run -p redis-ratelimit-wire --example generate), \
                   from core/src/kinds.rs (kinds!) and wire/src/commands.rs (commands!)";
const HOLDER: &str = "h-1";

/// What the generator knows of a kind beyond the registries: example parameters (as its
/// command takes them) for the golden encodings, and two rules the Rust client and the
/// policy store apply by kind. Exhaustive, so a new kind does not compile until it is here.
struct Facts {
    /// Parameter words of a few limits of the kind, as `wire::encode` writes them back.
    samples: &'static [&'static [&'static str]],
    /// Whether a limit of it can be paced (`MAXWAIT`; `client/src/config.rs`'s
    /// `max_wait_ms`).
    paced: bool,
    /// Whether a policy-store plan can hold a limit of it (`plans/src/spec.rs`).
    in_plans: bool,
}

fn facts(kind: Kind) -> Facts {
    match kind {
        Kind::TokenBucket => Facts {
            samples: &[&["10", "2"], &["5", "0.3"], &["1000", "16.666666667"]],
            paced: true,
            in_plans: true,
        },
        Kind::SlidingWindow => Facts {
            samples: &[&["100", "60.000000"], &["7", "1.500000"]],
            paced: false,
            in_plans: true,
        },
        Kind::FixedWindow => Facts {
            samples: &[&["100", "3600.000000"], &["3", "0.001000"]],
            paced: false,
            in_plans: true,
        },
        Kind::SlidingLog => Facts {
            samples: &[&["20", "0.250000"], &["5", "10.000000"]],
            paced: false,
            in_plans: true,
        },
        Kind::Gcra => Facts {
            samples: &[&["4", "10", "60"], &["0", "1", "1"]],
            paced: false,
            in_plans: true,
        },
        Kind::Concurrency => Facts {
            samples: &[&["3", "30000"], &["1", "1"]],
            paced: false,
            in_plans: false,
        },
    }
}

fn settings() -> Settings {
    Settings {
        max_log_entries: DEFAULT_MAX_LOG_ENTRIES,
        max_holders: 1000,
    }
}

/// The ALGORITHM word of a kind (`TOKENBUCKET`).
fn algorithm(kind: Kind) -> Result<&'static str> {
    kind.command_name().ok_or_else(|| {
        format!(
            "{} has no ALGORITHM name: RL.MULTI could not call it",
            kind.short_name()
        )
        .into()
    })
}

fn upper(command: Command) -> String {
    command.name().to_string_lossy().to_ascii_uppercase()
}

fn param_class(param: Param) -> (&'static str, &'static str) {
    match param {
        Param::Count(name) => ("count", name),
        Param::Rate(name) => ("rate", name),
        Param::Seconds(name) => ("seconds", name),
        Param::Integer(name) => ("integer", name),
        Param::WholeSeconds(name) => ("whole_seconds", name),
        Param::Millis(name) => ("millis", name),
    }
}

fn py_str(text: &str) -> String {
    format!("{text:?}")
}

fn py_opt(text: Option<&str>) -> String {
    text.map_or_else(|| "None".to_string(), py_str)
}

/// A kind as the generated ``Kind`` member (``Kind.TOKEN_BUCKET``).
fn py_kind(kind: Kind) -> String {
    format!("Kind.{}", kind.config_name().to_ascii_uppercase())
}

fn py_bool(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

fn python_kinds() -> Result<String> {
    let mut out = String::new();
    out.push_str(
        "# Generated by `make generate` (wire/examples/generate.rs) from core/src/kinds.rs (kinds!)\n\
         # and wire/src/commands.rs (commands!): do not edit. `make lint` fails while it is stale.\n",
    );
    out.push_str(
        r#""""The kinds of limiter and the module's commands, as the Rust registries declare them
(``core/src/kinds.rs``'s ``kinds!``, ``wire/src/commands.rs``'s ``commands!``).

A kind is named by its short name (``token``) everywhere in this package; the configuration
name (``token_bucket``) is what configuration files write, the ALGORITHM word
(``TOKENBUCKET``) what ``RL.MULTI``, ``RL.PEEK`` and ``RL.REFUND`` take, the library tag
(``tb``) what the Functions library stores.
"""

from __future__ import annotations

import enum
from typing import Final, NamedTuple


class Param(NamedTuple):
    """One parameter of a kind, in its command's order: its class (``count``, ``rate``,
    ``seconds``, ``integer``, ``whole_seconds``, ``millis``) and name (``wire/src/args/quota.rs``)."""

    cls: str
    name: str


class KindInfo(NamedTuple):
    """One kind of limiter."""

    #: The short name (``token``): the package's name of the kind, the policy store's.
    name: Kind
    #: The kind byte of the module's encoding.
    byte: int
    #: How errors name it (``a token bucket``).
    description: str
    #: The name configuration files give it (``token_bucket``).
    config_name: str
    #: The ALGORITHM word of ``RL.MULTI``/``RL.PEEK``/``RL.REFUND`` (``TOKENBUCKET``).
    algorithm: str | None
    #: Its own command (``RL.TOKENBUCKET``); ``None``: called through ``RL.MULTI``.
    command: str | None
    #: The tag the Functions library stores it under (``tb``).
    library_tag: str
    #: Its parameters, in its command's order.
    params: tuple[Param, ...]
    #: Whether a limit of it can be paced (``MAXWAIT``).
    paced: bool
    #: Whether a policy-store plan can hold a limit of it.
    in_plans: bool


class CommandInfo(NamedTuple):
    """One command of the module."""

    #: Uppercase, as clients write it (``RL.TOKENBUCKET``).
    name: str
    #: Redis's arity: the argument count with the name; negative means at least.
    arity: int
    flags: str
    #: The Functions library's function for it; ``None``: the module's only.
    function: str | None
    #: Whether its keys come counted (``numkeys key ...``).
    counts_keys: bool
    #: How many keys come first when they are not counted.
    leading_keys: int
    #: The kind it calls, for a kind's own command.
    kind: Kind | None


"#,
    );
    out.push_str(
        r#"class Kind(str, enum.Enum):
    """A kind of limiter, named by its short name. A ``str``: it equals, hashes and formats
    as that name (``Kind.TOKEN_BUCKET == "token"``, ``f"{Kind.TOKEN_BUCKET}" == "token"``),
    so text read from a configuration or the policy store compares with it as it is."""

"#,
    );
    for kind in Kind::ALL.iter().copied() {
        writeln!(
            out,
            "    {} = {}",
            kind.config_name().to_ascii_uppercase(),
            py_str(kind.short_name())
        )?;
    }
    out.push_str(
        r#"
    def __str__(self) -> str:
        # The short name on every Python (3.11 formats a str enum by its __str__).
        return str.__str__(self)


#: Each kind as a module constant, the same ``Kind`` member: what code comparing kinds on
#: every check reads (a global; ``Kind.<NAME>`` reads through the enum's class, about
#: 0.2 µs a read on Python 3.11).
"#,
    );
    for kind in Kind::ALL.iter().copied() {
        let name = kind.config_name().to_ascii_uppercase();
        writeln!(out, "{name}: Final = Kind.{name}")?;
    }
    out.push_str("\n\n");
    writeln!(out, "KINDS: tuple[KindInfo, ...] = (")?;
    for kind in Kind::ALL.iter().copied() {
        let facts = facts(kind);
        let params: Vec<String> = quota::params(kind)
            .iter()
            .map(|param| {
                let (class, name) = param_class(*param);
                format!("Param({}, {})", py_str(class), py_str(name))
            })
            .collect();
        let command = Command::calling(kind).map(upper);
        writeln!(out, "    KindInfo(")?;
        writeln!(out, "        name={},", py_kind(kind))?;
        writeln!(out, "        byte={},", kind as u8)?;
        writeln!(out, "        description={},", py_str(kind.describe()))?;
        writeln!(out, "        config_name={},", py_str(kind.config_name()))?;
        writeln!(out, "        algorithm={},", py_opt(kind.command_name()))?;
        writeln!(out, "        command={},", py_opt(command.as_deref()))?;
        writeln!(out, "        library_tag={},", py_str(kind.library_tag()))?;
        let params = match params.as_slice() {
            [one] => format!("({one},)"),
            many => format!("({})", many.join(", ")),
        };
        writeln!(out, "        params={params},")?;
        writeln!(out, "        paced={},", py_bool(facts.paced))?;
        writeln!(out, "        in_plans={},", py_bool(facts.in_plans))?;
        writeln!(out, "    ),")?;
    }
    writeln!(out, ")")?;
    out.push_str("#: The kinds by short name.\nBY_NAME: dict[str, KindInfo] = {kind.name: kind for kind in KINDS}\n");
    out.push_str(
        "#: The kinds by configuration name and by short name (its alias there).\n\
         BY_CONFIG_NAME: dict[str, KindInfo] = {\n    \
         **{kind.name: kind for kind in KINDS},\n    \
         **{kind.config_name: kind for kind in KINDS},\n}\n",
    );
    writeln!(out, "\nCOMMANDS: tuple[CommandInfo, ...] = (")?;
    for command in Command::ALL.iter().copied() {
        let kind = match command.syntax() {
            Syntax::Call(kind) => py_kind(kind),
            _ => "None".to_string(),
        };
        writeln!(
            out,
            "    CommandInfo({}, {}, {}, {}, {}, {}, {}),",
            py_str(&upper(command)),
            command.arity(),
            py_str(&command.flags().to_string_lossy()),
            py_opt(command.function()),
            py_bool(command.counts_keys()),
            command.leading_keys(),
            kind,
        )?;
    }
    writeln!(out, ")")?;
    out.push_str("#: The commands by uppercase name.\nCOMMANDS_BY_NAME: dict[str, CommandInfo] = {command.name: command for command in COMMANDS}\n");
    Ok(out)
}

fn js_opt(text: Option<&str>) -> String {
    text.map_or_else(|| "null".to_string(), json_str)
}

fn node_kinds() -> Result<String> {
    let mut out = String::new();
    out.push_str(
        "// Generated by `make generate` (wire/examples/generate.rs) from core/src/kinds.rs (kinds!)\n\
         // and wire/src/commands.rs (commands!): do not edit. `make lint` fails while it is stale.\n",
    );
    out.push_str(
        r#"'use strict';
/**
 * The kinds of limiter and the module's commands, as the Rust registries declare them
 * (core/src/kinds.rs's kinds!, wire/src/commands.rs's commands!).
 *
 * A kind is named by its short name (`token`) everywhere in this package; the configuration
 * name (`token_bucket`) is what configuration files write, the ALGORITHM word
 * (`TOKENBUCKET`) what RL.MULTI, RL.PEEK and RL.REFUND take, the library tag (`tb`) what
 * the Functions library stores.
 *
 * A kind: { name, byte, description, configName, algorithm, command, libraryTag, params,
 * paced, inPlans }; a parameter: { cls, name } (cls: count, rate, seconds, integer,
 * whole_seconds, millis; wire/src/args/quota.rs). A command: { name, arity, flags,
 * function, countsKeys, leadingKeys, kind } (function: the Functions library's, null for
 * the module's only; arity: Redis's, negative means at least).
 */

const freeze = Object.freeze;

"#,
    );
    writeln!(out, "const KINDS = freeze([")?;
    for kind in Kind::ALL.iter().copied() {
        let facts = facts(kind);
        let params: Vec<String> = quota::params(kind)
            .iter()
            .map(|param| {
                let (class, name) = param_class(*param);
                format!(
                    "freeze({{ cls: {}, name: {} }})",
                    json_str(class),
                    json_str(name)
                )
            })
            .collect();
        let command = Command::calling(kind).map(upper);
        writeln!(out, "  freeze({{")?;
        writeln!(out, "    name: {},", json_str(kind.short_name()))?;
        writeln!(out, "    byte: {},", kind as u8)?;
        writeln!(out, "    description: {},", json_str(kind.describe()))?;
        writeln!(out, "    configName: {},", json_str(kind.config_name()))?;
        writeln!(out, "    algorithm: {},", js_opt(kind.command_name()))?;
        writeln!(out, "    command: {},", js_opt(command.as_deref()))?;
        writeln!(out, "    libraryTag: {},", json_str(kind.library_tag()))?;
        writeln!(out, "    params: freeze([{}]),", params.join(", "))?;
        writeln!(out, "    paced: {},", facts.paced)?;
        writeln!(out, "    inPlans: {},", facts.in_plans)?;
        writeln!(out, "  }}),")?;
    }
    writeln!(out, "]);")?;
    out.push_str(
        "/** The kinds by short name. */\n\
         const BY_NAME = freeze(Object.fromEntries(KINDS.map((kind) => [kind.name, kind])));\n\
         /** The kinds by configuration name and by short name (its alias there). */\n\
         const BY_CONFIG_NAME = freeze(Object.fromEntries([\n  \
         ...KINDS.map((kind) => [kind.name, kind]),\n  \
         ...KINDS.map((kind) => [kind.configName, kind]),\n]));\n",
    );
    let mut names = Vec::new();
    for kind in Kind::ALL.iter().copied() {
        let constant = kind.config_name().to_ascii_uppercase();
        writeln!(out, "const {constant} = {};", json_str(kind.short_name()))?;
        names.push(constant);
    }
    writeln!(out, "\nconst COMMANDS = freeze([")?;
    for command in Command::ALL.iter().copied() {
        let kind = match command.syntax() {
            Syntax::Call(kind) => Some(kind.short_name()),
            _ => None,
        };
        writeln!(
            out,
            "  freeze({{ name: {}, arity: {}, flags: {}, function: {}, countsKeys: {}, leadingKeys: {}, kind: {} }}),",
            json_str(&upper(command)),
            command.arity(),
            json_str(&command.flags().to_string_lossy()),
            js_opt(command.function()),
            command.counts_keys(),
            command.leading_keys(),
            js_opt(kind),
        )?;
    }
    writeln!(out, "]);")?;
    out.push_str(
        "/** The commands by uppercase name. */\n\
         const COMMANDS_BY_NAME = freeze(Object.fromEntries(COMMANDS.map((command) => [command.name, command])));\n\n",
    );
    writeln!(
        out,
        "module.exports = {{\n  KINDS,\n  BY_NAME,\n  BY_CONFIG_NAME,\n  {},\n  COMMANDS,\n  COMMANDS_BY_NAME,\n}};",
        names.join(",\n  ")
    )?;
    Ok(out)
}

fn lua_block() -> Result<String> {
    let mut out = String::new();
    writeln!(out, "{LUA_BEGIN} (written by {HOW}; do not edit)")?;
    writeln!(
        out,
        "-- How errors name each kind, by the tag its keys are stored under."
    )?;
    writeln!(out, "local NAMES = {{")?;
    for kind in Kind::ALL.iter().copied() {
        writeln!(
            out,
            "  {} = '{}',",
            kind.library_tag(),
            kind.describe().replace('\'', "\\'")
        )?;
    }
    writeln!(out, "}}")?;
    writeln!(
        out,
        "-- The ALGORITHM words of RL.MULTI, RL.PEEK, RL.REFUND, RL.REGIONAL: their kinds' tags."
    )?;
    writeln!(out, "local ALGORITHMS = {{")?;
    for kind in Kind::ALL.iter().copied() {
        writeln!(out, "  {} = '{}',", algorithm(kind)?, kind.library_tag())?;
    }
    writeln!(out, "}}")?;
    let names: Vec<&str> = Kind::ALL
        .iter()
        .copied()
        .map(algorithm)
        .collect::<Result<_>>()?;
    writeln!(out, "local ALGORITHM_NAMES = '{}'", or_list(names))?;
    writeln!(
        out,
        "-- How many parameter arguments each kind takes, in its command and in RL.MULTI."
    )?;
    let counts: Vec<String> = Kind::ALL
        .iter()
        .copied()
        .map(|kind| format!("{} = {}", kind.library_tag(), quota::arity(kind)))
        .collect();
    writeln!(out, "local PARAM_COUNT = {{{}}}", counts.join(", "))?;
    write!(out, "{LUA_END}")?;
    Ok(out)
}

fn lua_library(current: &str) -> Result<String> {
    let start = current
        .find(LUA_BEGIN)
        .ok_or_else(|| format!("{LUA_LIBRARY}: no line starting {LUA_BEGIN:?}"))?;
    let end = current
        .find(LUA_END)
        .filter(|end| *end > start)
        .ok_or_else(|| format!("{LUA_LIBRARY}: no {LUA_END:?} after {LUA_BEGIN:?}"))?;
    let after = end.saturating_add(LUA_END.len());
    let (Some(before), Some(rest)) = (current.get(..start), current.get(after..)) else {
        return Err(format!("{LUA_LIBRARY}: the markers are not on character boundaries").into());
    };
    Ok(format!("{before}{}{rest}", lua_block()?))
}

// The golden encodings.

/// One limit of a case, as the caller writes it.
struct Limit {
    kind: Kind,
    params: &'static [&'static str],
    weight: u64,
    max_wait_ms: Option<u64>,
}

fn json_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_opt_u64(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_string(), |value| value.to_string())
}

fn json_words(args: &Args) -> String {
    let words: Vec<String> = args
        .iter()
        .map(|word| json_str(&String::from_utf8_lossy(word)))
        .collect();
    format!("[{}]", words.join(","))
}

/// The quota a limit describes, for one unit (with the holder of an in-flight limit).
fn quota_of(limit: &Limit, holder: Option<&str>) -> Result<Quota> {
    let words: Vec<&[u8]> = limit.params.iter().map(|word| word.as_bytes()).collect();
    let mut built = quota::quota(limit.kind, &words, settings())
        .map_err(|error| format!("{:?} {:?}: {error:?}", limit.kind, limit.params))?;
    if let (Quota::Concurrency(params), Some(holder)) = (&built, holder) {
        let with: ConcurrencyParams =
            (**params).with_holder(quota::holder(holder.as_bytes()).map_err(|e| format!("{e:?}"))?);
        built = Quota::Concurrency(with.into());
    }
    if let (Quota::TokenBucket(params), Some(ms)) = (&built, limit.max_wait_ms) {
        let paced = (*params)
            .with_max_wait_ns(ms.saturating_mul(1_000_000))
            .map_err(|e| format!("{e:?}"))?;
        built = Quota::TokenBucket(paced);
    }
    Ok(built)
}

fn limits_json(keys: &[String], limits: &[Limit]) -> String {
    let items: Vec<String> = keys
        .iter()
        .zip(limits)
        .map(|(key, limit)| {
            let params: Vec<String> = limit.params.iter().map(|word| json_str(word)).collect();
            format!(
                "{{\"key\":{},\"kind\":{},\"params\":[{}],\"weight\":{},\"max_wait_ms\":{}}}",
                json_str(key),
                json_str(limit.kind.short_name()),
                params.join(","),
                limit.weight,
                json_opt_u64(limit.max_wait_ms)
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

fn outcome_json(result: std::result::Result<Command, EncodeError>, args: &Args) -> String {
    match result {
        Ok(_) => format!("\"command\":{}", json_words(args)),
        Err(error) => format!("\"error\":{}", json_str(&format!("{error:?}"))),
    }
}

fn keys_for(limits: &[Limit]) -> Vec<String> {
    (0..limits.len())
        .map(|index| format!("k:{index}"))
        .collect()
}

/// A group acquire: `wire::encode::group`.
fn group_case(
    limits: &[Limit],
    cost: u64,
    partial_min: Option<u64>,
    holder: Option<&str>,
    has_multi: bool,
) -> Result<String> {
    let keys = keys_for(limits);
    let quotas = limits
        .iter()
        .map(|limit| quota_of(limit, holder))
        .collect::<Result<Vec<_>>>()?;
    let multi = MultiArgs {
        quotas,
        weights: limits.iter().map(|limit| limit.weight).collect(),
        cost,
        grant: partial_min.map_or(Grant::Whole, |min| Grant::Partial { min }),
    };
    let key_bytes: Vec<&[u8]> = keys.iter().map(|key| key.as_bytes()).collect();
    let mut args = Args::default();
    let result = encode::group(&key_bytes, &multi, has_multi, &mut args);
    Ok(format!(
        "{{\"op\":\"group\",\"multi\":{has_multi},\"limits\":{},\"cost\":{cost},\"partial_min\":{},\"holder\":{},{}}}",
        limits_json(&keys, limits),
        json_opt_u64(partial_min),
        holder.map_or_else(|| "null".to_string(), json_str),
        outcome_json(result, &args)
    ))
}

/// One limit's refund, peek or regional admission.
fn single_case(op: &str, limit: &Limit, cost: u64, holder: Option<&str>) -> Result<String> {
    let keys = vec!["k:0".to_string()];
    let units = cost.saturating_mul(limit.weight.max(1));
    let quota = quota_of(limit, holder)?.with_cost(units);
    let mut args = Args::default();
    let result = match op {
        "refund" => encode::refund(b"k:0", &quota, &mut args),
        "peek" => Ok(encode::peek(b"k:0", &quota, &mut args)),
        _ => encode::regional(b"k:0", b"k:0:lease", &quota, &mut args),
    };
    Ok(format!(
        "{{\"op\":{},\"limits\":{},\"cost\":{cost},\"holder\":{},{}}}",
        json_str(op),
        limits_json(&keys, std::slice::from_ref(limit)),
        holder.map_or_else(|| "null".to_string(), json_str),
        outcome_json(result, &args)
    ))
}

fn lease_case(units: u64, expires_at_ms: i64) -> String {
    let mut args = Args::default();
    let lease = LeaseArgs {
        units,
        expires_at_ms,
    };
    encode::region_lease(b"k:0:lease", &lease, &mut args);
    format!(
        "{{\"op\":\"region_lease\",\"key\":\"k:0:lease\",\"units\":{units},\"expires_at_ms\":{expires_at_ms},\"command\":{}}}",
        json_words(&args)
    )
}

fn limit(kind: Kind, params: &'static [&'static str], weight: u64) -> Limit {
    Limit {
        kind,
        params,
        weight,
        max_wait_ms: None,
    }
}

fn first_sample(kind: Kind) -> &'static [&'static str] {
    facts(kind).samples.first().copied().unwrap_or(&[])
}

fn encodings() -> Result<String> {
    let mut cases: Vec<String> = Vec::new();
    let holder_for = |kinds: &[Kind]| kinds.contains(&Kind::Concurrency).then_some(HOLDER);
    for kind in Kind::ALL.iter().copied() {
        let facts = facts(kind);
        let holder = holder_for(&[kind]);
        for params in facts.samples.iter().copied() {
            for has_multi in [true, false] {
                for (cost, weight) in [(1, 1), (3, 2)] {
                    let alone = [limit(kind, params, weight)];
                    cases.push(group_case(&alone, cost, None, holder, has_multi)?);
                    cases.push(group_case(&alone, cost, Some(2), holder, has_multi)?);
                }
            }
            for (cost, weight) in [(1, 1), (3, 2)] {
                for op in ["refund", "peek", "regional"] {
                    cases.push(single_case(op, &limit(kind, params, weight), cost, holder)?);
                }
            }
        }
        if kind == Kind::Concurrency {
            // Without the caller's holder id.
            let alone = [limit(kind, first_sample(kind), 1)];
            cases.push(group_case(&alone, 1, None, None, true)?);
            cases.push(single_case("refund", &alone[0], 1, None)?);
        }
        if facts.paced {
            for has_multi in [true, false] {
                let mut paced = limit(kind, first_sample(kind), 1);
                paced.max_wait_ms = Some(500);
                cases.push(group_case(&[paced], 2, None, holder, has_multi)?);
            }
            // A paced limit in a group.
            let mut paced = limit(kind, first_sample(kind), 1);
            paced.max_wait_ms = Some(250);
            let other = limit(Kind::FixedWindow, first_sample(Kind::FixedWindow), 1);
            cases.push(group_case(&[paced, other], 1, None, None, true)?);
        }
    }
    // Every pair of kinds, in both orders, with and without weights and partial grants.
    for first in Kind::ALL.iter().copied() {
        for second in Kind::ALL.iter().copied() {
            if first == second {
                continue;
            }
            let holder = holder_for(&[first, second]);
            for weights in [[1, 1], [1, 3]] {
                let pair = [
                    limit(first, first_sample(first), weights[0]),
                    limit(second, first_sample(second), weights[1]),
                ];
                cases.push(group_case(&pair, 2, None, holder, true)?);
                cases.push(group_case(&pair, 4, Some(1), holder, true)?);
            }
            let pair = [
                limit(first, first_sample(first), 1),
                limit(second, first_sample(second), 1),
            ];
            cases.push(group_case(&pair, 1, None, holder, false)?);
        }
    }
    // Two limits of one kind, and every kind together.
    for kind in Kind::ALL.iter().copied() {
        let holder = holder_for(&[kind]);
        let samples = facts(kind).samples;
        let pair: Vec<Limit> = samples
            .iter()
            .take(2)
            .map(|params| limit(kind, params, 1))
            .collect();
        cases.push(group_case(&pair, 1, None, holder, true)?);
    }
    let all: Vec<Limit> = Kind::ALL
        .iter()
        .copied()
        .zip(1..)
        .map(|(kind, weight)| limit(kind, first_sample(kind), weight))
        .collect();
    cases.push(group_case(&all, 1, None, Some(HOLDER), true)?);
    cases.push(group_case(&all, 5, Some(3), Some(HOLDER), true)?);
    cases.push(group_case(&[], 1, None, None, true)?);
    cases.push(lease_case(25, 1_767_225_600_000));
    cases.push(lease_case(0, 1_767_225_600_000));

    let mut out = String::new();
    writeln!(out, "{{")?;
    writeln!(
        out,
        "\"generated_by\":{},",
        json_str(&format!("{HOW}: do not edit"))
    )?;
    writeln!(out, "\"cases\":[")?;
    let count = cases.len();
    for (index, case) in cases.into_iter().enumerate() {
        let comma = if index.saturating_add(1) < count {
            ","
        } else {
            ""
        };
        writeln!(out, "{case}{comma}")?;
    }
    writeln!(out, "]}}")?;
    Ok(out)
}

fn run() -> Result<bool> {
    let mut check = false;
    let mut root: Option<PathBuf> = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            other if root.is_none() && !other.starts_with('-') => root = Some(other.into()),
            other => {
                return Err(format!("usage: generate [--check] [ROOT] (got {other:?})").into());
            }
        }
    }
    let root = root.unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let lua_path = root.join(LUA_LIBRARY);
    let lua_now = std::fs::read_to_string(&lua_path)
        .map_err(|error| format!("{}: {error}", lua_path.display()))?;
    let mut files = vec![
        (PYTHON_KINDS.to_string(), python_kinds()?),
        (NODE_KINDS.to_string(), node_kinds()?),
        (LUA_LIBRARY.to_string(), lua_library(&lua_now)?),
        (ENCODINGS.to_string(), encodings()?),
    ];
    for command in Command::ALL.iter().copied() {
        let relative = command_pages::page_path(command);
        let current = std::fs::read_to_string(root.join(&relative)).ok();
        let block = command_pages::block(command, |kind| facts(kind).paced)?;
        files.push((
            relative,
            command_pages::page(command, current.as_deref(), &block)?,
        ));
    }
    let mut fresh = true;
    for orphan in command_pages::orphans(&root)? {
        eprintln!("{orphan}: a page of no command in wire/src/commands.rs (delete or rename it)");
        fresh = false;
    }
    for (relative, wanted) in files {
        let path = root.join(&relative);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(wanted.as_str()) {
            continue;
        }
        if check {
            eprintln!("stale generated file: {relative} (run `make generate`)");
            fresh = false;
        } else {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, wanted)
                .map_err(|error| format!("{}: {error}", path.display()))?;
            println!("wrote {relative}");
        }
    }
    Ok(fresh)
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(error) => {
            eprintln!("generate: {error}");
            std::process::ExitCode::from(2)
        }
    }
}
