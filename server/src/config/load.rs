//! Reading a config directory: every `*.yaml` / `*.yml` file in it (not hidden ones, so the
//! `..data` links of a Kubernetes ConfigMap are followed once), one domain per file, each
//! file's errors kept so that one reload reports everything wrong.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::ConfigError;
use super::reader::{Reader, line};
use super::rules::{Config, Domain};
use super::yaml::{self, FileBounds};

/// The config files of a directory, sorted.
/// More than `max_files` of them is an error, told without holding them all.
pub fn config_files(dir: &Path, max_files: usize) -> Result<Vec<PathBuf>, ConfigError> {
    let fail = |reason: String| ConfigError {
        file: dir.to_path_buf(),
        line: 0,
        reason,
    };
    let entries = std::fs::read_dir(dir)
        .map_err(|error| fail(format!("cannot read the config directory: {error}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && path.is_file()
        })
        .take(max_files.saturating_add(1))
        .collect();
    if files.len() > max_files {
        return Err(fail(format!(
            "more than {max_files} config files (--config-max-files)"
        )));
    }
    files.sort();
    Ok(files)
}

/// Reads and checks every config file of `dir`, within `bounds`. All errors are returned
/// (one per file at most, plus duplicate domains), so one reload reports everything wrong.
pub fn load(dir: &Path, bounds: &FileBounds) -> Result<Config, Vec<ConfigError>> {
    let files = config_files(dir, bounds.max_files).map_err(|error| vec![error])?;
    let mut texts = Vec::with_capacity(files.len());
    let mut errors = Vec::new();
    for file in files {
        match yaml::read_bounded(&file, bounds.max_file_bytes) {
            Ok(text) => texts.push((file, text)),
            Err(refused) => errors.push(ConfigError {
                file,
                line: refused.line,
                reason: refused.reason,
            }),
        }
    }
    let assembled = assemble(texts, bounds.max_depth);
    match (assembled, errors.is_empty()) {
        (Ok(config), true) => Ok(config),
        (Ok(_), false) => Err(errors),
        (Err(more), _) => {
            errors.extend(more);
            Err(errors)
        }
    }
}

/// The config of files' texts (path, YAML), one domain each, names unique, each nested at
/// most `max_depth` collections deep.
pub fn assemble(
    texts: Vec<(PathBuf, String)>,
    max_depth: usize,
) -> Result<Config, Vec<ConfigError>> {
    let mut domains: HashMap<String, Domain> = HashMap::new();
    let mut errors = Vec::new();
    let mut files = Vec::with_capacity(texts.len());
    for (file, text) in texts {
        match parse_file(&file, &text, max_depth) {
            Ok(domain) => {
                if let Some(first) = domains.get(&domain.name) {
                    errors.push(ConfigError {
                        file: file.clone(),
                        line: domain.location.line,
                        reason: format!(
                            "domain '{}' is already defined at {}",
                            domain.name, first.location
                        ),
                    });
                } else {
                    domains.insert(domain.name.clone(), domain);
                }
            }
            Err(error) => errors.push(error),
        }
        files.push(file);
    }
    if errors.is_empty() {
        Ok(Config { domains, files })
    } else {
        Err(errors)
    }
}

/// Parses one file's text (one domain), nested at most `max_depth` collections deep.
pub fn parse_file(file: &Path, text: &str, max_depth: usize) -> Result<Domain, ConfigError> {
    let file = Arc::new(file.to_path_buf());
    let fail = |line: usize, reason: String| ConfigError {
        file: file.to_path_buf(),
        line,
        reason,
    };
    let documents =
        yaml::documents(text, max_depth).map_err(|refused| fail(refused.line, refused.reason))?;
    let mut documents = documents.iter();
    let Some(document) = documents.next() else {
        return Err(fail(
            0,
            "the file is empty: a config file holds one domain".into(),
        ));
    };
    if let Some(extra) = documents.next() {
        return Err(fail(
            line(extra),
            "a second YAML document: a config file holds one domain".into(),
        ));
    }
    let reader = Reader { file: &file };
    reader.domain(document)
}
