//! Parsing command arguments into validated parameters.
//!
//! Pure functions over byte slices, so every error message is unit-tested without a server.
//!
//! - [`value`] reads numbers, durations, algorithm names, and holds the server settings
//!   parsing depends on;
//! - [`quota`] reads each algorithm's parameters;
//! - [`mod@call`] reads a single-key call (`[cost] [PARTIAL [MIN m]]` after the parameters);
//! - [`multi`] reads `RL.MULTI`;
//! - [`regional`] reads `RL.REGIONAL` and `RL.REGIONLEASE`, and the leases they keep;
//! - [`memo`] remembers the last arguments each command parsed;
//! - [`remembered`] says what each command remembers, with its parse as a function of it.

pub mod call;
pub mod memo;
pub mod multi;
pub mod quota;
pub mod regional;
pub mod remembered;
pub mod value;

pub use call::{CallArgs, call, peek, refund};
pub use memo::Memo;
pub use quota::throttle;
pub use value::{Settings, algorithm, duration_us, positive_decimal, positive_integer};
