//! A run's directory, named by its seed: every client's decision log (`main/`, and the
//! `warm-up/` and `last-round/` fleets' apart), the faults' log, the settings the checker
//! needs (`run.conf`) and the report. It is kept after the run, pass or fail, so that
//! `make soak-check DIR=<dir>` (the `chaos-check` binary) checks the same logs again.

use std::path::{Path, PathBuf};

use crate::catalogue;
use crate::checker::{self, Report, Settings};
use crate::load::Mix;
use crate::plant::Plant;
use crate::record::{DecisionRecord, FaultRecord, read_lines};

/// The main fleet's logs, checked.
pub const MAIN: &str = "main";
/// The warm-up's and the last round's, apart.
pub const WARM_UP: &str = "warm-up";
pub const LAST_ROUND: &str = "last-round";
pub const FAULTS: &str = "faults.log";
pub const CONFIG: &str = "run.conf";
pub const REPORT: &str = "report.md";

/// What a run was: enough to check its logs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunConfig {
    pub seed: u64,
    pub seconds: u64,
    pub settings: Settings,
    pub plant: Option<Plant>,
    pub load: Mix,
}

impl RunConfig {
    fn text(&self) -> String {
        format!(
            "seed={}\nseconds={}\nnode_timeout_ms={}\nclients={}\ntimeout_ms={}\nmargin_ms={}\n\
             plant={}\nload={}\n",
            self.seed,
            self.seconds,
            self.settings.node_timeout_ms,
            self.settings.clients,
            self.settings.timeout_ms,
            self.settings.margin_ms,
            self.plant.map_or("none", Plant::name),
            self.load.name()
        )
    }

    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(CONFIG);
        std::fs::write(&path, self.text()).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn read(dir: &Path) -> Result<RunConfig, String> {
        let path = dir.join(CONFIG);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let field = |name: &str| -> Result<&str, String> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| format!("{}: no {name}=", path.display()))
        };
        let number = |name: &str| -> Result<u64, String> {
            let value = field(name)?;
            value
                .parse()
                .map_err(|_| format!("{}: {name}={value} is not a number", path.display()))
        };
        let plant = match field("plant")? {
            "none" => None,
            name => Some(Plant::parse(name)?),
        };
        Ok(RunConfig {
            seed: number("seed")?,
            seconds: number("seconds")?,
            settings: Settings {
                node_timeout_ms: number("node_timeout_ms")?,
                clients: number("clients")?,
                timeout_ms: number("timeout_ms")?,
                margin_ms: number("margin_ms")?,
            },
            plant,
            load: Mix::parse(field("load")?)?,
        })
    }
}

/// Where kept runs go: `$RL_SOAK_RUNS`, or the workspace's `target/soak-runs`.
pub fn runs_root() -> PathBuf {
    std::env::var_os("RL_SOAK_RUNS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/soak-runs"),
        PathBuf::from,
    )
}

/// A fresh directory for a run of `what` with `seed` (and `plant`): `<what>-seed-<seed>` or
/// `<what>-seed-<seed>-<plant>` under [`runs_root`], emptied if a run of the same seed left
/// one, with its three fleets' subdirectories.
pub fn fresh_dir(what: &str, seed: u64, plant: Option<Plant>) -> Result<PathBuf, String> {
    let name = match plant {
        None => format!("{what}-seed-{seed}"),
        Some(plant) => format!("{what}-seed-{seed}-{}", plant.name()),
    };
    let dir = runs_root().join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    for sub in [MAIN, WARM_UP, LAST_ROUND] {
        let path = dir.join(sub);
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(dir)
}

/// Every decision of every `client-*.log` in `dir`.
pub fn read_decisions(dir: &Path) -> Result<Vec<DecisionRecord>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut logs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("client-") && name.ends_with(".log"))
        })
        .collect();
    logs.sort();
    if logs.is_empty() {
        return Err(format!("{}: no client-*.log", dir.display()));
    }
    let mut all = Vec::new();
    for log in logs {
        all.extend(read_lines(&log, DecisionRecord::parse)?);
    }
    Ok(all)
}

/// Writes the faults' log of a run.
pub fn write_faults(dir: &Path, faults: &[FaultRecord]) -> Result<(), String> {
    let path = dir.join(FAULTS);
    let text: String = faults.iter().map(|f| f.line() + "\n").collect();
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A kept run checked again: its settings, faults and the checker's report.
pub fn recheck(dir: &Path) -> Result<(RunConfig, Vec<FaultRecord>, Report), String> {
    let config = RunConfig::read(dir)?;
    let decisions = read_decisions(&dir.join(MAIN))?;
    let faults = read_lines(&dir.join(FAULTS), FaultRecord::parse)?;
    let report = checker::check(&catalogue::limiters(), &decisions, &faults, config.settings);
    Ok((config, faults, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_reads_back() {
        let dir = std::env::temp_dir().join(format!("rl-chaos-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = RunConfig {
            seed: 12,
            seconds: 60,
            settings: Settings {
                node_timeout_ms: 2000,
                clients: 3,
                timeout_ms: 250,
                margin_ms: 3000,
            },
            plant: Some(Plant::BucketFast),
            load: Mix::Seeded,
        };
        config.write(&dir).unwrap();
        assert_eq!(RunConfig::read(&dir), Ok(config));
        std::fs::write(dir.join(CONFIG), "seed=x\n").unwrap();
        assert!(RunConfig::read(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
