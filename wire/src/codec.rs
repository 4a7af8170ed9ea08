//! The one binary encoding of limiters, and of the effects that carry them to replicas.
//!
//! The same bytes travel everywhere a limiter leaves memory: the RDB file, `DUMP`/`RESTORE`
//! payloads (and so `MIGRATE` in a cluster), the AOF rewrite, digests, and the effects
//! replicated through `RL.FX` (see `glue::effects`). One encoder and one strict decoder
//! mean a value accepted from any of those sources has passed the same validation.
//!
//! A limiter: `[version: u8][kind: u8][kind-specific fields]`, little-endian. The version
//! equals the module type's encoding version (the RDB `encver`).
//!
//! An effect: `[expires_at_ms: i64]` then either a limiter (the whole new state; most kinds'
//! change *is* their new state) or, for kinds that replicate an edit rather than their whole
//! state, `[version][kind | 0x80][change fields]`. An expiry of 0 means none.

use redis_ratelimit_core::concurrency::{
    Concurrency, ConcurrencyAction, ConcurrencyChange, HolderId,
};
use redis_ratelimit_core::fixed_window::FixedWindow;
use redis_ratelimit_core::gcra::Gcra;
use redis_ratelimit_core::kinds::{Change, ChangeRef, Kind, KindState, Limiter, LimiterRef};
use redis_ratelimit_core::sliding_log::{SlidingLog, SlidingLogAction, SlidingLogChange};
use redis_ratelimit_core::sliding_window::SlidingWindow;
use redis_ratelimit_core::token_bucket::TokenBucket;

/// Version of the encoding written by this build; also the module type's `encver`.
pub const ENCODING_VERSION: u8 = 1;

/// Set in the kind byte of an effect that carries a change rather than a whole state.
const CHANGE_FLAG: u8 = 0x80;

/// How one state type is written and read back.
trait Fields: Sized {
    fn write(&self, out: &mut Encoded);
    /// Reads and validates the fields (refusing states no evaluation can produce).
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

impl Fields for TokenBucket {
    fn write(&self, out: &mut Encoded) {
        // One push of both fields: the bounds are checked once, on the hot path of every
        // admitted call.
        let mut fields = [0; 16];
        let (empty_at, interval) = fields.split_at_mut(8);
        empty_at.copy_from_slice(&self.empty_at_ns().to_le_bytes());
        interval.copy_from_slice(&self.interval_ns().to_le_bytes());
        out.push(&fields);
    }
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let empty_at_ns = reader.i64()?;
        let interval_ns = reader.u64()?;
        TokenBucket::from_parts(empty_at_ns, interval_ns).ok_or(DecodeError::InvalidState)
    }
}

impl Fields for SlidingWindow {
    fn write(&self, out: &mut Encoded) {
        out.push(&self.window_start_us().to_le_bytes());
        out.push(&self.previous().to_le_bytes());
        out.push(&self.current().to_le_bytes());
    }
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let window_start_us = reader.i64()?;
        let previous = reader.u32()?;
        let current = reader.u32()?;
        SlidingWindow::from_parts(window_start_us, previous, current)
            .ok_or(DecodeError::InvalidState)
    }
}

impl Fields for FixedWindow {
    fn write(&self, out: &mut Encoded) {
        out.push(&self.window_start_us().to_le_bytes());
        out.push(&self.count().to_le_bytes());
    }
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let window_start_us = reader.i64()?;
        let count = reader.u32()?;
        FixedWindow::from_parts(window_start_us, count).ok_or(DecodeError::InvalidState)
    }
}

impl Fields for Gcra {
    fn write(&self, out: &mut Encoded) {
        out.push(&self.tat_ns().to_le_bytes());
    }
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Gcra::from_parts(reader.i64()?).ok_or(DecodeError::InvalidState)
    }
}

impl Fields for SlidingLog {
    fn write(&self, out: &mut Encoded) {
        out.push(&self.as_of_us().to_le_bytes());
        out.push(&u32::try_from(self.len()).unwrap_or(u32::MAX).to_le_bytes());
        for at in self.entries() {
            out.push(&at.to_le_bytes());
        }
    }
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let as_of_us = reader.i64()?;
        let len = reader.u32()?;
        // Check the bytes are there before anything is allocated for them.
        let needed = usize::try_from(len).ok().and_then(|n| n.checked_mul(8));
        if needed.is_none_or(|needed| needed > reader.rest.len()) {
            return Err(DecodeError::BadLength);
        }
        let entries = std::iter::from_fn(|| reader.i64().ok());
        SlidingLog::from_entries(
            as_of_us,
            u64::from(len),
            entries.take(usize::try_from(len).unwrap_or(0)),
        )
        .ok_or(DecodeError::InvalidState)
    }
}

impl Fields for Concurrency {
    /// `[len: u32]` then each holder as `[expiry_us: i64][id len: u8][id]`, in stored order.
    fn write(&self, out: &mut Encoded) {
        out.push(&u32::try_from(self.len()).unwrap_or(u32::MAX).to_le_bytes());
        for (expiry_us, id) in self.holders() {
            out.push(&expiry_us.to_le_bytes());
            out.push(&[u8::try_from(id.len()).unwrap_or(u8::MAX)]);
            out.push(id);
        }
    }
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = reader.u32()?;
        // Each holder takes at least 10 bytes: check they are there before reserving.
        let needed = usize::try_from(len).ok().and_then(|n| n.checked_mul(10));
        if needed.is_none_or(|needed| needed > reader.rest.len()) {
            return Err(DecodeError::BadLength);
        }
        let mut failed = false;
        let holders = std::iter::from_fn(|| {
            let holder = reader.i64().and_then(|expiry_us| {
                let id_len = reader.byte()?;
                Ok((expiry_us, reader.bytes(usize::from(id_len))?))
            });
            failed |= holder.is_err();
            holder.ok()
        })
        .take(usize::try_from(len).unwrap_or(usize::MAX));
        let list = Concurrency::from_holders(u64::from(len), holders);
        match list {
            Some(list) if !failed => Ok(list),
            _ if failed => Err(DecodeError::BadLength),
            _ => Err(DecodeError::InvalidState),
        }
    }
}

fn write_fields(limiter: LimiterRef<'_>, out: &mut Encoded) {
    match limiter {
        LimiterRef::Concurrency(state) => state.write(out),
        LimiterRef::TokenBucket(state) => state.write(out),
        LimiterRef::SlidingWindow(state) => state.write(out),
        LimiterRef::FixedWindow(state) => state.write(out),
        LimiterRef::SlidingLog(state) => state.write(out),
        LimiterRef::Gcra(state) => state.write(out),
    }
}

fn read_fields(kind: Kind, reader: &mut Reader<'_>) -> Result<Limiter, DecodeError> {
    fn read<S: Fields + KindState>(reader: &mut Reader<'_>) -> Result<Limiter, DecodeError> {
        S::read(reader).map(S::into_limiter)
    }
    match kind {
        Kind::TokenBucket => read::<TokenBucket>(reader),
        Kind::SlidingWindow => read::<SlidingWindow>(reader),
        Kind::FixedWindow => read::<FixedWindow>(reader),
        Kind::SlidingLog => read::<SlidingLog>(reader),
        Kind::Gcra => read::<Gcra>(reader),
        Kind::Concurrency => read::<Concurrency>(reader),
    }
}

/// Writes what records one change: the whole new state, except for the kinds whose change is
/// an edit (a log replicates its change, a few integers, not its entries: a hot log with a
/// large limit would otherwise copy up to `limit` entries to every replica on every call).
#[inline]
fn write_change(change: ChangeRef<'_>, out: &mut Encoded) {
    match change {
        ChangeRef::TokenBucket(state) => out.push_state(state),
        ChangeRef::SlidingWindow(state) => out.push_state(state),
        ChangeRef::FixedWindow(state) => out.push_state(state),
        ChangeRef::Gcra(state) => out.push_state(state),
        ChangeRef::SlidingLog(change) => {
            out.push(&[ENCODING_VERSION, CHANGE_FLAG | Kind::SlidingLog as u8]);
            write_log_change(change, out);
        }
        ChangeRef::Concurrency(change) => {
            out.push(&[ENCODING_VERSION, CHANGE_FLAG | Kind::Concurrency as u8]);
            write_holders_change(change, out);
        }
    }
}

/// Reads the change of a kind whose effects carry edits.
fn read_change(kind_byte: u8, reader: &mut Reader<'_>) -> Result<Change, DecodeError> {
    match Kind::from_byte(kind_byte & !CHANGE_FLAG) {
        Some(Kind::SlidingLog) => read_log_change(reader).map(Change::SlidingLog),
        Some(Kind::Concurrency) => {
            read_holders_change(reader).map(|change| Change::Concurrency(change.into()))
        }
        _ => Err(DecodeError::UnknownKind(kind_byte)),
    }
}

fn write_log_change(change: &SlidingLogChange, out: &mut Encoded) {
    out.push(&change.at_us().to_le_bytes());
    out.push(&change.expired().to_le_bytes());
    let (action, units) = match change.action() {
        SlidingLogAction::Admit { units } => (0u8, units),
        SlidingLogAction::Refund { units } => (1u8, units),
    };
    out.push(&[action]);
    out.push(&units.to_le_bytes());
}

/// An in-flight limit's change: one holder, not the list (`[at_us][action][expiry if
/// acquire][id]`).
fn write_holders_change(change: &ConcurrencyChange, out: &mut Encoded) {
    out.push(&change.at_us().to_le_bytes());
    match change.action() {
        ConcurrencyAction::Acquire {
            holder,
            expires_at_us,
        } => {
            out.push(&[0]);
            out.push(&expires_at_us.to_le_bytes());
            write_holder(&holder, out);
        }
        ConcurrencyAction::Release { holder } => {
            out.push(&[1]);
            write_holder(&holder, out);
        }
    }
}

fn read_holders_change(reader: &mut Reader<'_>) -> Result<ConcurrencyChange, DecodeError> {
    let at_us = reader.i64()?;
    let action = match reader.byte()? {
        0 => {
            let expires_at_us = reader.i64()?;
            ConcurrencyAction::Acquire {
                expires_at_us,
                holder: read_holder(reader)?,
            }
        }
        1 => ConcurrencyAction::Release {
            holder: read_holder(reader)?,
        },
        _ => return Err(DecodeError::InvalidState),
    };
    ConcurrencyChange::new(at_us, action).ok_or(DecodeError::InvalidState)
}

/// A holder id: `[len: u8][bytes]`.
fn write_holder(holder: &HolderId, out: &mut Encoded) {
    let id = holder.as_bytes();
    out.push(&[u8::try_from(id.len()).unwrap_or(u8::MAX)]);
    out.push(id);
}

fn read_holder(reader: &mut Reader<'_>) -> Result<HolderId, DecodeError> {
    let len = reader.byte()?;
    HolderId::new(reader.bytes(usize::from(len))?).map_err(|_| DecodeError::InvalidState)
}

fn read_log_change(reader: &mut Reader<'_>) -> Result<SlidingLogChange, DecodeError> {
    let at_us = reader.i64()?;
    let expired = reader.u32()?;
    let action = reader.byte()?;
    let units = reader.u32()?;
    let action = match action {
        0 => SlidingLogAction::Admit { units },
        1 => SlidingLogAction::Refund { units },
        _ => return Err(DecodeError::InvalidState),
    };
    SlidingLogChange::new(at_us, expired, action).ok_or(DecodeError::InvalidState)
}

/// Bytes encoded on the stack before spilling to the heap: enough for every fixed-size kind
/// and every change (an in-flight acquire with a 128-byte holder id takes 156) plus an
/// effect's expiry, so replicating them allocates nothing.
const INLINE_CAPACITY: usize = 160;

/// An encoding under construction or finished.
pub struct Encoded {
    inline: [u8; INLINE_CAPACITY],
    len: usize,
    /// Used instead of `inline` once the encoding outgrows it.
    heap: Option<Vec<u8>>,
}

impl Default for Encoded {
    /// An empty encoding.
    fn default() -> Self {
        Encoded::empty()
    }
}

impl Encoded {
    #[inline]
    fn empty() -> Self {
        Encoded {
            inline: [0; INLINE_CAPACITY],
            len: 0,
            heap: None,
        }
    }

    /// The encoded bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.heap {
            Some(heap) => heap,
            None => self.inline.get(..self.len).unwrap_or_default(),
        }
    }

    #[inline]
    fn push(&mut self, bytes: &[u8]) {
        if self.heap.is_none() {
            let end = self.len.saturating_add(bytes.len());
            if let Some(slot) = self.inline.get_mut(self.len..end) {
                slot.copy_from_slice(bytes);
                self.len = end;
                return;
            }
        }
        self.push_to_heap(bytes);
    }

    /// Moves the encoding to the heap (variable-size kinds) and appends there.
    #[cold]
    #[inline(never)]
    fn push_to_heap(&mut self, bytes: &[u8]) {
        let inline = self.inline.get(..self.len).unwrap_or_default();
        let heap = self.heap.get_or_insert_with(|| {
            let mut heap =
                Vec::with_capacity(inline.len().saturating_add(bytes.len()).saturating_mul(2));
            heap.extend_from_slice(inline);
            heap
        });
        heap.extend_from_slice(bytes);
    }

    /// Appends the encoding of a limiter: version, kind, fields.
    #[inline]
    fn push_limiter(&mut self, limiter: LimiterRef<'_>) {
        self.push(&[ENCODING_VERSION, limiter.kind() as u8]);
        write_fields(limiter, self);
    }

    /// [`Encoded::push_limiter`] for a state of a statically known kind.
    #[inline]
    fn push_state<S: KindState + Fields>(&mut self, state: &S) {
        self.push(&[ENCODING_VERSION, S::KIND as u8]);
        state.write(self);
    }
}

/// Encodes a limiter (for RDB, `DUMP` and digests).
pub fn encode(limiter: LimiterRef<'_>) -> Encoded {
    let mut encoded = Encoded::empty();
    encoded.push_limiter(limiter);
    encoded
}

/// Encodes the effect of a commit: the change and the key's absolute expiry (Unix ms).
pub fn encode_effect(expires_at_ms: i64, change: &Change) -> Encoded {
    encode_change_effect(expires_at_ms, change.as_ref())
}

/// [`encode_effect`] of a borrowed change.
pub fn encode_change_effect(expires_at_ms: i64, change: ChangeRef<'_>) -> Encoded {
    let mut encoded = Encoded::empty();
    write_effect(expires_at_ms, change, &mut encoded);
    encoded
}

/// [`encode_change_effect`] into an empty encoding the caller holds ([`Encoded::default`]),
/// so that a hot path's effect is written where it is kept rather than returned and copied
/// there (192 bytes). Inlined: where the change's kind is known statically (the module's
/// single-key commands), only that kind's encoding is compiled in.
#[inline]
pub fn write_effect(expires_at_ms: i64, change: ChangeRef<'_>, out: &mut Encoded) {
    out.push(&expires_at_ms.to_le_bytes());
    write_change(change, out);
}

/// Encodes an effect that sets a whole limiter (the AOF rewrite's, with expiry 0: Redis
/// appends its own `PEXPIREAT`).
pub fn encode_state_effect(expires_at_ms: i64, limiter: LimiterRef<'_>) -> Encoded {
    let mut encoded = Encoded::empty();
    encoded.push(&expires_at_ms.to_le_bytes());
    encoded.push_limiter(limiter);
    encoded
}

/// What an effect does to its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EffectBody {
    /// Store this limiter (replacing whatever limiter of its kind the key holds).
    State(Limiter),
    /// Apply this change to the key's limiter (creating it if the key is empty).
    Change(Change),
}

/// A decoded `RL.FX` payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectRecord {
    /// Absolute expiry in Unix milliseconds; 0 for none.
    pub expires_at_ms: i64,
    /// What to do.
    pub body: EffectBody,
}

/// Decodes and validates an `RL.FX` payload.
pub fn decode_effect(bytes: &[u8]) -> Result<EffectRecord, DecodeError> {
    let mut reader = Reader { rest: bytes };
    let expires_at_ms = reader.i64()?;
    if expires_at_ms < 0 {
        return Err(DecodeError::InvalidState);
    }
    let [version, kind_byte] = reader.array()?;
    check_version(version)?;
    let body = if kind_byte & CHANGE_FLAG != 0 {
        EffectBody::Change(read_change(kind_byte, &mut reader)?)
    } else {
        EffectBody::State(read_limiter(kind_byte, &mut reader)?)
    };
    reader.finish()?;
    Ok(EffectRecord {
        expires_at_ms,
        body,
    })
}

/// Why bytes are not a valid limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Written by a newer (or unknown) version of the module.
    UnsupportedVersion(u8),
    /// The kind byte names no known limiter.
    UnknownKind(u8),
    /// Too short, or bytes left over after the fields.
    BadLength,
    /// Well-formed, but describing a state no evaluation can produce.
    InvalidState,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::UnsupportedVersion(version) if *version > ENCODING_VERSION => write!(
                f,
                "encoding version {version} was written by a newer module (this one reads up \
                 to {ENCODING_VERSION}); upgrade the module"
            ),
            DecodeError::UnsupportedVersion(version) => {
                write!(
                    f,
                    "encoding version {version} is unknown (not written by this module)"
                )
            }
            DecodeError::UnknownKind(kind) => write!(f, "unknown limiter kind {kind}"),
            DecodeError::BadLength => f.write_str("wrong payload length"),
            DecodeError::InvalidState => f.write_str("field values out of range"),
        }
    }
}

fn check_version(version: u8) -> Result<(), DecodeError> {
    if version == ENCODING_VERSION {
        Ok(())
    } else {
        Err(DecodeError::UnsupportedVersion(version))
    }
}

fn read_limiter(kind_byte: u8, reader: &mut Reader<'_>) -> Result<Limiter, DecodeError> {
    let kind = Kind::from_byte(kind_byte).ok_or(DecodeError::UnknownKind(kind_byte))?;
    read_fields(kind, reader)
}

/// Decodes and validates a limiter.
pub fn decode(bytes: &[u8]) -> Result<Limiter, DecodeError> {
    let mut reader = Reader { rest: bytes };
    let [version, kind_byte] = reader.array()?;
    check_version(version)?;
    let limiter = read_limiter(kind_byte, &mut reader)?;
    reader.finish()?;
    Ok(limiter)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, tail) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(DecodeError::BadLength)?;
        self.rest = tail;
        Ok(*head)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        self.array::<1>().map(|[byte]| byte)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_le_bytes)
    }

    /// The next `len` bytes, borrowed.
    fn bytes(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let (head, tail) = self
            .rest
            .split_at_checked(len)
            .ok_or(DecodeError::BadLength)?;
        self.rest = tail;
        Ok(head)
    }

    /// Refuses bytes left over after the fields.
    fn finish(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::BadLength)
        }
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use redis_ratelimit_core::concurrency::{ConcurrencyAlgorithm, ConcurrencyParams, HolderId};
    use redis_ratelimit_core::fixed_window::FixedWindowAlgorithm;
    use redis_ratelimit_core::sliding_log::SlidingLogAlgorithm;
    use redis_ratelimit_core::sliding_log::SlidingLogParams;
    use redis_ratelimit_core::sliding_window::SlidingWindowAlgorithm;
    use redis_ratelimit_core::window::WindowParams;
    use redis_ratelimit_core::{Algorithm, Commit};

    const NOW_US: i64 = 1_700_000_000_000_000;

    fn one_of_each() -> Vec<Limiter> {
        let window = WindowParams::new(10, 60_000_000, 3).unwrap();
        let log_params = SlidingLogParams::new(10, 60_000_000, 3, 100).unwrap();
        let sliding = SlidingWindowAlgorithm::evaluate(None, &window, NOW_US)
            .commit
            .unwrap();
        let fixed = FixedWindowAlgorithm::evaluate(None, &window, NOW_US)
            .commit
            .unwrap();
        let log = SlidingLogAlgorithm::evaluate(None, &log_params, NOW_US)
            .commit
            .unwrap();
        vec![
            Limiter::TokenBucket(TokenBucket::from_parts(NOW_US * 1000, 333_333_334).unwrap()),
            Limiter::SlidingWindow(sliding.change),
            Limiter::FixedWindow(fixed.change),
            Limiter::SlidingLog(SlidingLogAlgorithm::create(log.change)),
            Limiter::Gcra(Gcra::from_parts(NOW_US * 1000).unwrap()),
            Limiter::Concurrency(holders()),
        ]
    }

    /// The limiter of [`one_of_each`] of this kind: fixtures pick by kind, not by position,
    /// so a kind added to the list moves none of them.
    fn of_kind(kind: Kind) -> Limiter {
        one_of_each()
            .into_iter()
            .find(|limiter| limiter.as_ref().kind() == kind)
            .expect("one_of_each has every kind")
    }

    /// Two holders, the second renewed.
    fn holders() -> Concurrency {
        let params = ConcurrencyParams::new(3, 5_000_000, 100).unwrap();
        let mut state = None;
        for (holder, at) in [(&b"a"[..], 0), (b"bb", 10), (b"a", 20)] {
            let params = params.with_holder(HolderId::new(holder).unwrap());
            let change = ConcurrencyAlgorithm::evaluate(state.as_ref(), &params, NOW_US + at)
                .commit
                .unwrap()
                .change;
            match &mut state {
                Some(state) => ConcurrencyAlgorithm::apply(state, change),
                None => state = Some(ConcurrencyAlgorithm::create(change)),
            }
        }
        state.unwrap()
    }

    #[test]
    fn every_kind_round_trips() {
        for limiter in one_of_each() {
            let encoded = encode(limiter.as_ref());
            assert_eq!(
                encoded.as_bytes()[..2],
                [ENCODING_VERSION, limiter.as_ref().kind() as u8]
            );
            assert_eq!(decode(encoded.as_bytes()), Ok(limiter.clone()));
            let effect = encode_state_effect(42, limiter.as_ref());
            assert_eq!(
                decode_effect(effect.as_bytes()),
                Ok(EffectRecord {
                    expires_at_ms: 42,
                    body: EffectBody::State(limiter)
                })
            );
        }
        assert_eq!(
            encode(of_kind(Kind::TokenBucket).as_ref()).as_bytes().len(),
            18
        );
    }

    #[test]
    fn a_log_replicates_its_change_not_its_entries() {
        let params = SlidingLogParams::new(1000, 60_000_000, 1, 10_000).unwrap();
        let mut log = SlidingLog::default();
        for step in 0..500 {
            let Commit { change, .. } =
                SlidingLogAlgorithm::evaluate(Some(&log), &params, NOW_US + step)
                    .commit
                    .unwrap();
            SlidingLogAlgorithm::apply(&mut log, change);
        }
        let Commit {
            change,
            expires_at_ms,
        } = SlidingLogAlgorithm::evaluate(Some(&log), &params, NOW_US + 500)
            .commit
            .unwrap();
        let effect = encode_effect(expires_at_ms, &Change::SlidingLog(change));
        assert!(
            effect.as_bytes().len() < 40,
            "a few integers, not 500 entries"
        );
        let record = decode_effect(effect.as_bytes()).unwrap();
        assert_eq!(
            record,
            EffectRecord {
                expires_at_ms,
                body: EffectBody::Change(Change::SlidingLog(change))
            }
        );
    }

    #[test]
    fn an_in_flight_limit_replicates_one_holder_not_the_list() {
        let state = holders();
        let params = ConcurrencyParams::new(3, 5_000_000, 100).unwrap();
        let acquire = params.with_holder(HolderId::new(&[b'x'; 128]).unwrap());
        let acquired = ConcurrencyAlgorithm::evaluate(Some(&state), &acquire, NOW_US + 30)
            .commit
            .unwrap();
        let released =
            ConcurrencyAlgorithm::release(Some(&state), &HolderId::new(b"bb").unwrap(), NOW_US)
                .unwrap();
        for commit in [acquired, released] {
            let change = Change::Concurrency(commit.change.into());
            let effect = encode_effect(commit.expires_at_ms, &change);
            assert!(effect.as_bytes().len() <= 8 + 2 + 8 + 1 + 8 + 1 + 128);
            assert_eq!(
                decode_effect(effect.as_bytes()),
                Ok(EffectRecord {
                    expires_at_ms: commit.expires_at_ms,
                    body: EffectBody::Change(change)
                })
            );
            let mut forged = effect.as_bytes().to_vec();
            forged[18] = 7;
            assert_eq!(decode_effect(&forged), Err(DecodeError::InvalidState));
        }
    }

    /// The decode fuzzer starts from fuzz/seeds/decode: each must be a valid state or effect,
    /// so that mutations start from payloads the decoders accept.
    #[test]
    fn the_fuzz_seeds_are_valid_payloads() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/decode");
        let mut seeds = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                decode(&bytes).is_ok() || decode_effect(&bytes).is_ok(),
                "{} is refused: {:?} / {:?}",
                path.display(),
                decode(&bytes),
                decode_effect(&bytes)
            );
            seeds += 1;
        }
        assert!(seeds >= Kind::ALL.len(), "a seed per kind at least");
    }

    #[test]
    fn refuses_what_it_did_not_write() {
        let good = encode(of_kind(Kind::TokenBucket).as_ref())
            .as_bytes()
            .to_vec();
        let mut newer = good.clone();
        newer[0] = ENCODING_VERSION + 1;
        assert_eq!(
            decode(&newer),
            Err(DecodeError::UnsupportedVersion(ENCODING_VERSION + 1))
        );
        let mut alien = good.clone();
        alien[1] = 200;
        assert_eq!(decode(&alien), Err(DecodeError::UnknownKind(200)));
        assert_eq!(decode(&good[..good.len() - 1]), Err(DecodeError::BadLength));
        assert_eq!(
            decode(&[good.clone(), vec![0]].concat()),
            Err(DecodeError::BadLength)
        );
        assert_eq!(decode(&[]), Err(DecodeError::BadLength));
        let mut zero_interval = good.clone();
        zero_interval[10..18].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode(&zero_interval), Err(DecodeError::InvalidState));
        let mut log = encode(of_kind(Kind::SlidingLog).as_ref())
            .as_bytes()
            .to_vec();
        log[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&log),
            Err(DecodeError::BadLength),
            "a forged length allocates nothing"
        );
    }

    #[test]
    fn effects_carry_the_expiry() {
        let Limiter::TokenBucket(state) = of_kind(Kind::TokenBucket).clone() else {
            unreachable!()
        };
        let effect = encode_effect(1_234, &Change::TokenBucket(state));
        assert_eq!(effect.as_bytes().len(), 26);
        assert_eq!(
            decode_effect(effect.as_bytes()),
            Ok(EffectRecord {
                expires_at_ms: 1_234,
                body: EffectBody::State(Limiter::TokenBucket(state))
            })
        );
        assert_eq!(
            decode_effect(&effect.as_bytes()[..7]),
            Err(DecodeError::BadLength)
        );
        let mut negative = effect.as_bytes().to_vec();
        negative[7] = 0x80;
        assert_eq!(decode_effect(&negative), Err(DecodeError::InvalidState));
    }

    /// The bytes of a token bucket and of its effect, written out: a change to how they are
    /// produced (pushed field by field or at once, typed or type-erased) must not move one.
    #[test]
    fn a_token_bucket_and_its_effect_are_these_bytes() {
        let state = TokenBucket::from_parts(0x0102_0304_0506_0708, 0x1112_1314).unwrap();
        let fields = [
            8, 7, 6, 5, 4, 3, 2, 1, // empty_at_ns
            0x14, 0x13, 0x12, 0x11, 0, 0, 0, 0, // interval_ns
        ];
        let limiter = [&[ENCODING_VERSION, Kind::TokenBucket as u8][..], &fields].concat();
        assert_eq!(encode(state.as_limiter()).as_bytes(), limiter);
        let effect = [&0x2122_i64.to_le_bytes()[..], &limiter].concat();
        assert_eq!(
            encode_effect(0x2122, &Change::TokenBucket(state)).as_bytes(),
            effect
        );
        let mut written = Encoded::default();
        write_effect(0x2122, ChangeRef::TokenBucket(&state), &mut written);
        assert_eq!(written.as_bytes(), effect);
    }

    /// The module's single-key path encodes a change of a statically known kind
    /// (`write_effect` of a `ChangeRef`); every other path the type-erased `Change`. Same bytes.
    #[test]
    fn typed_and_type_erased_effects_are_the_same_bytes() {
        let log = SlidingLogParams::new(10, 60_000_000, 3, 100).unwrap();
        let holder = ConcurrencyParams::new(3, 5_000_000, 100)
            .unwrap()
            .with_holder(HolderId::new(b"h").unwrap());
        let mut changes: Vec<Change> = one_of_each()
            .into_iter()
            .filter_map(|limiter| match limiter {
                Limiter::TokenBucket(state) => Some(Change::TokenBucket(state)),
                Limiter::SlidingWindow(state) => Some(Change::SlidingWindow(state)),
                Limiter::FixedWindow(state) => Some(Change::FixedWindow(state)),
                Limiter::Gcra(state) => Some(Change::Gcra(state)),
                Limiter::SlidingLog(_) | Limiter::Concurrency(_) => None,
            })
            .collect();
        changes.push(Change::SlidingLog(
            SlidingLogAlgorithm::evaluate(None, &log, NOW_US)
                .commit
                .unwrap()
                .change,
        ));
        changes.push(Change::Concurrency(Box::new(
            ConcurrencyAlgorithm::evaluate(None, &holder, NOW_US)
                .commit
                .unwrap()
                .change,
        )));
        assert_eq!(changes.len(), Kind::ALL.len());
        for change in &changes {
            let mut written = Encoded::default();
            write_effect(77, change.as_ref(), &mut written);
            assert_eq!(
                written.as_bytes(),
                encode_effect(77, change).as_bytes(),
                "{change:?}"
            );
        }
    }

    #[test]
    fn long_encodings_spill_to_the_heap() {
        let mut encoded = Encoded::empty();
        for byte in 0..=255u8 {
            encoded.push(&[byte]);
        }
        assert!(encoded.heap.is_some());
        assert_eq!(encoded.as_bytes(), (0..=255).collect::<Vec<u8>>());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(limiter) = decode(&bytes) {
                let encoded = encode(limiter.as_ref());
                prop_assert_eq!(encoded.as_bytes(), &bytes[..]);
            }
            let _ = decode_effect(&bytes);
        }

        #[test]
        fn corrupted_encodings_are_refused_or_valid(index in any::<prop::sample::Index>(), byte in any::<u8>()) {
            for limiter in one_of_each() {
                let mut bytes = encode(limiter.as_ref()).as_bytes().to_vec();
                let at = index.index(bytes.len());
                bytes[at] = byte;
                if let Ok(decoded) = decode(&bytes) {
                    let encoded = encode(decoded.as_ref());
                    prop_assert_eq!(encoded.as_bytes(), &bytes[..]);
                }
            }
        }
    }
}
