//! The reference's environment variables, read as the reference reads them (`envconfig`): a
//! boolean in any form Go's `strconv.ParseBool` takes, any other value as its flag's (an
//! empty one is unset); a value refused is named by its variable. Each variable stands in
//! for its flag when the command line does not give it.

use std::ffi::OsString;
use std::sync::OnceLock;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, CommandFactory};

use super::options::Options;
use super::usage::usage_error;
use crate::reference_env;

/// Every argument that reads a variable of the reference's (its `env` attribute), with the
/// variable, in the order the flags are declared.
fn from_environment() -> &'static [(&'static Arg, &'static str)] {
    static COMMAND: OnceLock<clap::Command> = OnceLock::new();
    static READ: OnceLock<Vec<(&'static Arg, &'static str)>> = OnceLock::new();
    READ.get_or_init(|| {
        COMMAND
            .get_or_init(Options::command)
            .get_arguments()
            .filter_map(|arg| Some((arg, arg.get_env()?.to_str()?)))
            .collect()
    })
}

/// The variables read, as flags.
#[derive(Debug, Default)]
pub struct Environment {
    /// The flags the variables stand for (`--flag=value`, or `--flag` for a true boolean).
    pub flags: Vec<OsString>,
    /// The variables read (their names).
    pub variables: Vec<&'static str>,
    /// Each flag given one: the flag, the variable, its value.
    read: Vec<(String, &'static str, OsString)>,
}

/// The command without its environment variables: [`Environment::read`] reads them itself.
pub fn without_env() -> clap::Command {
    from_environment()
        .iter()
        .fold(Options::command(), |command, (arg, _)| {
            command.mut_arg(arg.get_id(), |arg| arg.env(None))
        })
}

impl Environment {
    /// The variables through `lookup` whose flags the command line `args` does not give.
    /// `--help` and `--version` are errors of their own kind, the help as clap writes it,
    /// with each flag's variable.
    pub fn read(
        args: &[OsString],
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, clap::Error> {
        let given = match without_env().try_get_matches_from(args) {
            Ok(given) => given,
            Err(error) if error.exit_code() == 0 => {
                return Err(Options::command()
                    .try_get_matches_from(args)
                    .err()
                    .unwrap_or(error));
            }
            Err(error) => return Err(error),
        };
        let mut environment = Self::default();
        for (arg, variable) in from_environment() {
            let id = arg.get_id().as_str();
            if given.value_source(id) == Some(ValueSource::CommandLine) {
                continue;
            }
            let Some(value) = lookup(variable) else {
                continue;
            };
            let long = format!("--{}", arg.get_long().unwrap_or(id));
            if arg.get_action().takes_values() {
                if value.is_empty() {
                    continue;
                }
                let mut flag = OsString::from(format!("{long}="));
                flag.push(&value);
                environment.flags.push(flag);
            } else if reference_env::parse_bool(variable, &value)
                .map_err(|error| usage_error(ErrorKind::InvalidValue, error))?
            {
                environment.flags.push(long.clone().into());
            }
            environment.variables.push(*variable);
            environment.read.push((long, variable, value));
        }
        Ok(environment)
    }

    /// The command line `args` with the variables' flags after it, matched.
    pub fn matches(&self, args: &[OsString]) -> Result<ArgMatches, clap::Error> {
        without_env()
            .try_get_matches_from(args.iter().chain(&self.flags))
            .map_err(|error| self.named_by_variable(error))
    }

    /// How a value is named in an error: by `variable` when it was read from it, else by
    /// `flag`.
    pub fn name(&self, flag: &'static str, variable: &'static str) -> &'static str {
        match self.variables.contains(&variable) {
            true => variable,
            false => flag,
        }
    }

    /// A refusal of a value read from a variable, said of the variable, not of the flag it
    /// stands in for.
    fn named_by_variable(&self, error: clap::Error) -> clap::Error {
        let Some(ContextValue::String(invalid)) = error.get(ContextKind::InvalidArg) else {
            return error;
        };
        let flag = invalid.split(' ').next().unwrap_or_default();
        let Some((_, variable, value)) = self.read.iter().find(|(long, ..)| long == flag) else {
            return error;
        };
        let reason = match (
            std::error::Error::source(&error),
            error.get(ContextKind::ValidValue),
        ) {
            (Some(source), _) => source.to_string(),
            (None, Some(ContextValue::Strings(valid))) => {
                format!("the possible values are {}", valid.join(", "))
            }
            (None, _) => error.kind().to_string(),
        };
        usage_error(
            error.kind(),
            format!(
                "invalid value {:?} in the environment variable {variable}: {reason}",
                value.to_string_lossy()
            ),
        )
    }
}
