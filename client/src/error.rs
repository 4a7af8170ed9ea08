//! Why a limiter could not be built, or a check made (the caller's mistakes, not the
//! store's).

use std::fmt;

use crate::job::JobError;
use crate::key::MissingInput;

/// Why a check could not be made (a mistake of the caller, not of the store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// No policy of that name was registered.
    UnknownPolicy(String),
    /// A key template needs an input the check did not give.
    MissingInput(MissingInput),
    /// A check of cost 0 (it would charge nothing, or be counted as 1: neither is what the
    /// caller meant).
    ZeroCost,
    /// A [`Job`](crate::job::Job) that cannot be checked as given.
    Job(JobError),
    /// The store refused the request as invalid, in its own words (a cost or weight out of
    /// its range, a limit above a server setting): nothing was charged, and no fallback
    /// decided, since retrying or another replica would be refused alike.
    Refused(String),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownPolicy(name) => write!(f, "no policy is named '{name}'"),
            Self::MissingInput(missing) => missing.fmt(f),
            Self::ZeroCost => write!(f, "a check costs at least 1 unit (got 0)"),
            Self::Job(error) => error.fmt(f),
            Self::Refused(why) => write!(f, "the store refused the request: {why}"),
        }
    }
}

impl std::error::Error for CheckError {}

/// Why a limiter could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// Two policies (or two job profiles) with one name.
    DuplicatePolicy(String),
    /// A store-backed policy that cannot be served (no policy source, or a default the
    /// source cannot stand for).
    StorePolicy(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DuplicatePolicy(name) => write!(f, "two policies are named '{name}'"),
            Self::StorePolicy(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for BuildError {}
