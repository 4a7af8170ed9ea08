//! Real `redis-server` processes with the module loaded, on free loopback ports, in their own
//! temporary directories, always stopped (even when a test panics).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use crate::binaries::server_binary;

/// How often [`wait_until`] and [`wait_until_async`] look at their condition.
pub const POLL_EVERY: Duration = Duration::from_millis(20);

/// Polls `condition` every [`POLL_EVERY`] until it holds or `timeout` passes; returns whether
/// it held. The one way a test waits for something to happen: a fixed sleep either wastes
/// time or, on a busy machine, is too short.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// [`wait_until`] for async tests: awaits `condition` every [`POLL_EVERY`] (sleeping on the
/// runtime's timer, so the runtime's other tasks go on) until it holds or `timeout` passes.
/// A condition that borrows takes its references in `async move`, e.g.
/// `let store = &store; wait_until_async(timeout, || async move { store.ready().await })`.
pub async fn wait_until_async<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The module under test: `$RL_MODULE_PATH`, or the debug build next to the test binary.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("RL_MODULE_PATH") {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/it-<hash> → target/<profile>/libredis_ratelimit.so
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = profile_dir.join(format!(
        "libredis_ratelimit.{}",
        std::env::consts::DLL_EXTENSION
    ));
    assert!(
        path.exists(),
        "{} is missing: build the module first (make test does: cargo build --features test-hooks)",
        path.display()
    );
    path
}

/// A free loopback port (bound, then released), whose cluster bus port is free too.
pub fn free_port() -> u16 {
    // Bind port 0 and release it: racy in theory (another process could take it before the
    // server binds), so start() retries with a new port if the server cannot bind.
    // A cluster node also listens on port + 10000 (its bus), so only ports up to 55535 whose
    // bus port is free as well are taken.
    for _attempt in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port with a free cluster bus port after 100 attempts")
}

/// A new empty temporary directory for a server.
pub fn fresh_dir() -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-ratelimit-it-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A running server, killed and cleaned up on drop.
pub struct Server {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its working directory (RDB, AOF, log).
    pub dir: PathBuf,
    args: Vec<String>,
    /// Extra environment of the process (an `LD_PRELOAD` clock, say).
    env: Vec<(String, String)>,
    /// Whether the module is loaded (a managed host has none).
    module: bool,
    /// A program and its arguments that the server runs under (it must exec the server, so
    /// that the process stopped on drop is the server); empty: run the server directly.
    launcher: Vec<String>,
    /// The server program, when not [`server_binary`] (a test of one pinned server).
    program: Option<PathBuf>,
}

impl Server {
    /// Starts a server with the module and `extra` arguments (which override the defaults).
    pub fn start(extra: &[&str]) -> Server {
        Server::start_in(fresh_dir(), extra)
    }

    /// Starts a server in an existing directory (to reload its RDB or AOF).
    pub fn start_in(dir: PathBuf, extra: &[&str]) -> Server {
        Server::start_with_env(dir, extra, &[])
    }

    /// Starts a server in `dir` with `extra` arguments and extra environment variables
    /// (kept for restarts).
    pub fn start_with_env(dir: PathBuf, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::launch(dir, extra, env, true, &[])
    }

    /// As [`Server::start_with_env`], with the server's command line appended to
    /// `launcher` (a program that changes the server's view of the machine, then execs it),
    /// for every start and restart.
    pub fn start_launched(
        dir: PathBuf,
        extra: &[&str],
        env: &[(&str, &str)],
        launcher: &[&str],
    ) -> Server {
        Server::launch(dir, extra, env, true, launcher)
    }

    /// Starts a server without the module, as a managed host runs (add
    /// `--enable-module-command no` to refuse `MODULE LOAD` too).
    pub fn start_without_module(extra: &[&str]) -> Server {
        Server::launch(fresh_dir(), extra, &[], false, &[])
    }

    /// Starts `program` (rather than [`server_binary`]) with the module when `module`, and
    /// `extra` arguments: a test of one pinned server whatever `$REDIS_SERVER` says.
    pub fn start_program(program: &Path, extra: &[&str], module: bool) -> Server {
        Server::launch_program(fresh_dir(), extra, &[], module, &[], Some(program))
    }

    fn launch(
        dir: PathBuf,
        extra: &[&str],
        env: &[(&str, &str)],
        module: bool,
        launcher: &[&str],
    ) -> Server {
        Server::launch_program(dir, extra, env, module, launcher, None)
    }

    fn launch_program(
        dir: PathBuf,
        extra: &[&str],
        env: &[(&str, &str)],
        module: bool,
        launcher: &[&str],
        program: Option<&Path>,
    ) -> Server {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        for _attempt in 0..5 {
            let mut server = Server {
                child: None,
                port: free_port(),
                dir: dir.clone(),
                args: args.clone(),
                env: env.clone(),
                module,
                launcher: launcher.iter().map(|s| s.to_string()).collect(),
                program: program.map(Path::to_path_buf),
            };
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "redis-server did not start; log:\n{}",
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
    }

    fn spawn(&mut self) -> bool {
        let binary = self.program.clone().unwrap_or_else(server_binary);
        let mut command = match self.launcher.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--dir",
                self.dir.to_str().expect("utf-8 dir"),
                "--logfile",
                "log",
            ])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "yes", "--protected-mode", "no"]);
        if self.module {
            command.arg("--loadmodule").arg(module_path());
        }
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command.spawn().unwrap_or_else(|error| {
            panic!(
                "cannot run {} ({error}): make test installs redis-server; \
                     set REDIS_SERVER to use another binary",
                binary.display()
            )
        });
        self.child = Some(child);
        let port = self.port;
        let ready = wait_until(Duration::from_secs(10), || {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(_)) = child.try_wait()
            {
                return true; // exited: stop waiting
            }
            ping(port)
        });
        let alive = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
        if ready && alive {
            return true;
        }
        self.kill();
        false
    }

    /// On-CPU nanoseconds of the server's main thread so far (`/proc/.../schedstat`, which
    /// counts to the nanosecond), or INFO's `used_cpu_*_main_thread` where there is no
    /// schedstat: the thread that runs commands and socket I/O, which benchmarks compare.
    pub fn main_thread_cpu_ns(&self) -> u64 {
        let mut con = self.conn();
        let pid = info_field(&mut con, "server", "process_id").unwrap_or_default();
        let path = format!("/proc/{pid}/task/{pid}/schedstat");
        if let Some(ns) = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.split_whitespace().next()?.parse().ok())
        {
            return ns;
        }
        let seconds: f64 = ["used_cpu_user_main_thread", "used_cpu_sys_main_thread"]
            .iter()
            .filter_map(|field| info_field(&mut con, "cpu", field)?.parse::<f64>().ok())
            .sum();
        (seconds * 1e9) as u64
    }

    /// A new connection (RESP2).
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }

    /// A new RESP3 connection.
    pub fn conn_resp3(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
            .and_then(|c| c.get_connection())
            .expect("connect (RESP3)")
    }

    /// A new async connection without the redis crate's own response timeout (500 ms by
    /// default in 1.x): a regions agent's `WAIT` on a home primary may take up to its
    /// `wait_timeout`, longer while a just-started replica is still syncing.
    pub async fn async_conn_untimed(&self) -> redis::aio::MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        self.client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect (async, no response timeout)")
    }

    /// A client for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None))) && ping(self.port)
    }

    /// Kills the process (SIGKILL) and waits for it, keeping the directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the process (SIGSTOP) until the guard is dropped (SIGCONT): a server that keeps
    /// its connections open and answers nothing, as a stalled host does. Dropping the guard
    /// resumes it even when a test fails.
    pub fn pause(&self) -> Paused {
        let pid = self.child.as_ref().expect("a running server").id();
        signal(pid, "-STOP");
        Paused { pid }
    }

    /// Stops the server and starts it again on the same port and directory, with `extra`
    /// arguments replacing the previous ones.
    pub fn restart(&mut self, extra: &[&str]) {
        self.kill();
        self.args = extra.iter().map(|s| s.to_string()).collect();
        assert!(
            self.spawn() || self.spawn(),
            "restart failed; log:\n{}",
            self.log()
        );
    }

    /// Makes this server a replica of `primary` and waits until the link is up.
    pub fn replicate_from(&self, primary: &Server) {
        let mut con = self.conn();
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query(&mut con)
            .expect("REPLICAOF");
        self.wait_for_primary_link();
    }

    /// Waits until this replica's link to its primary is up (bounded).
    pub fn wait_for_primary_link(&self) {
        let mut con = self.conn();
        let up =
            || info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up");
        assert!(
            wait_until(Duration::from_secs(20), up),
            "replica link did not come up; replica log:\n{}",
            self.log()
        );
    }
}

/// A server stopped by [`Server::pause`], resumed on drop.
#[must_use = "the server resumes when the guard is dropped"]
pub struct Paused {
    pid: u32,
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.pid, "-CONT");
    }
}

fn signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success());
    // No panic while unwinding (a guard dropped by a failing test): that would abort.
    assert!(
        sent || std::thread::panicking(),
        "kill {signal} {pid} failed"
    );
}

/// A Valkey 9.1 without its Lua engine and without the module: the pinned
/// [`crate::binaries::valkey_server`], its built-in `lua` module unloaded (`MODULE UNLOAD
/// lua`, which 9.1 allows), so `FUNCTION LOAD`, `SCRIPT LOAD` and `EVAL` find no engine.
pub fn valkey_without_lua() -> Server {
    let server = Server::start_program(
        &crate::binaries::valkey_server(),
        &["--enable-module-command", "yes"],
        false,
    );
    let () = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("lua")
        .query(&mut server.conn())
        .expect("MODULE UNLOAD lua");
    server
}

/// A primary and a replica of it, linked. The replica runs with
/// `propagation-error-behavior panic`, so any replicated command it refuses kills it
/// loudly; the primary sends no periodic pings (its replication offset only moves when
/// something is propagated) and starts full syncs at once.
pub fn primary_and_replica() -> (Server, Server) {
    let primary = Server::start(&[
        "--repl-ping-replica-period",
        "3600",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let replica = Server::start(&["--propagation-error-behavior", "panic"]);
    replica.replicate_from(&primary);
    (primary, replica)
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- log of server on port {} (last lines) ---", self.port);
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ping(port: u16) -> bool {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con))
        .is_ok()
}

/// One field of an `INFO` section, if present.
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    info.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field).then(|| value.trim().to_string())
    })
}

/// Waits (at most 20 s) until the replica behind `replica` has applied everything the primary
/// behind `primary` had written when this was called; returns whether it did.
pub fn caught_up(primary: &mut redis::Connection, replica: &mut redis::Connection) -> bool {
    let offset = info_int(primary, "replication", "master_repl_offset");
    wait_until(Duration::from_secs(20), || {
        info_int(replica, "replication", "master_repl_offset") >= offset
    })
}

/// An `INFO` field parsed as an integer (0 when absent).
pub fn info_int(con: &mut redis::Connection, section: &str, field: &str) -> i64 {
    info_field(con, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
