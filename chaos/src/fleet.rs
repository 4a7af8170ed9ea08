//! The client fleet: `chaos-load` processes started together, each writing its decision
//! log into the fleet's directory, killed on drop if still running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::record::{DecisionRecord, read_lines};

/// Running client processes and their logs.
pub struct Fleet {
    children: Vec<(u32, Child)>,
    logs: Vec<PathBuf>,
}

impl Fleet {
    /// Starts `clients` processes of `binary`, each with `args` plus its `--client`,
    /// `--log` (in `dir`) and `--duration-ms`.
    pub fn start(
        binary: &str,
        args: &[String],
        clients: u32,
        duration: Duration,
        dir: &Path,
    ) -> Fleet {
        let mut fleet = Fleet {
            children: Vec::new(),
            logs: Vec::new(),
        };
        for client in 0..clients {
            let log = dir.join(format!("client-{client}.log"));
            let child = Command::new(binary)
                .args(args)
                .arg("--client")
                .arg(client.to_string())
                .arg("--log")
                .arg(&log)
                .arg("--duration-ms")
                .arg(duration.as_millis().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap_or_else(|error| panic!("cannot start {binary}: {error}"));
            fleet.children.push((client, child));
            fleet.logs.push(log);
        }
        fleet
    }

    /// Waits (at most `timeout`) for every process to finish, checks each succeeded, and
    /// reads every decision they logged.
    pub fn finish(mut self, timeout: Duration) -> Vec<DecisionRecord> {
        let deadline = Instant::now() + timeout;
        for (client, child) in &mut self.children {
            let status = loop {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    break status;
                }
                assert!(
                    Instant::now() < deadline,
                    "client {client} did not finish within {timeout:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            };
            assert!(status.success(), "client {client} failed: {status}");
        }
        self.children.clear();
        self.logs.iter().flat_map(|log| read_log(log)).collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every decision of one client's log; a line that does not parse fails the test.
pub fn read_log(path: &Path) -> Vec<DecisionRecord> {
    read_lines(path, DecisionRecord::parse).unwrap_or_else(|error| panic!("{error}"))
}

/// A directory of this run under the system's temporary directory, removed on drop unless
/// the thread is panicking or `RL_CHAOS_KEEP_LOGS` is set (its logs are then kept for
/// diagnosis, and their path printed).
pub struct RunDir {
    pub path: PathBuf,
}

impl RunDir {
    pub fn create(what: &str) -> RunDir {
        let path = std::env::temp_dir().join(format!(
            "rl-chaos-{what}-{}",
            redis_ratelimit_testkit::docker::run_id()
        ));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        RunDir { path }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("RL_CHAOS_KEEP_LOGS").is_some() {
            eprintln!("logs of the run kept in {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
