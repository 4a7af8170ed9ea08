//! The command line (clap, derived): [`Options`] is made of the groups of flags the service
//! reads (each in its own file), the checks that involve several flags in [`parse_with_env`].

mod access;
mod admin;
mod answers;
mod config;
mod connections;
mod environment;
mod limiter;
mod listen;
mod options;
mod reference;
mod requests;
mod runtime;
mod store;
mod tls;
mod usage;
mod values;

use std::ffi::OsString;

use clap::FromArgMatches;
use clap::error::ErrorKind;

#[cfg(test)]
pub use self::config::DEFAULT_MAX_DEPTH;
pub use self::config::FileBounds;
pub use self::connections::Limits;
use self::environment::Environment;
pub use self::listen::Listen;
pub use self::options::Options;
pub use self::requests::Bounds;
use self::usage::usage_error;
use crate::header_settings::{HeaderSettings, TripleNames};
use crate::reference_env;

/// Parses the command line (the program name first), the reference's environment
/// variables standing in for absent flags. `--help` and `--version` are errors of their own
/// kind, printed to stdout with exit code 0 by [`clap::Error::exit`].
pub fn parse<I, T>(args: I) -> Result<Options, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    parse_with_env(args, |variable| std::env::var_os(variable))
}

/// [`parse`], the environment read through `lookup` (see [`environment`]); then the checks
/// and readings that involve several flags: the store, the config directory and the
/// listeners from the reference's settings, TLS files in pairs, the header fields.
pub fn parse_with_env<I, T>(
    args: I,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<Options, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let environment = Environment::read(&args, lookup)?;
    let mut options = Options::from_arg_matches(&environment.matches(&args)?)?;
    let required = |text: &str| usage_error(ErrorKind::MissingRequiredArgument, text);
    let invalid = |named: &str, error: String| {
        usage_error(ErrorKind::InvalidValue, format!("{named}: {error}"))
    };
    let (store, reference) = (&mut options.store, &options.reference);
    let redis = store.redis.as_deref();
    let redis = redis.ok_or_else(|| required("--redis is required (or REDIS_URL)"))?;
    let (urls, cluster) = reference_env::redis_urls(&reference.redis(redis, store.cluster))
        .map_err(|error| invalid(environment.name("--redis", "REDIS_URL"), error))?;
    (store.urls, store.cluster) = (urls, store.cluster || cluster);
    options.config.dir = match (&options.config.config, reference.runtime_dir()) {
        (Some(config), _) => config.clone(),
        (None, Some(runtime)) => runtime,
        (None, None) => return Err(required("--config is required (or RUNTIME_ROOT)")),
    };
    let listen = &mut options.listen;
    listen.grpc = listen::address(listen.grpc_listen, reference.grpc(), Listen::GRPC)
        .map_err(|error| invalid(environment.name("--grpc-host", "GRPC_HOST"), error))?;
    listen.http = listen::address(listen.http_listen, reference.http(), Listen::HTTP)
        .map_err(|error| invalid(environment.name("--http-host", "HOST"), error))?;
    if let Some(which) = options.tls.unpaired() {
        let text = format!("--{which}-tls-cert and --{which}-tls-key go together");
        return Err(usage_error(ErrorKind::MissingRequiredArgument, text));
    }
    if options.admin.unpaired() {
        let text = "--admin-tls-cert and --admin-tls-key go together";
        return Err(usage_error(ErrorKind::MissingRequiredArgument, text));
    }
    let answers = &mut options.answers;
    answers.fields = HeaderSettings {
        draft: answers.headers.into(),
        on_admitted: !answers.headers_on_denied_only,
        legacy: match (reference.limit_headers, answers.legacy_headers) {
            (true, _) => Some(reference.triple_names()),
            (false, true) => Some(TripleNames::legacy()),
            (false, false) => None,
        },
    };
    if listen.rlqs && listen.grpc.is_none() {
        let text = "--rlqs is served on the gRPC listener, which is off";
        return Err(usage_error(ErrorKind::ArgumentConflict, text));
    }
    if listen.grpc.is_none() && listen.http.is_none() {
        let text = "both listeners are off: nothing to serve";
        return Err(usage_error(ErrorKind::ArgumentConflict, text));
    }
    options.from_environment = environment.variables;
    Ok(options)
}

#[cfg(test)]
mod tests;
