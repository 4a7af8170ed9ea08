//! Containers of the module's image on private networks: hosts with their own addresses
//! that can be killed, restarted and cut off the network, which loopback processes cannot
//! give.
//!
//! Every container, network and volume a test creates is named after this process's
//! [`run_id`] and labelled with it ([`RUN_LABEL`]), so runs from other work trees on the same
//! engine never collide; each is owned by a guard that removes it on drop, even when the
//! test panics. Nothing a test did not create is ever touched. Every `docker` command is
//! bounded by a timeout.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::server::wait_until;

/// The label every object this process creates carries, with the [`run_id`] as its value.
pub const RUN_LABEL: &str = "redis-ratelimit.test-run";

/// The port Redis listens on inside the image.
pub const REDIS_PORT: u16 = 6379;

/// How long one `docker` command may take before it is killed and counted as failed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The config file the image starts Redis with.
const CONFIG_FILE: &str = "/etc/redis/redis-ratelimit.conf";

/// This process's run id (`<pid>-<ms>`): part of every name it creates.
pub fn run_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() % 100_000_000);
        format!("{}-{ms}", std::process::id())
    })
}

/// A name unique to this run: `rl-<run id>-<what>-<n>`.
fn unique_name(what: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    format!(
        "rl-{}-{what}-{}",
        run_id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `docker args...` within `timeout`; stdout (trimmed) on success, otherwise what went
/// wrong with stderr.
pub fn docker_within(args: &[&str], timeout: Duration) -> Result<String, String> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot run docker: {error}"))?;
    // Read both pipes on threads so a chatty command cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    match status {
        Some(status) if status.success() => Ok(out.trim().to_string()),
        Some(status) => Err(format!(
            "docker {}: {status}: {}",
            args.join(" "),
            err.trim()
        )),
        None => Err(format!(
            "docker {}: no answer in {timeout:?}",
            args.join(" ")
        )),
    }
}

/// Runs `docker args...` (bounded) and panics with its error if it fails.
pub fn docker(args: &[&str]) -> String {
    docker_within(args, COMMAND_TIMEOUT).unwrap_or_else(|error| panic!("{error}"))
}

/// Whether a Docker engine answers: its version, or why not (no client, no daemon, no
/// answer within 20 s).
pub fn engine() -> Result<String, String> {
    docker_within(
        &["info", "--format", "{{.ServerVersion}}"],
        Duration::from_secs(20),
    )
    .and_then(|version| {
        if version.is_empty() {
            Err("docker info gave no server version".into())
        } else {
            Ok(version)
        }
    })
}

/// Whether `image` is present on the engine.
pub fn image_exists(image: &str) -> bool {
    docker_within(
        &["image", "inspect", "--format", "{{.Id}}", image],
        COMMAND_TIMEOUT,
    )
    .is_ok()
}

/// A bridge network of this run, removed on drop.
pub struct Network {
    pub name: String,
}

impl Network {
    /// A network with an address range Docker picks.
    pub fn create(what: &str) -> Network {
        let name = unique_name(what);
        docker(&["network", "create", "--label", &label(), &name]);
        Network { name }
    }

    /// A network on a subnet of its own (so a container can be reconnected with the same
    /// address): the first free `10.<a>.<b>.0/24` after one derived from the process id.
    pub fn create_with_subnet(what: &str) -> (Network, String) {
        let name = unique_name(what);
        let mut last_error = String::new();
        for attempt in 0..50 {
            let seed = (std::process::id() as usize + attempt * 7919) % (200 * 250);
            let prefix = format!("10.{}.{}", 20 + seed / 250, seed % 250);
            let subnet = format!("{prefix}.0/24");
            match docker_within(
                &[
                    "network",
                    "create",
                    "--label",
                    &label(),
                    "--subnet",
                    &subnet,
                    &name,
                ],
                COMMAND_TIMEOUT,
            ) {
                Ok(_) => return (Network { name }, prefix),
                Err(error) => last_error = error,
            }
        }
        panic!("no free subnet for network {name}: {last_error}")
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Containers of this run still attached (a test that panicked before dropping
        // them) go first: a network with endpoints cannot be removed.
        if let Ok(ids) = docker_within(
            &[
                "ps",
                "-aq",
                "--filter",
                &format!("label={}", label()),
                "--filter",
                &format!("network={}", self.name),
            ],
            COMMAND_TIMEOUT,
        ) {
            for id in ids.split_whitespace() {
                let _ = docker_within(&["rm", "-f", "-v", id], COMMAND_TIMEOUT);
            }
        }
        if let Err(error) = docker_within(&["network", "rm", &self.name], COMMAND_TIMEOUT) {
            eprintln!("could not remove network {}: {error}", self.name);
        }
    }
}

/// A named volume of this run, removed on drop (after the containers using it).
pub struct Volume {
    pub name: String,
}

impl Volume {
    pub fn create(what: &str) -> Volume {
        let name = unique_name(what);
        docker(&["volume", "create", "--label", &label(), &name]);
        Volume { name }
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        if let Err(error) = docker_within(&["volume", "rm", "-f", &self.name], COMMAND_TIMEOUT) {
            eprintln!("could not remove volume {}: {error}", self.name);
        }
    }
}

fn label() -> String {
    format!("{RUN_LABEL}={}", run_id())
}

/// How to start a container of the image: `redis-server <config file> <server_args>`.
pub struct Spec<'a> {
    pub image: &'a str,
    /// A word for the container's name (`rl-<run>-<role>-<n>`).
    pub role: &'a str,
    pub network: &'a Network,
    /// A fixed address on `network` (it must have been created with a subnet).
    pub ip: Option<String>,
    /// A volume mounted on `/data`.
    pub volume: Option<&'a Volume>,
    /// Arguments after the config file (they override it).
    pub server_args: Vec<String>,
    /// The user to run as (`docker run --user`), instead of the image's.
    pub user: Option<String>,
    /// Files (path in the container, contents) copied in before it starts.
    pub files: Vec<(String, String)>,
    /// The whole command, instead of `redis-server <config file> <server_args>`.
    pub command: Option<Vec<String>>,
}

impl<'a> Spec<'a> {
    pub fn new(image: &'a str, role: &'a str, network: &'a Network) -> Spec<'a> {
        Spec {
            image,
            role,
            network,
            ip: None,
            volume: None,
            server_args: Vec::new(),
            user: None,
            files: Vec::new(),
            command: None,
        }
    }

    /// Runs as `user` (`root` for a program that must write a file copied in).
    pub fn user(mut self, user: &str) -> Spec<'a> {
        self.user = Some(user.to_string());
        self
    }

    /// Copies a file with `contents` to `path` in the container before it starts.
    pub fn file(mut self, path: &str, contents: &str) -> Spec<'a> {
        self.files.push((path.to_string(), contents.to_string()));
        self
    }

    /// Runs `command` instead of `redis-server <config file> <server_args>` (for example
    /// `redis-server /data/sentinel.conf --sentinel`).
    pub fn command(mut self, command: &[&str]) -> Spec<'a> {
        self.command = Some(command.iter().map(|s| s.to_string()).collect());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Spec<'a> {
        self.server_args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    pub fn volume(mut self, volume: &'a Volume) -> Spec<'a> {
        self.volume = Some(volume);
        self
    }

    pub fn ip(mut self, ip: String) -> Spec<'a> {
        self.ip = Some(ip);
        self
    }

    /// Starts the container and waits until Redis answers at its address.
    pub fn start(self) -> Container {
        let name = unique_name(self.role);
        let mount = self.volume.map(|v| format!("{}:/data", v.name));
        let run_label = label();
        // With files to copy in: create, copy, then start.
        let mut args = vec![
            if self.files.is_empty() {
                "run"
            } else {
                "create"
            },
            "--name",
            &name,
            "--label",
            &run_label,
            "--network",
            &self.network.name,
        ];
        if let Some(ip) = &self.ip {
            args.extend(["--ip", ip]);
        }
        if let Some(mount) = &mount {
            args.extend(["-v", mount]);
        }
        if let Some(user) = &self.user {
            args.extend(["--user", user]);
        }
        if self.files.is_empty() {
            args.push("-d");
        }
        args.push(self.image);
        match &self.command {
            Some(command) => args.extend(command.iter().map(String::as_str)),
            None => {
                args.extend(["redis-server", CONFIG_FILE]);
                args.extend(self.server_args.iter().map(String::as_str));
            }
        }
        docker(&args);
        // The guard first: a failed copy or start still removes the container.
        let container = Container {
            name: name.clone(),
            network: self.network.name.clone(),
        };
        for (index, (path, contents)) in self.files.iter().enumerate() {
            let local = std::env::temp_dir().join(format!("{name}-file-{index}"));
            std::fs::write(&local, contents)
                .unwrap_or_else(|error| panic!("{}: {error}", local.display()));
            let copied = docker_within(
                &["cp", &local.to_string_lossy(), &format!("{name}:{path}")],
                COMMAND_TIMEOUT,
            );
            let _ = std::fs::remove_file(&local);
            copied.unwrap_or_else(|error| panic!("{error}"));
        }
        if !self.files.is_empty() {
            docker(&["start", &name]);
        }
        container.wait_ready();
        container
    }
}

/// A running container of this run, removed (with its anonymous volumes) on drop.
pub struct Container {
    pub name: String,
    /// The network whose address [`Container::ip`] gives.
    network: String,
}

impl Container {
    /// Its address on its network.
    pub fn ip(&self) -> String {
        address_on(&self.name, &self.network).unwrap_or_else(|error| panic!("{error}"))
    }

    /// Its address on another network it was connected to.
    pub fn ip_on(&self, network: &Network) -> String {
        address_on(&self.name, &network.name).unwrap_or_else(|error| panic!("{error}"))
    }

    /// `redis://<ip>:6379/` on its network.
    pub fn url(&self) -> String {
        format!("redis://{}:{REDIS_PORT}/", self.ip())
    }

    /// A connection from the host to its address (bounded connect, 10 s replies).
    pub fn conn(&self) -> redis::Connection {
        connect(&self.url())
    }

    /// `docker exec <name> redis-cli args...` (a client inside the container's own network
    /// namespace: it reaches the server even when the container is cut off).
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["exec", &self.name, "redis-cli"];
        all.extend(args);
        docker_within(&all, COMMAND_TIMEOUT)
    }

    /// Waits (bounded) until Redis answers PING at its address, loading done.
    pub fn wait_ready(&self) {
        let mut last = String::new();
        let ready = wait_until(Duration::from_secs(30), || {
            let ip = match address_on(&self.name, &self.network) {
                Ok(ip) => ip,
                Err(error) => {
                    last = error;
                    return false;
                }
            };
            match ping(&format!("redis://{ip}:{REDIS_PORT}/")) {
                Ok(()) => true,
                Err(error) => {
                    last = error;
                    false
                }
            }
        });
        assert!(
            ready,
            "{} did not answer: {last}\n{}",
            self.name,
            self.logs_tail(30)
        );
    }

    /// `docker restart` (SIGTERM, then start again) and wait until it answers.
    pub fn restart(&self) {
        docker(&["restart", "-t", "30", &self.name]);
        self.wait_ready();
    }

    /// `docker kill` (SIGKILL: no shutdown, no final fsync).
    pub fn kill(&self) {
        docker(&["kill", &self.name]);
    }

    /// `docker start` after a kill or stop, and wait until it answers.
    pub fn start_again(&self) {
        docker(&["start", &self.name]);
        self.wait_ready();
    }

    /// The last `lines` lines of its log.
    pub fn logs_tail(&self, lines: usize) -> String {
        let logs = self.logs();
        let all: Vec<&str> = logs.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Its whole log (stdout and stderr).
    pub fn logs(&self) -> String {
        // docker logs writes the container's stderr to its own stderr: merge them.
        let mut command = Command::new("docker");
        command.args(["logs", &self.name]);
        let (_, output) = crate::cluster::run_bounded(&mut command, COMMAND_TIMEOUT);
        output
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- log of container {} (last lines) ---\n{}",
                self.name,
                self.logs_tail(30)
            );
        }
        if let Err(error) = docker_within(&["rm", "-f", "-v", &self.name], COMMAND_TIMEOUT) {
            eprintln!("could not remove container {}: {error}", self.name);
        }
    }
}

/// A container's address on a network, or why there is none (not attached, not running).
fn address_on(container: &str, network: &str) -> Result<String, String> {
    let format = format!(
        "{{{{with index .NetworkSettings.Networks \"{network}\"}}}}{{{{.IPAddress}}}}{{{{end}}}}"
    );
    let ip = docker_within(
        &["inspect", "--format", &format, container],
        COMMAND_TIMEOUT,
    )?;
    if ip.is_empty() {
        Err(format!("{container} has no address on {network}"))
    } else {
        Ok(ip)
    }
}

/// A connection to `url` with a bounded connect and 10 s reply timeouts.
pub fn connect(url: &str) -> redis::Connection {
    let con = redis::Client::open(url)
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    con.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("write timeout");
    con
}

/// One PING to `url` (connect within 500 ms); `LOADING` and refusals are errors.
fn ping(url: &str) -> Result<(), String> {
    redis::Client::open(url)
        .and_then(|client| client.get_connection_with_timeout(Duration::from_millis(500)))
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con))
        .map(|_| ())
        .map_err(|error| error.to_string())
}
