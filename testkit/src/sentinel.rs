//! Redis Sentinel processes on loopback monitoring a [`Server`] as `name`, each in its own
//! temporary directory (a sentinel rewrites its config file), killed on drop: one with
//! quorum 1 ([`Sentinel::start`]), or a group with a quorum ([`Sentinel::start_group`]), as
//! a deployment runs them.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::Value;

use crate::binaries::server_binary;
use crate::server::{Server, free_port, fresh_dir, wait_until};

/// A running sentinel.
pub struct Sentinel {
    child: Child,
    /// Its temporary directory, removed on drop.
    dir: std::path::PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The name it monitors the primary under.
    pub name: String,
}

impl Sentinel {
    /// Starts a sentinel monitoring `primary` as `name` (quorum 1) and waits until it names
    /// that primary.
    pub fn start(primary: &Server, name: &str) -> Sentinel {
        Sentinel::start_with_quorum(primary, name, 1)
    }

    /// Starts `count` sentinels monitoring `primary` as `name` with `quorum`, each waited for
    /// until it names that primary. They find each other through the hello messages they
    /// publish on the primary every 2 s, a few seconds after they start: wait for
    /// [`Sentinel::have_met`] before a failover (a quorum of sentinels that have not met
    /// agrees on nothing), not here, so that a run that starts its load at once need not.
    pub fn start_group(primary: &Server, name: &str, count: usize, quorum: usize) -> Vec<Sentinel> {
        assert!(
            (1..=count).contains(&quorum),
            "a quorum of {quorum} among {count} sentinels"
        );
        // All started before any is waited for: they come up side by side.
        let group: Vec<Sentinel> = (0..count)
            .map(|_| Sentinel::spawn(primary, name, quorum))
            .collect();
        for sentinel in &group {
            sentinel.wait_names(primary);
        }
        group
    }

    /// Whether every sentinel of `group` knows all the others (`SENTINEL SENTINELS`).
    pub fn have_met(group: &[Sentinel]) -> bool {
        let others = group.len().saturating_sub(1);
        group
            .iter()
            .all(|sentinel| sentinel.peers() == Some(others))
    }

    fn start_with_quorum(primary: &Server, name: &str, quorum: usize) -> Sentinel {
        let sentinel = Sentinel::spawn(primary, name, quorum);
        sentinel.wait_names(primary);
        sentinel
    }

    fn spawn(primary: &Server, name: &str, quorum: usize) -> Sentinel {
        let dir = fresh_dir();
        let port = free_port();
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile log\n\
                 sentinel monitor {name} 127.0.0.1 {} {quorum}\n",
                dir.display(),
                primary.port
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new(server_binary())
            .arg(&config)
            .arg("--sentinel")
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        Sentinel {
            child,
            dir,
            port,
            name: name.to_string(),
        }
    }

    /// Waits (at most 10 s) until it names `primary`.
    fn wait_names(&self, primary: &Server) {
        let names_it = wait_until(Duration::from_secs(10), || {
            self.primary_port() == Some(primary.port)
        });
        assert!(
            names_it,
            "the sentinel on port {} did not name the primary; log:\n{}",
            self.port,
            self.log()
        );
    }

    /// `redis+sentinel://127.0.0.1:PORT/NAME`.
    pub fn url(&self) -> String {
        format!("redis+sentinel://127.0.0.1:{}/{}", self.port, self.name)
    }

    /// A connection to the sentinel (connecting within 1 s), if it answers.
    pub fn conn(&self) -> Option<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
            .ok()
    }

    /// The port of the primary it names now (`SENTINEL get-master-addr-by-name`).
    pub fn primary_port(&self) -> Option<u16> {
        let address: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.name)
            .query(&mut self.conn()?)
            .ok()?;
        address.get(1)?.parse().ok()
    }

    /// How many replicas of the primary it knows (`SENTINEL REPLICAS`).
    pub fn replicas(&self) -> Option<usize> {
        self.count_of("REPLICAS")
    }

    /// How many other sentinels of the primary it knows (`SENTINEL SENTINELS`).
    pub fn peers(&self) -> Option<usize> {
        self.count_of("SENTINELS")
    }

    fn count_of(&self, what: &str) -> Option<usize> {
        redis::cmd("SENTINEL")
            .arg(what)
            .arg(&self.name)
            .query::<Vec<Value>>(&mut self.conn()?)
            .ok()
            .map(|entries| entries.len())
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
