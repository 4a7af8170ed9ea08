//! The command language and the bytes of redis-ratelimit, pure and shared.
//!
//! - [`args`]: every command's arguments parsed into validated [`Quota`]s and calls, with
//!   the exact error texts of [`error`];
//! - [`encode`]: the same commands written, for clients, with [`commands`], the table of
//!   every command (name, arity, flags, the Functions library's function, its stats);
//! - [`codec`]: the one binary encoding of limiters (RDB, `DUMP`/`RESTORE`, AOF rewrite) and
//!   of the effects replicated to replicas;
//! - [`slot`]: the hash slot of a key, as Redis Cluster computes it.
//!
//! The Redis module parses and encodes with this crate, and so do the client library (it
//! refuses exactly what the server refuses, with the server's words), the fuzz targets and
//! the benches, none of which link the Redis module API. Nothing here knows about Redis or
//! reads a clock.
//!
//! [`Quota`]: redis_ratelimit_core::kinds::Quota

#![forbid(unsafe_code)]

pub mod args;
pub mod codec;
pub mod commands;
pub mod encode;
pub mod error;
pub mod slot;
