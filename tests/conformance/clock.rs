//! A server whose wall clock the test sets: `fake_clock.c`, built here into the target
//! directory and preloaded, makes `clock_gettime(CLOCK_REALTIME)` and `gettimeofday` return
//! the instant written in a file. The module's clock and the library's `TIME` then read the
//! same instant, which is what "identical server instants" needs.
//!
//! A server that adds hardware-clock (x86 TSC) time to a cached `gettimeofday` between
//! calls (Valkey 9.1 by default) would slip past the shim by microseconds: each run first
//! probes whether pipelined `TIME` calls read exactly the frozen instant, and where they do
//! not, runs the servers with the TSC hidden (`without_tsc.sh`), or says why it cannot and
//! skips the tests that need the frozen clock.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use redis_ratelimit_testkit::helpers::run;
use redis_ratelimit_testkit::server::{Server, fresh_dir, info_field};

/// The library under test, as `FUNCTION LOAD` takes it.
pub const LIBRARY: &str = include_str!("../../functions/ratelimit.lua");

/// An instant everything starts from: 2027-01-15T08:00:00.000250Z (a µs fraction, so that
/// Redis 7.0's millisecond rule is exercised from the first call).
pub const BASE_US: i64 = 1_800_000_000_000_250;

/// The preloadable shim, compiled once per test run.
fn shim() -> &'static PathBuf {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let source =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fake_clock.c");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake_clock-{}.so", std::process::id()));
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .expect("the conformance suite needs a C compiler (cc) to build its clock shim");
        assert!(status.success(), "building the clock shim failed: {status}");
        out
    })
}

/// A server with the module and the library loaded, on a clock the test sets.
pub struct ClockedServer {
    /// The server (stopped on drop).
    pub server: Server,
    clock: File,
    clock_path: PathBuf,
}

impl ClockedServer {
    /// Starts a server at [`BASE_US`] with `extra` arguments, and loads the library; `None`
    /// (after one loud `FROZEN-CLOCK TESTS SKIPPED` line) where this server's clock cannot
    /// be frozen here.
    pub fn start(extra: &[&str]) -> Option<ClockedServer> {
        let launcher = match launch() {
            Launch::Impossible(why) => {
                let test = std::thread::current()
                    .name()
                    .unwrap_or("a test")
                    .to_string();
                eprintln!("FROZEN-CLOCK TESTS SKIPPED: {test}: {why}");
                return None;
            }
            launch => launch.launcher(),
        };
        let dir = fresh_dir();
        let clock_path = dir.join("clock");
        let clock = File::create(&clock_path).expect("clock file");
        clock
            .write_all_at(&BASE_US.to_ne_bytes(), 0)
            .expect("set the clock");
        let server = start_on_clock(dir, extra, &clock_path, &launcher);
        assert_frozen(&server, &clock_path);
        let clocked = ClockedServer {
            server,
            clock,
            clock_path,
        };
        let mut con = clocked.server.conn();
        load_library(&mut con);
        // Keys expire only when touched, as the test's instant says. The active expire cycle
        // runs on the server's own timer: when a trace moves the clock past a key's expiry
        // and back before touching it, that cycle may have deleted the key in one database
        // and not yet in the other, and the backends then disagree though both are right
        // (seen under a CPU burner: a sliding window gone from the library's database only).
        run(&mut con, "DEBUG SET-ACTIVE-EXPIRE 0");
        Some(clocked)
    }

    /// Another server on the same clock (a replica, say), without the library loaded.
    pub fn start_another(&self, extra: &[&str]) -> Server {
        let server = start_on_clock(fresh_dir(), extra, &self.clock_path, &launch().launcher());
        assert_frozen(&server, &self.clock_path);
        server
    }

    /// Sets the server's wall clock to `now_us` (Unix µs).
    pub fn set(&mut self, now_us: i64) {
        self.clock
            .write_all_at(&now_us.to_ne_bytes(), 0)
            .expect("set the clock");
    }
}

/// A server whose wall clock reads the instant in `clock_path`, started under `launcher`.
fn start_on_clock(dir: PathBuf, extra: &[&str], clock_path: &Path, launcher: &[String]) -> Server {
    let shim = shim().to_str().expect("utf-8 path").to_string();
    let clock_file = clock_path.to_str().expect("utf-8 path").to_string();
    let env = [
        ("LD_PRELOAD", shim.as_str()),
        ("RL_FAKE_CLOCK_FILE", clock_file.as_str()),
    ];
    let launcher: Vec<&str> = launcher.iter().map(String::as_str).collect();
    Server::start_launched(dir, extra, &env, &launcher)
}

/// How the suite's servers start so that the preloaded clock alone sets their instant.
enum Launch {
    /// Directly: the server's wall clock is `gettimeofday`/`clock_gettime`, which the shim
    /// answers.
    Direct,
    /// Under `without_tsc.sh`: the server would add x86 TSC time to `gettimeofday` between
    /// calls; with `constant_tsc` hidden from it, it reads `clock_gettime` instead.
    WithoutTsc,
    /// Not here, and why (the tests that need the frozen clock skip, saying so).
    Impossible(String),
}

impl Launch {
    fn launcher(&self) -> Vec<String> {
        match self {
            Launch::WithoutTsc => vec!["bash".into(), without_tsc().display().to_string()],
            Launch::Direct | Launch::Impossible(_) => Vec::new(),
        }
    }
}

fn without_tsc() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/without_tsc.sh")
}

/// Decided once per run, on a probe server: whether the shim freezes this server's clock,
/// and if not whether hiding the TSC does.
fn launch() -> &'static Launch {
    static LAUNCH: OnceLock<Launch> = OnceLock::new();
    LAUNCH.get_or_init(|| {
        let (server, clock_path) = probe_server(&[]);
        let Err(moved) = frozen(&server, &clock_path) else {
            return Launch::Direct;
        };
        let mut con = server.conn();
        let version = server_version(&mut con);
        let monotonic = info_field(&mut con, "server", "monotonic_clock").unwrap_or_default();
        let hardware = !(monotonic.is_empty() || monotonic.starts_with("POSIX"));
        if moved.off_us().abs() >= 1_000_000 || !hardware {
            panic!(
                "the clock shim is not in effect on {version} (LD_PRELOAD refused, or a static \
                 binary?): {moved}; INFO monotonic_clock: {monotonic:?}"
            );
        }
        let why = format!(
            "{version}'s TIME moves while the preloaded clock stands still ({moved}): it reads \
             a hardware clock (INFO monotonic_clock: {monotonic}) between gettimeofday() calls \
             (Valkey 9.1 adds TSC time to a gettimeofday() it takes about once a millisecond)"
        );
        if !monotonic.starts_with("X86 TSC") {
            return Launch::Impossible(format!(
                "{why}; only the x86 TSC can be hidden from a server (through /proc/cpuinfo): \
                 build this one with CFLAGS=-DNO_PROCESSOR_CLOCK (Valkey) or without \
                 USE_PROCESSOR_CLOCK (Redis)"
            ));
        }
        drop(server);
        match Command::new("bash").arg(without_tsc()).arg("true").output() {
            Ok(output) if output.status.success() => {}
            Ok(output) => {
                return Launch::Impossible(format!(
                    "{why}; hiding constant_tsc failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            Err(error) => {
                return Launch::Impossible(format!("{why}; cannot run bash: {error}"));
            }
        }
        let (server, clock_path) = probe_server(&Launch::WithoutTsc.launcher());
        let hidden =
            info_field(&mut server.conn(), "server", "monotonic_clock").unwrap_or_default();
        if let Err(still) = frozen(&server, &clock_path) {
            panic!(
                "even with constant_tsc hidden (INFO monotonic_clock: {hidden}), the preloaded \
                 clock does not hold on {version}: {still}"
            );
        }
        println!(
            "conformance: {why}; its servers run with constant_tsc hidden from /proc/cpuinfo \
             (tests/conformance/without_tsc.sh, a private mount namespace), where INFO \
             monotonic_clock reads {hidden:?} and the preloaded clock holds"
        );
        Launch::WithoutTsc
    })
}

/// A server without the library on its own clock at [`BASE_US`], started under `launcher`.
fn probe_server(launcher: &[String]) -> (Server, PathBuf) {
    let dir = fresh_dir();
    let clock_path = dir.join("clock");
    std::fs::write(&clock_path, BASE_US.to_ne_bytes()).expect("set the clock");
    (start_on_clock(dir, &[], &clock_path, launcher), clock_path)
}

/// Asserts that the preloaded clock holds on `server` (started the way [`launch`] chose).
fn assert_frozen(server: &Server, clock_path: &Path) {
    if let Err(moved) = frozen(server, clock_path) {
        panic!(
            "the preloaded clock does not hold on {}: {moved}",
            server_version(&mut server.conn())
        );
    }
}

/// A `TIME` reply that was not the frozen instant.
struct Moved {
    set_us: i64,
    read_us: i64,
    call: usize,
    calls: usize,
}

impl Moved {
    fn off_us(&self) -> i64 {
        self.read_us - self.set_us
    }
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "with the clock set to {} µs, call {} of {} pipelined TIME calls read {} µs ({:+} µs)",
            self.set_us,
            self.call,
            self.calls,
            self.read_us,
            self.off_us()
        )
    }
}

/// Whether every `TIME` within one frozen instant reads exactly that instant: rounds of
/// pipelined `TIME` calls (each round within well under a millisecond of real time, where
/// a server adding hardware-clock time to a cached `gettimeofday` moves by microseconds),
/// 2 ms apart.
fn frozen(server: &Server, clock_path: &Path) -> Result<(), Moved> {
    const ROUNDS: usize = 3;
    const CALLS: usize = 50;
    let set_bytes = std::fs::read(clock_path).expect("clock file");
    let set_us = i64::from_ne_bytes(set_bytes[..8].try_into().expect("8 bytes"));
    let mut con = server.conn();
    for round in 0..ROUNDS {
        if round > 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut pipe = redis::pipe();
        for _ in 0..CALLS {
            pipe.cmd("TIME");
        }
        let times: Vec<(i64, i64)> = pipe.query(&mut con).expect("TIME");
        let read = times.iter().map(|(s, us)| s * 1_000_000 + us);
        if let Some((index, read_us)) = read.enumerate().find(|&(_, us)| us != set_us) {
            return Err(Moved {
                set_us,
                read_us,
                call: index + 1,
                calls: CALLS,
            });
        }
    }
    Ok(())
}

/// "valkey 9.1.2" or "redis 8.6.3", from `INFO server`.
fn server_version(con: &mut redis::Connection) -> String {
    let name = info_field(con, "server", "server_name").unwrap_or_else(|| "redis".into());
    let version = info_field(con, "server", "valkey_version")
        .or_else(|| info_field(con, "server", "redis_version"))
        .unwrap_or_default();
    format!("{name} {version}")
}

/// `FUNCTION LOAD REPLACE` of the library.
pub fn load_library(con: &mut redis::Connection) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(LIBRARY)
        .query(con)
        .expect("FUNCTION LOAD of functions/ratelimit.lua");
    assert_eq!(name, "ratelimit");
}
