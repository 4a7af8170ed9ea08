//! HTTP: a `tower` layer that answers refused requests with `429 Too Many Requests`, and the
//! header fields it sends (usable on their own with any framework).

pub mod headers;
mod layer;

pub use headers::HeaderOptions;
pub use layer::{Check, RateLimitLayer, RateLimitService, Refused};
