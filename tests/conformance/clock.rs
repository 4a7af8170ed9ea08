//! A server whose wall clock the test sets: `fake_clock.c`, built here into the target
//! directory and preloaded, makes `clock_gettime(CLOCK_REALTIME)` and `gettimeofday` return
//! the instant written in a file. The module's clock and the library's `TIME` then read the
//! same instant, which is what "identical server instants" needs.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use redis_ratelimit_testkit::server::{Server, fresh_dir};

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
    /// Starts a server at [`BASE_US`] with `extra` arguments, and loads the library.
    pub fn start(extra: &[&str]) -> ClockedServer {
        let dir = fresh_dir();
        let clock_path = dir.join("clock");
        let clock = File::create(&clock_path).expect("clock file");
        clock
            .write_all_at(&BASE_US.to_ne_bytes(), 0)
            .expect("set the clock");
        let server = start_on_clock(dir, extra, &clock_path);
        let clocked = ClockedServer {
            server,
            clock,
            clock_path,
        };
        let mut con = clocked.server.conn();
        load_library(&mut con);
        clocked
    }

    /// Another server on the same clock (a replica, say), without the library loaded.
    pub fn start_another(&self, extra: &[&str]) -> Server {
        start_on_clock(fresh_dir(), extra, &self.clock_path)
    }

    /// Sets the server's wall clock to `now_us` (Unix µs).
    pub fn set(&mut self, now_us: i64) {
        self.clock
            .write_all_at(&now_us.to_ne_bytes(), 0)
            .expect("set the clock");
    }
}

/// A server whose wall clock reads the instant in `clock_path`.
fn start_on_clock(dir: PathBuf, extra: &[&str], clock_path: &std::path::Path) -> Server {
    let shim = shim().to_str().expect("utf-8 path").to_string();
    let clock_file = clock_path.to_str().expect("utf-8 path").to_string();
    let server = Server::start_with_env(
        dir,
        extra,
        &[("LD_PRELOAD", &shim), ("RL_FAKE_CLOCK_FILE", &clock_file)],
    );
    let mut con = server.conn();
    let time: Vec<String> = redis::cmd("TIME").query(&mut con).expect("TIME");
    let time_us =
        time[0].parse::<i64>().expect("seconds") * 1_000_000 + time[1].parse::<i64>().expect("µs");
    let set_us = i64::from_ne_bytes(
        std::fs::read(clock_path).expect("clock file")[..8]
            .try_into()
            .expect("8 bytes"),
    );
    assert_eq!(
        time_us, set_us,
        "the clock shim is not in effect (LD_PRELOAD refused?): TIME says {time_us}"
    );
    server
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
