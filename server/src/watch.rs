//! The config directory, watched by polling (no inotify crate: a poll a second reads a few
//! small files): a change is read and checked in full, then swapped in at once; a file that
//! does not pass is refused with its file, line and reason in the log and the
//! `ratelimit_config_reloads_total{result="refused"}` metric, and the config in force stays.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{self, Config};
use crate::engine::Engine;
use crate::metrics;

/// A fingerprint of the directory's config files: names and contents.
pub fn fingerprint(dir: &Path) -> u64 {
    let mut hasher = DefaultHasher::new();
    match config::config_files(dir) {
        Ok(files) => {
            for file in files {
                file.hash(&mut hasher);
                std::fs::read(&file).ok().hash(&mut hasher);
            }
        }
        Err(error) => error.reason.hash(&mut hasher),
    }
    hasher.finish()
}

/// Loads the directory, logging every error.
pub fn load_logged(dir: &Path) -> Option<Config> {
    match config::load(dir) {
        Ok(config) => Some(config),
        Err(errors) => {
            for error in errors {
                tracing::error!("config refused: {error}");
            }
            None
        }
    }
}

/// Polls `dir` every `every` and swaps changed configs into `engine`, until the task is
/// dropped. `seen` is the fingerprint of the config loaded at start.
pub async fn watch(engine: Arc<Engine>, dir: std::path::PathBuf, every: Duration, mut seen: u64) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let dir_for_scan = dir.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || fingerprint(&dir_for_scan)).await else {
            continue;
        };
        if now == seen {
            continue;
        }
        seen = now;
        let dir_for_load = dir.clone();
        let Ok(loaded) = tokio::task::spawn_blocking(move || load_logged(&dir_for_load)).await
        else {
            continue;
        };
        match loaded {
            Some(config) => {
                let domains = config.domains.len();
                let files = config.files.len();
                let uses_plans = config.uses_plans();
                engine.swap(config);
                if uses_plans && let Err(error) = engine.plans().connect().await {
                    tracing::error!("{error}: limits with 'tenant_key' use their defaults");
                }
                metrics::reload(true);
                tracing::info!(domains, files, "config reloaded");
            }
            None => {
                metrics::reload(false);
                tracing::error!("config change refused: the previous config is still served");
            }
        }
    }
}
