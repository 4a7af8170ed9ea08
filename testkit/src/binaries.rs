//! Which server programs the tests run, so the whole suite can target another build or
//! Valkey with one variable.
//!
//! - `$REDIS_SERVER`: the server (default `redis-server` on `PATH`);
//! - `$REDIS_CLI`, `$REDIS_CHECK_RDB`: its companions. By default the companion beside
//!   `$REDIS_SERVER` with the same prefix (`/opt/valkey/bin/valkey-server` →
//!   `/opt/valkey/bin/valkey-cli`), when it exists; otherwise `redis-cli` /
//!   `redis-check-rdb` on `PATH`.

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
