//! Checks a kept soak run again: `chaos-check DIR` reads the run's settings, its main fleet's
//! decision logs and its faults' log (see `redis_ratelimit_chaos::run`), runs the checker over
//! them and prints its report. Exits 1 when a bound was broken, 2 when the run cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use redis_ratelimit_chaos::checker::table;
use redis_ratelimit_chaos::run;

/// The flags as clap reads them.
#[derive(Debug, Parser)]
#[command(
    name = "chaos-check",
    about = "Checks a kept soak run again and prints the checker's report; exits 1 when a \
             bound was broken, 2 when the run cannot be read"
)]
struct Flags {
    /// A kept soak run, as `make soak` prints
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

fn main() -> ExitCode {
    // --help prints to stdout (exit 0), a bad flag to stderr (exit 2).
    let dir = Flags::parse().dir;
    match run::recheck(&dir) {
        Err(error) => {
            eprintln!("chaos-check: {error}");
            ExitCode::from(2)
        }
        Ok((config, faults, report)) => {
            println!(
                "{}: {} s, seed {}, load {}, planted: {}\n",
                dir.display(),
                config.seconds,
                config.seed,
                config.load.name(),
                config.plant.map_or("none", |plant| plant.what())
            );
            println!("{}", table::markdown(&report, &faults));
            if report.violations.is_empty() {
                println!("every bound held");
                ExitCode::SUCCESS
            } else {
                println!(
                    "{} violations, naming {:?}",
                    report.violations.len(),
                    report.limiters_named()
                );
                ExitCode::from(1)
            }
        }
    }
}
