//! One Redis Sentinel process on loopback monitoring a [`Server`] as `name`, in its own
//! temporary directory (a sentinel rewrites its config file), killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
        let dir = fresh_dir();
        let port = free_port();
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile log\n\
                 sentinel monitor {name} 127.0.0.1 {} 1\n",
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
        let sentinel = Sentinel {
            child,
            dir: dir.clone(),
            port,
            name: name.to_string(),
        };
        let wanted = primary.port.to_string();
        let names_it = wait_until(Duration::from_secs(10), || {
            redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|client| client.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut con| {
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(name)
                        .query::<Vec<String>>(&mut con)
                })
                .is_ok_and(|address| address.get(1) == Some(&wanted))
        });
        assert!(
            names_it,
            "the sentinel on port {port} did not name the primary; log:\n{}",
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
        sentinel
    }

    /// `redis+sentinel://127.0.0.1:PORT/NAME`.
    pub fn url(&self) -> String {
        format!("redis+sentinel://127.0.0.1:{}/{}", self.port, self.name)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
