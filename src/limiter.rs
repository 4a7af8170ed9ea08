//! The limiter kinds one `ratelimit` key can hold, and their single binary encoding.
//!
//! The same bytes travel everywhere a limiter leaves memory: the RDB file, `DUMP`/`RESTORE`
//! payloads (and so `MIGRATE` in a cluster), the AOF rewrite, and the effects replicated to
//! replicas through `RL.SETSTATE`. One encoder and one strict decoder mean a value accepted
//! from any of those sources has passed the same validation.
//!
//! Layout, little-endian: `[version: u8][kind: u8][kind-specific fields]`. The version equals
//! the module type's encoding version (the RDB `encver`).
//!
//! Adding an algorithm means one line in the [`kinds!`] table below, a [`Fields`] impl for
//! its state, and an [`Effect`] impl for its algorithm.

use crate::core::Algorithm;
use crate::core::fixed_window::{FixedWindow, FixedWindowAlgorithm};
use crate::core::gcra::{Gcra, GcraAlgorithm};
use crate::core::sliding_log::{
    SlidingLog, SlidingLogAction, SlidingLogAlgorithm, SlidingLogChange,
};
use crate::core::sliding_window::{SlidingWindow, SlidingWindowAlgorithm};
use crate::core::token_bucket::{TokenBucket, TokenBucketAlgorithm};

/// Version of the encoding written by this build; also the module type's `encver`.
pub const ENCODING_VERSION: u8 = 1;

/// Set in the kind byte of an effect that carries a change rather than a whole state.
const CHANGE_FLAG: u8 = 0x80;

/// A state type that is stored under one [`Kind`].
pub trait KindState: Sized + Clone + 'static {
    /// The kind tag of keys holding this state.
    const KIND: Kind;
    /// Borrows the state as a limiter of its kind.
    fn as_limiter(&self) -> LimiterRef<'_>;
    /// Wraps the state as a limiter of its kind.
    fn into_limiter(self) -> Limiter;
    /// Bytes the state occupies in memory, allocations it owns included (`MEMORY USAGE`).
    fn allocated_bytes(&self) -> usize;
}

/// Something done with a state of a statically known type (see [`Limiter::visit`]).
pub trait StateVisitor {
    /// What the visit produces.
    type Output;
    /// Called with the limiter's state.
    fn visit<S: KindState>(self, state: S) -> Self::Output;
}

/// Something done with the state type of a kind (see [`Kind::visit_type`]).
pub trait TypeVisitor {
    /// What the visit produces.
    type Output;
    /// Called with the kind's state type.
    fn visit<S: KindState>(self) -> Self::Output;
}

/// Declares every kind once: its discriminant (the encoding's kind byte), its state type,
/// how errors name it, and the ALGORITHM name `RL.PEEK`/`RL.REFUND` accept.
macro_rules! kinds {
    ($($variant:ident($state:ty) = $byte:literal, $description:literal, $name:expr;)*) => {
        /// The algorithm a key holds. The discriminant is the kind byte of the encoding.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Kind {
            $(
                #[doc = concat!("A key holding ", $description, ".")]
                $variant = $byte,
            )*
        }

        impl Kind {
            /// All kinds, in discriminant order.
            pub const ALL: &[Kind] = &[$(Kind::$variant),*];

            /// How error messages name this kind ("key holds a token bucket").
            pub fn describe(self) -> &'static str {
                match self { $(Kind::$variant => $description,)* }
            }

            /// The ALGORITHM name `RL.PEEK` and `RL.REFUND` use for this kind, if any.
            pub fn command_name(self) -> Option<&'static [u8]> {
                match self { $(Kind::$variant => $name,)* }
            }

            /// Calls `visitor` with this kind's state type.
            pub fn visit_type<V: TypeVisitor>(self, visitor: V) -> V::Output {
                match self { $(Kind::$variant => visitor.visit::<$state>(),)* }
            }
        }

        /// An owned limiter of any kind.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Limiter {
            $(
                #[doc = concat!("A key holding ", $description, ".")]
                $variant($state),
            )*
        }

        /// A borrowed limiter of any kind.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum LimiterRef<'a> {
            $(
                #[doc = concat!("A key holding ", $description, ".")]
                $variant(&'a $state),
            )*
        }

        impl Limiter {
            /// Borrows the limiter.
            pub fn as_ref(&self) -> LimiterRef<'_> {
                match self { $(Limiter::$variant(state) => LimiterRef::$variant(state),)* }
            }

            /// Calls `visitor` with the state, statically typed.
            pub fn visit<V: StateVisitor>(self, visitor: V) -> V::Output {
                match self { $(Limiter::$variant(state) => visitor.visit(state),)* }
            }
        }

        impl LimiterRef<'_> {
            /// The kind of this limiter.
            pub fn kind(self) -> Kind {
                match self { $(LimiterRef::$variant(_) => Kind::$variant,)* }
            }

            /// A deep copy (for `COPY`).
            pub fn to_owned(self) -> Limiter {
                match self { $(LimiterRef::$variant(state) => Limiter::$variant(state.clone()),)* }
            }

            /// Bytes the limiter occupies in memory.
            pub fn allocated_bytes(self) -> usize {
                match self { $(LimiterRef::$variant(state) => KindState::allocated_bytes(state),)* }
            }

            fn write_fields(self, out: &mut Encoded) {
                match self { $(LimiterRef::$variant(state) => state.write(out),)* }
            }
        }

        fn read_fields(kind: Kind, reader: &mut Reader<'_>) -> Result<Limiter, DecodeError> {
            match kind { $(Kind::$variant => <$state as Fields>::read(reader).map(Limiter::$variant),)* }
        }

        $(
            impl KindState for $state {
                const KIND: Kind = Kind::$variant;
                fn as_limiter(&self) -> LimiterRef<'_> {
                    LimiterRef::$variant(self)
                }
                fn into_limiter(self) -> Limiter {
                    Limiter::$variant(self)
                }
                fn allocated_bytes(&self) -> usize {
                    <$state as Fields>::allocated_bytes(self)
                }
            }
        )*
    };
}

kinds! {
    TokenBucket(TokenBucket) = 0, "a token bucket", Some(b"TOKENBUCKET");
    SlidingWindow(SlidingWindow) = 1, "a sliding window", Some(b"SLIDING");
    FixedWindow(FixedWindow) = 2, "a fixed window", Some(b"FIXED");
    SlidingLog(SlidingLog) = 3, "a sliding log", Some(b"SLIDINGLOG");
    Gcra(Gcra) = 4, "a CL.THROTTLE (GCRA)", None;
}

impl Kind {
    /// The kind with this discriminant, if any.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|kind| *kind as u8 == byte)
    }
}

/// How one state type is written and read back.
trait Fields: Sized {
    fn write(&self, out: &mut Encoded);
    /// Reads and validates the fields (refusing states no evaluation can produce).
    fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError>;
    fn allocated_bytes(&self) -> usize {
        size_of::<Self>()
    }
}

impl Fields for TokenBucket {
    fn write(&self, out: &mut Encoded) {
        out.push(&self.empty_at_ns().to_le_bytes());
        out.push(&self.interval_ns().to_le_bytes());
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
    fn allocated_bytes(&self) -> usize {
        SlidingLog::allocated_bytes(self)
    }
}

/// How an algorithm's commits travel to replicas and the AOF (as `RL.SETSTATE` payloads).
pub trait Effect: Algorithm<State: KindState, Change: Clone> {
    /// Writes what records one commit; by default the whole resulting state.
    fn write_effect(out: &mut Encoded, state_after: &Self::State, _change: &Self::Change) {
        out.push_limiter(state_after.as_limiter());
    }
}

impl Effect for TokenBucketAlgorithm {}
impl Effect for SlidingWindowAlgorithm {}
impl Effect for FixedWindowAlgorithm {}
impl Effect for GcraAlgorithm {}

/// A log replicates its change (a few integers), not the log: a hot log with a large limit
/// would otherwise copy up to `limit` entries to every replica on every call.
impl Effect for SlidingLogAlgorithm {
    fn write_effect(out: &mut Encoded, _state_after: &SlidingLog, change: &SlidingLogChange) {
        out.push(&[ENCODING_VERSION, CHANGE_FLAG | Kind::SlidingLog as u8]);
        out.push(&change.at_us().to_le_bytes());
        out.push(&change.expired().to_le_bytes());
        let (action, units) = match change.action() {
            SlidingLogAction::Admit { units } => (0u8, units),
            SlidingLogAction::Refund { units } => (1u8, units),
        };
        out.push(&[action]);
        out.push(&units.to_le_bytes());
    }
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
/// plus an effect's expiry, so replicating them allocates nothing.
const INLINE_CAPACITY: usize = 48;

/// An encoding under construction or finished.
pub struct Encoded {
    inline: [u8; INLINE_CAPACITY],
    len: usize,
    /// Used instead of `inline` once the encoding outgrows it.
    heap: Option<Vec<u8>>,
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
        limiter.write_fields(self);
    }
}

/// Encodes a limiter (for RDB, `DUMP`, the AOF rewrite and digests).
pub fn encode(limiter: LimiterRef<'_>) -> Encoded {
    let mut encoded = Encoded::empty();
    encoded.push_limiter(limiter);
    encoded
}

/// Encodes an effect: what `RL.SETSTATE` applies on replicas and at AOF load. The absolute
/// expiry travels inside the payload, so the propagated command has a single argument
/// besides the key. An expiry of 0 means "no expiry".
pub fn encode_effect<A: Effect>(
    expires_at_ms: i64,
    state_after: &A::State,
    change: &A::Change,
) -> Encoded {
    let mut encoded = Encoded::empty();
    encoded.push(&expires_at_ms.to_le_bytes());
    A::write_effect(&mut encoded, state_after, change);
    encoded
}

/// Encodes an effect that sets a whole state (used by the AOF rewrite, with no expiry).
pub fn encode_state_effect(expires_at_ms: i64, limiter: LimiterRef<'_>) -> Encoded {
    let mut encoded = Encoded::empty();
    encoded.push(&expires_at_ms.to_le_bytes());
    encoded.push_limiter(limiter);
    encoded
}

/// What an effect does to its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EffectBody {
    /// Store this state (replacing whatever the key holds).
    State(Limiter),
    /// Apply this change to the key's sliding log (creating it if missing).
    SlidingLogChange(SlidingLogChange),
}

/// A decoded `RL.SETSTATE` payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectRecord {
    /// Absolute expiry in Unix milliseconds; 0 for none.
    pub expires_at_ms: i64,
    /// What to do.
    pub body: EffectBody,
}

/// Decodes and validates an `RL.SETSTATE` payload.
pub fn decode_effect(bytes: &[u8]) -> Result<EffectRecord, DecodeError> {
    let mut reader = Reader { rest: bytes };
    let expires_at_ms = reader.i64()?;
    if expires_at_ms < 0 {
        return Err(DecodeError::InvalidState);
    }
    let [version, kind_byte] = reader.array()?;
    check_version(version)?;
    let body = if kind_byte == CHANGE_FLAG | Kind::SlidingLog as u8 {
        EffectBody::SlidingLogChange(read_log_change(&mut reader)?)
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

impl Reader<'_> {
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
mod tests {
    use super::*;
    use crate::core::fixed_window::WindowParams;
    use crate::core::sliding_log::SlidingLogParams;
    use crate::core::{Algorithm, Commit};
    use proptest::prelude::*;

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
        ]
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
        assert_eq!(encode(one_of_each()[0].as_ref()).as_bytes().len(), 18);
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
        let effect = encode_effect::<SlidingLogAlgorithm>(expires_at_ms, &log, &change);
        assert!(
            effect.as_bytes().len() < 40,
            "a few integers, not 500 entries"
        );
        let record = decode_effect(effect.as_bytes()).unwrap();
        assert_eq!(
            record,
            EffectRecord {
                expires_at_ms,
                body: EffectBody::SlidingLogChange(change)
            }
        );
    }

    #[test]
    fn refuses_what_it_did_not_write() {
        let good = encode(one_of_each()[0].as_ref()).as_bytes().to_vec();
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
        let mut log = encode(one_of_each()[3].as_ref()).as_bytes().to_vec();
        log[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&log),
            Err(DecodeError::BadLength),
            "a forged length allocates nothing"
        );
    }

    #[test]
    fn effects_carry_the_expiry() {
        let Limiter::TokenBucket(state) = one_of_each()[0].clone() else {
            unreachable!()
        };
        let effect = encode_effect::<TokenBucketAlgorithm>(1_234, &state, &state);
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

    #[test]
    fn long_encodings_spill_to_the_heap() {
        let mut encoded = Encoded::empty();
        for byte in 0..100u8 {
            encoded.push(&[byte]);
        }
        assert_eq!(encoded.as_bytes(), (0..100).collect::<Vec<u8>>());
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
