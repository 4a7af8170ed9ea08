//! A region's lease in its key: a plain Redis string holding the units left, whose absolute
//! expiry is the lease's end (see `redis_ratelimit_wire::args::regional`). Redis removes it
//! when it lapses, and a regional call also checks the end against its own `now`, so a lease
//! is never spent after it ends.

use redis_module::raw;

use super::api::{Call, Key, KeyContent, KeyMode};
use super::store::limiter_type;
use redis_ratelimit_core::regional::Lease;
use redis_ratelimit_core::time::US_PER_MS;
use redis_ratelimit_wire::args::regional::{NOT_A_LEASE, stored_units};
use redis_ratelimit_wire::error::CommandError;

/// An open key that is empty or holds a lease.
pub struct LeaseKey {
    key: Key,
    name: *mut raw::RedisModuleString,
    lease: Option<Lease>,
}

/// Microseconds in a millisecond, signed.
const US_PER_MS_I64: i64 = US_PER_MS as i64;

impl LeaseKey {
    /// Opens `name` for reading and writing: WRONGTYPE if it holds anything but a string (a
    /// limiter included), an error if it holds a string that is not a lease.
    pub fn open(call: &Call<'_>, name: *mut raw::RedisModuleString) -> Result<Self, CommandError> {
        let Some(key) = call.open_key(name, KeyMode::Write) else {
            return Err(CommandError::Message("ERR the key could not be opened"));
        };
        let lease = match key.content(limiter_type()) {
            KeyContent::Empty => None,
            KeyContent::Limiter(_) => return Err(CommandError::WrongType),
            KeyContent::Other if !key.is_string() => return Err(CommandError::WrongType),
            KeyContent::Other => {
                let units = stored_units(key.string_bytes()).ok_or(NOT_A_LEASE)?;
                let expires_at_ms = key.expires_at_ms().ok_or(NOT_A_LEASE)?;
                Some(Lease {
                    units,
                    expires_at_us: expires_at_ms.saturating_mul(US_PER_MS_I64),
                })
            }
        };
        Ok(LeaseKey { key, name, lease })
    }

    /// The key's name.
    pub fn name(&self) -> *mut raw::RedisModuleString {
        self.name
    }

    /// The lease the key holds, if any (live or not: the caller checks it against `now`).
    pub fn lease(&self) -> Option<Lease> {
        self.lease
    }

    /// Writes `units` (their decimal digits) until `expires_at_ms`, replacing the key's value.
    pub fn store(
        &mut self,
        call: &Call<'_>,
        digits: &[u8],
        units: u64,
        expires_at_ms: i64,
    ) -> Result<(), CommandError> {
        let stored = call
            .create_string(digits)
            .is_some_and(|value| self.key.set_string(value.as_ptr()));
        if !stored {
            return Err(CommandError::Message("ERR the lease could not be written"));
        }
        self.key.expire_at_ms(expires_at_ms);
        self.lease = Some(Lease {
            units,
            expires_at_us: expires_at_ms.saturating_mul(US_PER_MS_I64),
        });
        Ok(())
    }
}
