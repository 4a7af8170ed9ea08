//! What a store is asked: to take units from a group of limits ([`Acquire`]) or to give
//! them back ([`Refund`]), each limit a [`LimitCall`].

use std::time::Duration;

use crate::algorithm::Algorithm;

/// One limit of a group: its rendered key, algorithm and weight.
#[derive(Clone, Copy, Debug)]
pub struct LimitCall<'a> {
    /// The Redis key.
    pub key: &'a str,
    /// The algorithm and its parameters.
    pub algorithm: &'a Algorithm,
    /// Units this limit is charged per unit of cost.
    pub weight: u64,
    /// Pacing (`MAXWAIT`, token buckets only): admit with a wait up to this long.
    pub max_wait: Option<Duration>,
    /// A regional limit ([`Limit::regional`](crate::Limit::regional)): the suffix that makes
    /// its lease key of its key (the floor's). Such a limit is its group's only one, taken
    /// whole with `RL.REGIONAL key key+suffix ...` (the floor, then the region's lease).
    pub lease_suffix: Option<&'a str>,
}

impl LimitCall<'_> {
    /// The lease key of a regional limit: its key and the lease suffix.
    pub fn lease_key(&self) -> Option<String> {
        self.lease_suffix
            .map(|suffix| format!("{}{suffix}", self.key))
    }
}

/// A request to take units from every limit of a group at once.
#[derive(Clone, Debug)]
pub struct Acquire<'a> {
    /// The limits (keys in one slot when the store is a cluster).
    pub limits: Vec<LimitCall<'a>>,
    /// Units asked for (each limit is charged `units × weight`).
    pub units: u64,
    /// `None`: all or nothing. `Some(min)`: grant as many units as every limit has, up to
    /// `units`, if at least `min` (the module's `PARTIAL MIN min`).
    pub partial_min: Option<u64>,
    /// The caller's id for the slot it takes in every in-flight limit of the group.
    pub holder: Option<&'a str>,
}

/// A request to give units back to every limit of a group (`units × weight` each).
#[derive(Clone, Debug)]
pub struct Refund<'a> {
    /// The limits to refund.
    pub limits: Vec<LimitCall<'a>>,
    /// Units to give back.
    pub units: u64,
    /// The holder whose slots in-flight limits release.
    pub holder: Option<&'a str>,
}

/// One hash the top-keys reporter writes ([`top`](crate::top)): its fields set (each value
/// replacing the field's), then its absolute expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashWrite {
    /// The hash's key.
    pub key: String,
    /// The fields and their values.
    pub fields: Vec<(String, String)>,
    /// When the hash expires, in ms since the Unix epoch (`PEXPIREAT`).
    pub expire_at_ms: u64,
}

/// A hash as read: its fields and values.
pub type HashFields = Vec<(String, String)>;
