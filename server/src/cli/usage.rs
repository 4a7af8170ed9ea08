//! A usage error in clap's form, with the command's usage line.

use clap::error::ErrorKind;

use super::options::Options;

/// A usage error in clap's form (printed with the usage line, exit code 2).
pub fn usage_error(kind: ErrorKind, message: impl std::fmt::Display) -> clap::Error {
    <Options as clap::CommandFactory>::command().error(kind, message)
}
