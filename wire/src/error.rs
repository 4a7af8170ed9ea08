//! Errors a command reports to its client, with the exact text they are sent as.
//!
//! Everything here is pure data: the glue turns a [`CommandError`] into an error reply in one
//! place, after which nothing has been written or propagated.

use std::fmt;

use redis_ratelimit_core::engine::Refused;
use redis_ratelimit_core::kinds::Kind;
use redis_ratelimit_core::number::NumberError;

/// The rule an argument broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Digits only, no sign or decimal point.
    PositiveInteger,
    /// An optional sign and digits.
    Integer,
    /// Zero or more.
    NotNegative,
    /// A decimal such as `0.5`, `10`, `2.5e3`.
    PositiveDecimal,
    /// `NaN` and infinities are not numbers of anything.
    Finite,
    /// Zero or negative.
    GreaterThanZero,
    /// Does not fit the type.
    TooLarge,
    /// A documented lower bound, completing "must be at least ...".
    AtLeast(&'static str),
    /// A documented bound, completing "must be at most ...".
    AtMost(&'static str),
    /// A bound set by a server setting.
    AtMostSetting {
        /// The setting's current value.
        bound: u64,
        /// The setting's name.
        setting: &'static str,
    },
    /// A rule spanning several arguments, completing "must ...".
    Must(&'static str),
    /// One of the algorithm names commands accept.
    Algorithm,
}

impl Rule {
    /// The rule broken by a number that failed to parse, given what was expected.
    pub fn for_number(error: NumberError, expected: Rule) -> Rule {
        match error {
            NumberError::Malformed => expected,
            NumberError::NotFinite => Rule::Finite,
            NumberError::Negative | NumberError::Zero => Rule::GreaterThanZero,
            NumberError::TooLarge => Rule::TooLarge,
        }
    }
}

/// An argument that was refused, naming it, the rule, and (shortened) what was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError {
    /// The argument's name as the README documents it (`capacity`, `rate`, ...).
    pub name: &'static str,
    /// What it must be.
    pub rule: Rule,
    /// A printable prefix of the value sent, when quoting it helps.
    pub got: Option<String>,
}

/// Longest prefix of a bad argument quoted back in an error.
const QUOTED_BYTES: usize = 32;

/// A printable prefix of a value a client sent (an argument, a key name), for quoting it
/// back in an error.
pub fn quote(value: &[u8]) -> String {
    let mut quoted: String = value
        .iter()
        .take(QUOTED_BYTES)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect();
    if value.len() > QUOTED_BYTES {
        quoted.push_str("...");
    }
    quoted
}

impl ArgError {
    /// An argument error quoting the offending value.
    pub fn new(name: &'static str, rule: Rule, value: &[u8]) -> Self {
        ArgError {
            name,
            rule,
            got: Some(quote(value)),
        }
    }

    /// An error about a combination of arguments, where no single value is to blame.
    pub fn combination(name: &'static str, rule: Rule) -> Self {
        ArgError {
            name,
            rule,
            got: None,
        }
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ERR {} ", self.name)?;
        match self.rule {
            Rule::PositiveInteger => f.write_str("must be a positive integer")?,
            Rule::PositiveDecimal => f.write_str("must be a positive decimal number")?,
            Rule::Integer => f.write_str("must be an integer")?,
            Rule::NotNegative => f.write_str("must be at least 0")?,
            Rule::Finite => f.write_str("must be a finite number")?,
            Rule::GreaterThanZero => f.write_str("must be greater than 0")?,
            Rule::TooLarge => f.write_str("is too large")?,
            Rule::AtLeast(bound) => write!(f, "must be at least {bound}")?,
            Rule::AtMost(bound) => write!(f, "must be at most {bound}")?,
            Rule::AtMostSetting { bound, setting } => {
                write!(f, "must be at most {bound} (the {setting} setting)")?
            }
            Rule::Must(rule) => write!(f, "must {rule}")?,
            Rule::Algorithm => {
                let names: Vec<&str> = Kind::ALL.iter().filter_map(|k| k.command_name()).collect();
                match names.split_last() {
                    Some((last, [])) => write!(f, "must be {last}")?,
                    Some((last, rest)) => write!(f, "must be {} or {last}", rest.join(", "))?,
                    None => f.write_str("must name an algorithm")?,
                }
            }
        }
        match &self.got {
            Some(got) => write!(f, " (got '{got}')"),
            None => Ok(()),
        }
    }
}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// Too few or too many arguments (Redis's standard message).
    WrongArity,
    /// The key holds a value of another Redis type (Redis's standard `WRONGTYPE`).
    WrongType,
    /// An argument broke a rule.
    Argument(ArgError),
    /// The key holds a limiter of another algorithm.
    KindMismatch {
        /// What the key holds.
        held: Kind,
        /// What the command works on.
        wanted: Kind,
    },
    /// A fixed message, already starting with an error code.
    Message(&'static str),
    /// A message built at run time, already starting with an error code.
    Dynamic(String),
    /// An error about one part of a command with several (a limit of `RL.MULTI`): the
    /// subject names the part, the error says what is wrong with it.
    About {
        /// What the error is about ("limit of key 'user:7'").
        subject: String,
        /// The error.
        error: Box<CommandError>,
    },
}

impl CommandError {
    /// The same error, said to be about `subject`.
    pub fn about(self, subject: impl FnOnce() -> String) -> CommandError {
        match self {
            CommandError::WrongArity | CommandError::WrongType => self,
            error => CommandError::About {
                subject: subject(),
                error: Box::new(error),
            },
        }
    }
}

impl From<ArgError> for CommandError {
    fn from(error: ArgError) -> Self {
        CommandError::Argument(error)
    }
}

impl From<Refused> for CommandError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::KindMismatch { held, wanted, .. } => {
                CommandError::KindMismatch { held, wanted }
            }
            Refused::NoLimits => CommandError::Message("ERR RL.MULTI needs at least one key"),
        }
    }
}

/// Redis's standard text for a key of the wrong type.
pub const WRONG_TYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::WrongArity => f.write_str("ERR wrong number of arguments"),
            CommandError::WrongType => f.write_str(WRONG_TYPE),
            CommandError::Argument(error) => error.fmt(f),
            CommandError::KindMismatch { held, wanted } => write!(
                f,
                "ERR key holds {}, not {}: use the matching command or delete the key",
                held.describe(),
                wanted.describe()
            ),
            CommandError::Message(message) => f.write_str(message),
            CommandError::Dynamic(message) => f.write_str(message),
            CommandError::About { subject, error } => {
                let text = error.to_string();
                let (code, detail) = text.split_once(' ').unwrap_or(("ERR", &text));
                write!(f, "{code} {subject}: {detail}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_argument_and_the_rule() {
        let error = ArgError::new("capacity", Rule::PositiveInteger, b"5abc");
        assert_eq!(
            error.to_string(),
            "ERR capacity must be a positive integer (got '5abc')"
        );
        let error = ArgError::new("rate", Rule::Finite, b"inf");
        assert_eq!(
            error.to_string(),
            "ERR rate must be a finite number (got 'inf')"
        );
        let error = ArgError::new("cost", Rule::GreaterThanZero, b"\r\n0");
        assert_eq!(
            error.to_string(),
            "ERR cost must be greater than 0 (got '??0')"
        );
        let long = ArgError::new("rate", Rule::PositiveDecimal, &[b'1'; 1_000_000]);
        assert!(long.to_string().ends_with("11111111...')"));
        assert!(long.to_string().len() < 100);
        let error = CommandError::KindMismatch {
            held: Kind::TokenBucket,
            wanted: Kind::TokenBucket,
        };
        assert!(
            error
                .to_string()
                .starts_with("ERR key holds a token bucket, not a token bucket")
        );
    }
}
