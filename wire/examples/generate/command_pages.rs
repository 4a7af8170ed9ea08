//! The docs book's command pages (`docs/reference/commands/<name>.md`): one per command of
//! `commands!`, each opening with a block of the facts the registry holds (syntax, arity,
//! flags, the Functions library's form, its `INFO` fields and keyspace event), rewritten in
//! place between [`BEGIN`] and [`END`]. A command without a page gets one holding only that
//! block, which `make docs` then refuses until someone writes it (it has no replayed
//! example); a page whose command is gone is refused here, naming it.
//!
//! Included by `generate.rs` (this directory has no `main.rs`, so cargo does not take it for
//! an example of its own).

use std::fmt::Write as _;
use std::path::Path;

use redis_ratelimit_core::kinds::Kind;
use redis_ratelimit_wire::args::quota::{self, Param};
use redis_ratelimit_wire::commands::{Command, Syntax};

use super::Result;

/// Where the pages are, from the repository's root.
pub const DIR: &str = "docs/reference/commands";
/// The first line of the generated block (the rest of the line says who writes it).
pub const BEGIN: &str = "<!-- BEGIN GENERATED: command";
/// The last line of the generated block.
pub const END: &str = "<!-- END GENERATED: command -->";

/// A command's page, relative to the repository's root.
pub fn page_path(command: Command) -> String {
    format!("{DIR}/{}.md", command.name().to_string_lossy())
}

fn upper(command: Command) -> String {
    command.name().to_string_lossy().to_ascii_uppercase()
}

fn param_name(param: Param) -> &'static str {
    match param {
        Param::Count(name)
        | Param::Rate(name)
        | Param::Seconds(name)
        | Param::Integer(name)
        | Param::WholeSeconds(name)
        | Param::Millis(name) => name,
    }
}

fn params(kind: Kind) -> String {
    let names: Vec<&str> = quota::params(kind)
        .iter()
        .copied()
        .map(param_name)
        .collect();
    names.join(" ")
}

/// The arguments after the name, as the command's syntax lays them out; `paced` says
/// whether a kind's own command takes `MAXWAIT`.
fn arguments(syntax: Syntax, paced: impl Fn(Kind) -> bool) -> Result<String> {
    const PARTIAL: &str = "[PARTIAL [MIN m]]";
    Ok(match syntax {
        Syntax::Call(kind) if paced(kind) => {
            format!("key {} [cost] [PARTIAL [MIN m] | MAXWAIT ms]", params(kind))
        }
        Syntax::Call(kind) => format!("key {} [cost] {PARTIAL}", params(kind)),
        Syntax::Throttle => format!("key {} [quantity]", params(Kind::Gcra)),
        Syntax::Multi => format!(
            "numkeys key [key ...] limit [limit ...] [COST c] [WEIGHTS w ...] [HOLDER id] {PARTIAL}"
        ),
        Syntax::Acquire => match quota::params(Kind::Concurrency) {
            [limit, ttl] => format!("key {} holder {}", param_name(*limit), param_name(*ttl)),
            other => {
                return Err(format!(
                    "an in-flight limit takes {} parameters; RL.ACQUIRE's syntax here knows two",
                    other.len()
                )
                .into());
            }
        },
        Syntax::Release => "key holder".into(),
        Syntax::Peek => format!("key ALGORITHM parameters... [cost] {PARTIAL}"),
        Syntax::Refund => "key ALGORITHM parameters... [cost]".into(),
        Syntax::Effects => "key effect [key effect ...]".into(),
        Syntax::Regional => "floor_key lease_key ALGORITHM parameters... [cost]".into(),
        Syntax::RegionLease => "key units expires_at_ms".into(),
    })
}

/// Every `ALGORITHM parameters...` a limit may be written as (`RL.MULTI`, `RL.PEEK`, ...).
fn algorithms() -> Result<String> {
    let forms: Vec<String> = Kind::ALL
        .iter()
        .copied()
        .map(|kind| {
            let word = kind
                .command_name()
                .ok_or_else(|| format!("{} has no ALGORITHM word", kind.short_name()))?;
            Ok(format!("`{word} {}`", params(kind)))
        })
        .collect::<Result<_>>()?;
    Ok(forms.join(", "))
}

fn arity(command: Command) -> String {
    let arity = command.arity();
    let arguments = arity.unsigned_abs().saturating_sub(1);
    if arity < 0 {
        format!("{arity}: the name and at least {arguments} arguments")
    } else {
        format!("{arity}: the name and {arguments} arguments")
    }
}

/// The `FCALL` form of the command, if the Functions library has it.
fn function_form(command: Command, arguments: &str) -> String {
    let Some(function) = command.function() else {
        return "none: the module's only".into();
    };
    if command.counts_keys() {
        // FCALL's own numkeys is the command's.
        return format!("`FCALL {function} {arguments}`");
    }
    format!("`FCALL {function} {} {arguments}`", command.leading_keys())
}

/// The generated block of `command`'s page, `BEGIN` to `END` lines included.
pub fn block(command: Command, paced: impl Fn(Kind) -> bool) -> Result<String> {
    let arguments = arguments(command.syntax(), paced)?;
    let mut out = String::new();
    writeln!(
        out,
        "{BEGIN} (written by make generate from wire/src/commands.rs; do not edit) -->"
    )?;
    writeln!(out)?;
    writeln!(out, "- **Syntax:** `{} {}`", upper(command), arguments)?;
    if matches!(
        command.syntax(),
        Syntax::Multi | Syntax::Peek | Syntax::Refund | Syntax::Regional
    ) {
        writeln!(out, "- **ALGORITHM parameters:** {}", algorithms()?)?;
    }
    writeln!(out, "- **Arity:** {}", arity(command))?;
    writeln!(out, "- **Flags:** `{}`", command.flags().to_string_lossy())?;
    writeln!(
        out,
        "- **Without the module:** {}",
        function_form(command, &arguments)
    )?;
    if command.counted() {
        let stats = command.stats_name();
        writeln!(
            out,
            "- **`INFO ratelimit`:** `ratelimit_{stats}_admitted`, `ratelimit_{stats}_denied`"
        )?;
    }
    if let Some(event) = command.event() {
        writeln!(
            out,
            "- **Keyspace event of its writes:** `{}`",
            event.to_string_lossy()
        )?;
    }
    writeln!(out)?;
    write!(out, "{END}")?;
    Ok(out)
}

/// `current` (a page's text, if it exists) with its generated block replaced by `block`;
/// a page that does not exist is the command's name as its title and the block.
pub fn page(command: Command, current: Option<&str>, block: &str) -> Result<String> {
    let Some(current) = current else {
        return Ok(format!("# {}\n\n{block}\n", upper(command)));
    };
    let path = page_path(command);
    let start = current
        .find(BEGIN)
        .ok_or_else(|| format!("{path}: no line starting {BEGIN:?}"))?;
    let end = current
        .find(END)
        .ok_or_else(|| format!("{path}: no line {END:?}"))?;
    if end < start {
        return Err(format!("{path}: {END:?} comes before {BEGIN:?}").into());
    }
    let (before, rest) = current.split_at(start);
    let after = rest
        .get(end.saturating_sub(start).saturating_add(END.len())..)
        .unwrap_or("");
    Ok(format!("{before}{block}{after}"))
}

/// The pages in [`DIR`] that no command has.
pub fn orphans(root: &Path) -> Result<Vec<String>> {
    let wanted: Vec<String> = Command::ALL.iter().copied().map(page_path).collect();
    let mut orphans = Vec::new();
    let dir = root.join(DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(orphans);
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let relative = format!("{DIR}/{name}");
        if name.ends_with(".md") && !wanted.contains(&relative) {
            orphans.push(relative);
        }
    }
    orphans.sort();
    Ok(orphans)
}
