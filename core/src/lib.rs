//! The pure core: rate-limiting algorithms as functions of (state, parameters, now).
//!
//! Nothing here knows about Redis or reads a clock. The glue reads the server clock once per
//! command and passes it in, which makes every algorithm deterministic, unit-testable with a
//! simulated clock, and safe to run on a primary whose results are replicated as effects.
//!
//! The crate is shared by the Redis module (which runs it on the server's clock) and the
//! client library (whose local fallback limits use the same exact arithmetic). It has no
//! dependencies and no `unsafe` code.

#![forbid(unsafe_code)]

pub mod concurrency;
pub mod decision;
pub mod engine;
pub mod fixed_window;
pub mod gcra;
pub mod grant;
pub mod kinds;
pub mod multi;
pub mod number;
pub mod sliding_log;
pub mod sliding_window;
#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
pub(crate) mod testing;
pub mod time;
pub mod token_bucket;
pub mod window;

pub use decision::{Algorithm, CallCost, Commit, Decision, Evaluation, Retry};
