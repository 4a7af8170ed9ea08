//! The pure core: rate-limiting algorithms as functions of (state, parameters, now).
//!
//! Nothing here knows about Redis or reads a clock. The glue reads the server clock once per
//! command and passes it in, which makes every algorithm deterministic, unit-testable with a
//! simulated clock, and safe to run on a primary whose results are replicated as effects.
//!
//! Besides the algorithms it holds the two things every user of them shares: [`kinds`], the
//! only registry of algorithms (one `kinds!` table generates the type-erased states, quotas
//! and changes and their dispatch), and [`engine`], the only engine (what a call on one key
//! or several decides, over whatever holds the states).
//!
//! The crate is shared by the Redis module (which runs the engine over Redis keys, on the
//! server's clock) and the client library (whose local fallback runs it over a map). It has
//! no dependencies and no `unsafe` code.

#![forbid(unsafe_code)]

pub mod concurrency;
pub mod decision;
pub mod engine;
pub mod facts;
pub mod fixed_window;
pub mod gcra;
pub mod grant;
pub mod kinds;
pub mod multi;
pub mod number;
pub mod regional;
pub mod sliding_log;
pub mod sliding_window;
#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
pub(crate) mod testing;
pub mod time;
pub mod token_bucket;
pub mod window;

pub use decision::{Algorithm, CallCost, Commit, Decision, Evaluation, Retry};
pub use facts::{QuotaFacts, Recovery};
