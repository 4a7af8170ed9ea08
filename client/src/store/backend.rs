//! Which server-side implementation a [`RedisStore`](super::RedisStore) calls: the module's
//! `RL.*` commands, or the same commands as the Functions library
//! (`functions/ratelimit.lua`, through `FCALL`), or that library sent as a script
//! (`EVALSHA`) where the host refuses `FUNCTION`. All three answer with the same replies
//! (the repository's conformance suite holds the library to the module call for call), so
//! the rest of the client never knows which one ran.
//!
//! [`Backend::Auto`] picks, once per connection: the module if its commands exist, else the
//! library (loaded if absent), else the script.

use std::fmt;

use redis::{Cmd, Value};
use redis_ratelimit_wire::commands::Command;
use redis_ratelimit_wire::encode::Args;

use super::error::StoreError;
use crate::outcome::StoreBackend;

/// The library's source, as `FUNCTION LOAD` takes it.
pub const LIBRARY: &str = include_str!("../../../functions/ratelimit.lua");

/// The library's name (`#!lua name=ratelimit`).
const LIBRARY_NAME: &str = "ratelimit";

/// Which implementation to call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The module if the server has its commands, else the Functions library (loaded once
    /// if absent), else the library as a script.
    #[default]
    Auto,
    /// The module's `RL.*` commands.
    Module,
    /// The Functions library through `FCALL` (loaded with `FUNCTION LOAD` if absent).
    Functions,
    /// The library as a script, through `EVALSHA` (loaded with `SCRIPT LOAD`, again after
    /// `NOSCRIPT`).
    Scripts,
}

impl Backend {
    /// Its name: `auto`, `module`, `functions`, `scripts` (the `backend` metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Module => "module",
            Self::Functions => "functions",
            Self::Scripts => "scripts",
        }
    }

    /// The backend a name (as [`Backend::as_str`] gives it) stands for.
    pub fn parse(name: &str) -> Option<Backend> {
        [Self::Auto, Self::Module, Self::Functions, Self::Scripts]
            .into_iter()
            .find(|backend| backend.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The library's script form: the file without its first line (`#!lua name=...`), which
/// dispatches on its first argument.
pub(crate) fn script() -> &'static str {
    LIBRARY.split_once('\n').map_or(LIBRARY, |(_, rest)| rest)
}

/// The library's function standing for a module command (`RL.TOKENBUCKET`, any case), and
/// its keys: counted by the command itself (`RL.MULTI numkeys ...`, `None`) or the first
/// `n` arguments (one key, or `RL.REGIONAL`'s two): all from the table of commands.
fn function_of(command: &[u8]) -> Option<(&'static str, Option<usize>)> {
    let command = Command::named(command)?;
    let leading = (!command.counts_keys()).then(|| command.leading_keys());
    Some((command.function()?, leading))
}

/// The command that runs the module command `args` (`RL.TOKENBUCKET key ...`) on a resolved
/// backend (`sha`: the script's, for [`StoreBackend::Scripts`]). The module's, and the
/// memory store's (which never reaches a server), are the command itself.
pub(crate) fn command(backend: StoreBackend, sha: &str, args: &Args) -> Cmd {
    // Sized once: the words, and what a translation adds (its name, the SHA, two counts).
    let bytes = args.iter().map(<[u8]>::len).sum::<usize>();
    let mut command = Cmd::with_capacity(
        args.len().saturating_add(4),
        bytes.saturating_add(sha.len()).saturating_add(32),
    );
    if matches!(backend, StoreBackend::Module | StoreBackend::Memory) {
        for word in args.iter() {
            command.arg(word);
        }
        return command;
    }
    let words: Vec<&[u8]> = args.iter().collect();
    let translated = match (backend, words.split_first()) {
        (_, None) => None,
        (backend, Some((name, rest))) => {
            function_of(name).map(|(function, leading)| (backend, function, leading, rest))
        }
    };
    let Some((backend, function, leading, rest)) = translated else {
        for word in &words {
            command.arg(*word);
        }
        return command;
    };
    // FCALL function numkeys key ... arg ... / EVALSHA sha numkeys key ... function arg ...
    let (keys, after_keys) = if let Some(leading) = leading {
        rest.split_at_checked(leading).unwrap_or((rest, &[]))
    } else {
        let count = rest
            .first()
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        let keys = rest.get(1..count.saturating_add(1)).unwrap_or_default();
        let after = rest.get(count.saturating_add(1)..).unwrap_or_default();
        (keys, after)
    };
    if backend == StoreBackend::Scripts {
        command.arg("EVALSHA").arg(sha).arg(keys.len());
        command.arg(keys).arg(function);
    } else {
        command.arg("FCALL").arg(function).arg(keys.len());
        command.arg(keys);
    }
    command.arg(after_keys);
    command
}

/// Why a backend cannot be used on this server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendError {
    /// The server's error (its own text).
    #[error("{0}")]
    Server(String),
    /// With [`Backend::Auto`]: no module, and neither the library nor the script loads.
    #[error(
        "no rate-limit backend on this server: no module commands; the Functions library: \
         {functions}; scripts: {scripts}"
    )]
    NoBackend {
        /// Why the library did not load.
        functions: Box<BackendError>,
        /// Why the script did not load.
        scripts: Box<BackendError>,
    },
    /// With [`Backend::Auto`]: no module, and no Lua engine to run the library or the
    /// script (Valkey 9.1 runs Lua as a module an operator may leave out or unload).
    #[error(
        "no rate-limit backend on this server: the ratelimit module is not loaded and the \
         server has no Lua engine (a Valkey without its lua module), so neither the Functions \
         library nor the script can run; load the module (loadmodule \
         /path/to/libredis_ratelimit.so) or give the server its Lua engine"
    )]
    NoModuleNoLua,
    /// The library or the script was asked for, and the server has no Lua engine.
    #[error(
        "the {0} backend runs Lua and this server has no Lua engine (a Valkey without its lua \
         module): load the ratelimit module and use the module backend, or give the server \
         its Lua engine"
    )]
    NoLua(&'static str),
    /// `SCRIPT LOAD` answered something else than a SHA.
    #[error("SCRIPT LOAD answered {0}")]
    ScriptLoad(String),
    /// `SCRIPT LOAD` answered a SHA that is not text.
    #[error("{0}")]
    ScriptSha(#[from] std::string::FromUtf8Error),
}

impl From<BackendError> for StoreError {
    fn from(error: BackendError) -> Self {
        StoreError::Server(error.to_string())
    }
}

/// What resolving needs to ask the server, so that [`resolve`] is tested without one.
pub(crate) trait Probe {
    /// Whether the server has this command (`COMMAND INFO`).
    async fn has_command(&self, name: &str) -> Result<bool, BackendError>;
    /// Runs a command, returning its reply or the server's error.
    async fn run(&self, command: &Cmd) -> Result<Value, BackendError>;
}

/// A backend ready to be called: which one, and the script's SHA for
/// [`StoreBackend::Scripts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub backend: StoreBackend,
    pub sha: String,
}

/// Picks and prepares the backend `wanted` stands for: loads the library or the script as
/// needed. `Err` when the wanted backend cannot work on this server, saying why.
pub(crate) async fn resolve(probe: &impl Probe, wanted: Backend) -> Result<Resolved, BackendError> {
    let resolved = |backend, sha: String| Ok(Resolved { backend, sha });
    match wanted {
        Backend::Module => resolved(StoreBackend::Module, String::new()),
        Backend::Functions => load_library(probe)
            .await
            .map_err(|error| lua_named(error, "functions"))
            .and_then(|()| resolved(StoreBackend::Functions, String::new())),
        Backend::Scripts => load_script(probe)
            .await
            .map_err(|error| lua_named(error, "scripts"))
            .and_then(|sha| resolved(StoreBackend::Scripts, sha)),
        Backend::Auto => {
            if probe.has_command("rl.tokenbucket").await? {
                return resolved(StoreBackend::Module, String::new());
            }
            match load_library(probe).await {
                Ok(()) => resolved(StoreBackend::Functions, String::new()),
                Err(functions) => match load_script(probe).await {
                    Ok(sha) => resolved(StoreBackend::Scripts, sha),
                    Err(scripts) if no_lua_engine(&functions) && no_lua_engine(&scripts) => {
                        Err(BackendError::NoModuleNoLua)
                    }
                    Err(scripts) => Err(BackendError::NoBackend {
                        functions: Box::new(functions),
                        scripts: Box::new(scripts),
                    }),
                },
            }
        }
    }
}

/// Whether the server refused the library or the script for want of a Lua engine: Valkey
/// 9.1 answers `FUNCTION LOAD` with `ERR Engine 'lua' not found` and `SCRIPT LOAD` or
/// `EVAL` with `ERR Could not find scripting engine 'lua'` when its lua module is not loaded.
fn no_lua_engine(error: &BackendError) -> bool {
    let BackendError::Server(text) = error else {
        return false;
    };
    let text = text.to_ascii_lowercase();
    text.contains("engine 'lua' not found") || text.contains("could not find scripting engine")
}

/// The backend `name`'s error, said plainly when the server has no Lua engine.
fn lua_named(error: BackendError, name: &'static str) -> BackendError {
    if no_lua_engine(&error) {
        BackendError::NoLua(name)
    } else {
        error
    }
}

/// Publishes the backend in use: the gauge `ratelimit_store_backend{backend}` is 1 for it.
pub(crate) fn record(backend: StoreBackend) {
    metrics::gauge!("ratelimit_store_backend", "backend" => backend.as_str()).set(1.0);
}

/// Loads the library unless this server already has it (`FUNCTION LIST LIBRARYNAME`).
/// Another process may load it meanwhile: `REPLACE` makes that harmless.
async fn load_library(probe: &impl Probe) -> Result<(), BackendError> {
    let mut list = redis::cmd("FUNCTION");
    list.arg("LIST").arg("LIBRARYNAME").arg(LIBRARY_NAME);
    let present = match probe.run(&list).await? {
        Value::Array(libraries) => !libraries.is_empty(),
        _ => false,
    };
    if present {
        return Ok(());
    }
    replace_library(probe).await
}

/// `FUNCTION LOAD REPLACE` of the library (a cluster client sends it to every primary).
async fn replace_library(probe: &impl Probe) -> Result<(), BackendError> {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg("REPLACE").arg(LIBRARY);
    probe.run(&load).await.map(|_| ())
}

/// Whether an error reply (`code`, the rest of its text) says the server lost the
/// backend's code: `NOSCRIPT` for the script (a restart, `SCRIPT FLUSH`), `ERR Function not
/// found` for the library (`FUNCTION FLUSH`, or on a cluster a primary that never got it
/// while the one `FUNCTION LIST` asked had it).
pub(crate) fn lost(backend: StoreBackend, code: Option<&str>, detail: Option<&str>) -> bool {
    match backend {
        StoreBackend::Scripts => code == Some("NOSCRIPT"),
        StoreBackend::Functions => {
            code == Some("ERR") && detail.is_some_and(|text| text.starts_with("Function not found"))
        }
        StoreBackend::Module | StoreBackend::Memory => false,
    }
}

/// Gives the server the backend's code again, after [`lost`] said it lost it.
pub(crate) async fn reload(probe: &impl Probe, backend: StoreBackend) -> Result<(), BackendError> {
    match backend {
        StoreBackend::Scripts => load_script(probe).await.map(|_| ()),
        StoreBackend::Functions => replace_library(probe).await,
        StoreBackend::Module | StoreBackend::Memory => Ok(()),
    }
}

/// Loads the script (idempotent: the SHA is the text's).
async fn load_script(probe: &impl Probe) -> Result<String, BackendError> {
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(script());
    match probe.run(&load).await? {
        Value::BulkString(sha) => Ok(String::from_utf8(sha)?),
        Value::SimpleString(sha) => Ok(sha),
        other => Err(BackendError::ScriptLoad(format!("{other:?}"))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn words(command: &Cmd) -> Vec<String> {
        command
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => format!("<{other:?}>"),
            })
            .collect()
    }

    fn line(text: &str) -> Args {
        let mut args = Args::default();
        for word in text.split_whitespace() {
            args.push(word.as_bytes());
        }
        args
    }

    fn text(args: &Args) -> Vec<String> {
        args.iter()
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect()
    }

    #[test]
    fn module_commands_become_fcall_or_evalsha() {
        let single = line("RL.TOKENBUCKET user:42 10 2 3 PARTIAL MIN 1");
        assert_eq!(
            words(&command(StoreBackend::Module, "", &single)),
            text(&single)
        );
        assert_eq!(
            words(&command(StoreBackend::Functions, "", &single)).join(" "),
            "FCALL rl_tokenbucket 1 user:42 10 2 3 PARTIAL MIN 1"
        );
        assert_eq!(
            words(&command(StoreBackend::Scripts, "abc", &single)).join(" "),
            "EVALSHA abc 1 user:42 rl_tokenbucket 10 2 3 PARTIAL MIN 1"
        );
        let multi = line("RL.MULTI 2 {t}:a {t}:b TOKENBUCKET 5 1 FIXED 10 60 COST 2");
        assert_eq!(
            words(&command(StoreBackend::Functions, "", &multi)).join(" "),
            "FCALL rl_multi 2 {t}:a {t}:b TOKENBUCKET 5 1 FIXED 10 60 COST 2"
        );
        assert_eq!(
            words(&command(StoreBackend::Scripts, "abc", &multi)).join(" "),
            "EVALSHA abc 2 {t}:a {t}:b rl_multi TOKENBUCKET 5 1 FIXED 10 60 COST 2"
        );
        let release = line("RL.RELEASE k req-1");
        assert_eq!(
            words(&command(StoreBackend::Functions, "", &release)).join(" "),
            "FCALL rl_release 1 k req-1"
        );
        let regional = line("RL.REGIONAL {r}floor {r}lease FIXED 2 60 1");
        assert_eq!(
            words(&command(StoreBackend::Functions, "", &regional)).join(" "),
            "FCALL rl_regional 2 {r}floor {r}lease FIXED 2 60 1"
        );
        assert_eq!(
            words(&command(StoreBackend::Scripts, "abc", &regional)).join(" "),
            "EVALSHA abc 2 {r}floor {r}lease rl_regional FIXED 2 60 1"
        );
        let other = line("PING");
        assert_eq!(
            words(&command(StoreBackend::Functions, "", &other)),
            text(&other)
        );
    }

    #[test]
    fn only_its_own_code_gone_is_lost() {
        let not_found = Some("Function not found");
        assert!(lost(StoreBackend::Functions, Some("ERR"), not_found));
        assert!(lost(StoreBackend::Scripts, Some("NOSCRIPT"), None));
        assert!(!lost(StoreBackend::Scripts, Some("ERR"), not_found));
        assert!(!lost(StoreBackend::Functions, Some("NOSCRIPT"), None));
        assert!(!lost(
            StoreBackend::Functions,
            Some("ERR"),
            Some("unknown command")
        ));
        assert!(!lost(StoreBackend::Module, Some("NOSCRIPT"), None));
    }

    #[test]
    fn names_parse_back() {
        for backend in [
            Backend::Auto,
            Backend::Module,
            Backend::Functions,
            Backend::Scripts,
        ] {
            assert_eq!(Backend::parse(backend.as_str()), Some(backend));
        }
        assert_eq!(Backend::parse("Functions"), Some(Backend::Functions));
        assert_eq!(Backend::parse("lua"), None);
    }

    #[test]
    fn the_script_is_the_library_without_its_first_line() {
        assert!(LIBRARY.starts_with("#!lua name=ratelimit\n"));
        assert!(!script().starts_with("#!"));
        assert_eq!(
            script().len() + "#!lua name=ratelimit\n".len(),
            LIBRARY.len()
        );
    }
}
