//! Checks a kept soak run again: `chaos-check DIR` reads the run's settings, its main fleet's
//! decision logs and its faults' log (see `redis_ratelimit_chaos::run`), runs the checker over
//! them and prints its report. Exits 1 when a bound was broken, 2 when the run cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

use redis_ratelimit_chaos::checker::table;
use redis_ratelimit_chaos::run;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: chaos-check DIR (a kept soak run, as `make soak` prints)");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
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
