//! The docs book's command pages (`docs/reference/commands/`), replayed: every command of
//! `commands!` has a page with at least one `redis-cli` session, and each session runs, as
//! written, through the real `redis-cli` against a real server with the module (the debug
//! build with test hooks, as every integration suite loads it), its output compared line for
//! line. The server's wall clock is frozen (`tests/conformance/clock.rs`) at a whole second,
//! [`START_US`], at the start of each page, so the replies (retry and reset times included)
//! are what a reader sees on a fresh server at that instant; `$ sleep` moves that clock.
//! Each page starts from an empty server.
//!
//! `make docs` runs it: `cargo test --test docs --features redis-ratelimit/test-hooks`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    missing_docs
)]

#[allow(dead_code)]
#[path = "../conformance/clock.rs"]
mod clock;
mod examples;

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use clock::ClockedServer;
use examples::{Step, matches, sessions};
use redis_ratelimit_testkit::binaries::cli_binary;
use redis_ratelimit_wire::commands::Command;

/// The instant every page starts at: 2027-01-15T08:00:00Z, a whole second (so Redis 7.0's
/// milliseconds and 7.2's microseconds read alike) on a whole hour.
const START_US: i64 = 1_800_000_000_000_000;

fn pages_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/commands")
}

/// What went wrong on one page, for the one report at the end.
fn replay_page(server: &mut ClockedServer, page: &Path) -> Result<usize, Vec<String>> {
    let name = page
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(page)
        .display()
        .to_string();
    let text = std::fs::read_to_string(page).map_err(|error| vec![format!("{name}: {error}")])?;
    let sessions = sessions(&text).map_err(|why| vec![format!("{name}: {why}")])?;
    let mut con = server.server.conn();
    redis::cmd("FLUSHALL").exec(&mut con).expect("FLUSHALL");
    let mut now_us = START_US;
    server.set(now_us);
    let mut failures = Vec::new();
    let mut calls = 0;
    for step in sessions.iter().flatten() {
        match step {
            Step::Sleep { ms, .. } => {
                now_us += ms * 1000;
                server.set(now_us);
            }
            Step::Call {
                args,
                expected,
                line,
            } => {
                calls += 1;
                let output = Process::new(cli_binary())
                    .args(["--no-raw", "-p", &server.server.port.to_string()])
                    .args(args)
                    .output()
                    .expect("run redis-cli");
                let printed = String::from_utf8_lossy(&output.stdout);
                let actual: Vec<String> =
                    printed.lines().map(|l| l.trim_end().to_string()).collect();
                if !matches(expected, &actual) {
                    failures.push(format!(
                        "{name}:{line}: redis-cli {}\n  the page says:\n{}\n  redis-cli printed:\n{}{}",
                        args.join(" "),
                        indent(expected),
                        indent(&actual),
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
            }
        }
    }
    if calls == 0 {
        failures.push(format!(
            "{name}: no `$ redis-cli` example in a ```console block: a command's page shows it at work"
        ));
    }
    if failures.is_empty() {
        Ok(calls)
    } else {
        Err(failures)
    }
}

fn indent(lines: &[String]) -> String {
    lines.iter().map(|line| format!("    | {line}\n")).collect()
}

#[test]
fn every_command_page_replays_as_written() {
    let Some(mut server) = ClockedServer::start(&[]) else {
        panic!("the docs' examples need the frozen clock, which this server cannot run on (above)");
    };
    let mut failures = Vec::new();
    let mut calls = 0;
    let mut pages = 0;
    for command in Command::ALL.iter().copied() {
        let page = pages_dir().join(format!("{}.md", command.name().to_string_lossy()));
        if !page.exists() {
            failures.push(format!(
                "{}: no page for {} (make generate writes its first lines)",
                page.display(),
                command.name().to_string_lossy().to_ascii_uppercase()
            ));
            continue;
        }
        pages += 1;
        match replay_page(&mut server, &page) {
            Ok(count) => calls += count,
            Err(mut more) => failures.append(&mut more),
        }
    }
    println!("docs: {calls} redis-cli examples replayed on {pages} command pages");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
