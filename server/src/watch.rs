//! The config directory, watched by polling (no inotify crate: a poll a second reads a few
//! small files): a change is read and checked in full, then swapped in at once; a file that
//! does not pass is refused with its file, line and reason in the log and the
//! `ratelimit_config_reloads_total{result="refused"}` metric, and the config in force stays.
//!
//! A change is applied only once whole: the directory must read the same at two polls in
//! a row and again after it was parsed, so a file rewritten in place (whose prefixes may
//! be valid configs) is never served half-written.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{self, Config, FileBounds};
use crate::engine::Engine;
use crate::metrics;

/// How many times the start reads a directory that changes under it before it gives up.
const START_ATTEMPTS: usize = 50;

/// The pause between those reads.
const START_RETRY: Duration = Duration::from_millis(100);

/// A fingerprint of the directory's config files: names and contents, reading no file past
/// the size bound, and no file at all when there are more than the bound (the load refuses
/// the directory then).
pub fn fingerprint(dir: &Path, bounds: &FileBounds) -> u64 {
    let mut hasher = DefaultHasher::new();
    match config::config_files(dir, bounds.max_files) {
        Ok(files) => {
            for file in files {
                file.hash(&mut hasher);
                config::read_head(&file, bounds.max_file_bytes)
                    .ok()
                    .hash(&mut hasher);
            }
        }
        Err(error) => error.reason.hash(&mut hasher),
    }
    hasher.finish()
}

/// Logs every error of a refused directory.
fn log_refused(errors: &[config::ConfigError]) {
    for error in errors {
        tracing::error!("config refused: {error}");
    }
}

/// The config at start and the fingerprint of what it was read from: read again while the
/// directory changes during the read (a file being written), a bounded number of times.
/// `None` (the errors logged) when it is refused.
pub fn load_at_start(dir: &Path, bounds: &FileBounds) -> Option<(Config, u64)> {
    let mut before = fingerprint(dir, bounds);
    for _ in 0..START_ATTEMPTS {
        let loaded = config::load(dir, bounds);
        let after = fingerprint(dir, bounds);
        if after == before {
            return match loaded {
                Ok(config) => Some((config, after)),
                Err(errors) => {
                    log_refused(&errors);
                    None
                }
            };
        }
        tracing::info!("the config directory changed while it was read: reading it again");
        std::thread::sleep(START_RETRY);
        before = fingerprint(dir, bounds);
    }
    tracing::error!("the config directory kept changing while it was read");
    None
}

/// Polls `dir` every `every` and swaps changed configs into `engine`, until the task is
/// dropped. `seen` is the fingerprint of the config loaded at start.
pub async fn watch(
    engine: Arc<Engine>,
    dir: PathBuf,
    every: Duration,
    bounds: FileBounds,
    mut seen: u64,
) {
    let scan = |dir: &PathBuf| {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || fingerprint(&dir, &bounds))
    };
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The fingerprint of a change seen at the last poll, not yet applied.
    let mut settling = None;
    loop {
        ticker.tick().await;
        let Ok(now) = scan(&dir).await else {
            continue;
        };
        if now == seen {
            settling = None;
            continue;
        }
        if settling != Some(now) {
            // Changed since the last poll: it may still be being written.
            settling = Some(now);
            continue;
        }
        let dir_for_load = dir.clone();
        let Ok(loaded) =
            tokio::task::spawn_blocking(move || config::load(&dir_for_load, &bounds)).await
        else {
            continue;
        };
        let Ok(after) = scan(&dir).await else {
            continue;
        };
        if after != now {
            // Written to while it was read: what was parsed may be half a file.
            settling = Some(after);
            continue;
        }
        seen = now;
        settling = None;
        let loaded = loaded.and_then(|config| engine.check_region(&config).map(|()| config));
        match loaded {
            Ok(config) => {
                let domains = config.domains.len();
                let files = config.files.len();
                let uses_plans = config.uses_plans();
                engine.swap(config, now);
                if uses_plans && let Err(error) = engine.plans().connect().await {
                    tracing::error!("{error}: limits with 'tenant_key' use their defaults");
                }
                metrics::reload(true);
                tracing::info!(domains, files, "config reloaded");
            }
            Err(errors) => {
                log_refused(&errors);
                metrics::reload(false);
                tracing::error!("config change refused: the previous config is still served");
            }
        }
    }
}
