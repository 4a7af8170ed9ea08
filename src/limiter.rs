//! The limiter kinds one `ratelimit` key can hold, and their single binary encoding.
//!
//! The same bytes travel everywhere a limiter leaves memory: the RDB file, `DUMP`/`RESTORE`
//! payloads (and so `MIGRATE` in a cluster), the AOF rewrite, and the effects replicated to
//! replicas through `RL.SETSTATE`. One encoder and one strict decoder mean a value accepted
//! from any of those sources has passed the same validation.
//!
//! Layout, little-endian: `[version: u8][kind: u8][kind-specific fields]`. The version equals
//! the module type's encoding version (the RDB `encver`).

use crate::core::Algorithm;
use crate::core::token_bucket::{TokenBucket, TokenBucketAlgorithm};

/// Version of the encoding written by this build; also the module type's `encver`.
pub const ENCODING_VERSION: u8 = 1;

/// The algorithm a key holds. The discriminant is the kind byte of the encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// [`TokenBucket`], written by `RL.TOKENBUCKET`.
    TokenBucket = 0,
}

impl Kind {
    /// All kinds, in discriminant order.
    pub const ALL: [Kind; 1] = [Kind::TokenBucket];

    /// The kind with this discriminant, if any.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| *kind as u8 == byte)
    }

    /// How error messages name this kind ("key holds a token bucket").
    pub fn describe(self) -> &'static str {
        match self {
            Kind::TokenBucket => "a token bucket",
        }
    }

    /// The ALGORITHM name `RL.PEEK` and `RL.REFUND` use for this kind, if they accept it.
    pub fn command_name(self) -> Option<&'static [u8]> {
        match self {
            Kind::TokenBucket => Some(b"TOKENBUCKET"),
        }
    }
}

/// A state type that is stored under one [`Kind`].
pub trait KindState: Sized {
    /// The kind tag of keys holding this state.
    const KIND: Kind;
    /// Borrows the state as a limiter of its kind.
    fn as_limiter(&self) -> LimiterRef<'_>;
}

impl KindState for TokenBucket {
    const KIND: Kind = Kind::TokenBucket;
    fn as_limiter(&self) -> LimiterRef<'_> {
        LimiterRef::TokenBucket(self)
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

/// An owned limiter of any kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limiter {
    /// A token bucket.
    TokenBucket(TokenBucket),
}

/// A borrowed limiter of any kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimiterRef<'a> {
    /// A token bucket.
    TokenBucket(&'a TokenBucket),
}

impl Limiter {
    /// Borrows the limiter.
    pub fn as_ref(&self) -> LimiterRef<'_> {
        match self {
            Limiter::TokenBucket(state) => LimiterRef::TokenBucket(state),
        }
    }
}

impl LimiterRef<'_> {
    /// The kind of this limiter.
    pub fn kind(self) -> Kind {
        match self {
            LimiterRef::TokenBucket(_) => Kind::TokenBucket,
        }
    }

    /// A deep copy (for `COPY`).
    pub fn to_owned(self) -> Limiter {
        match self {
            LimiterRef::TokenBucket(state) => Limiter::TokenBucket(*state),
        }
    }
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
        match limiter {
            LimiterRef::TokenBucket(state) => {
                self.push(&state.empty_at_ns().to_le_bytes());
                self.push(&state.interval_ns().to_le_bytes());
            }
        }
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

/// A decoded `RL.SETSTATE` payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectRecord {
    /// Absolute expiry in Unix milliseconds; 0 for none.
    pub expires_at_ms: i64,
    /// The state to store.
    pub limiter: Limiter,
}

/// Decodes and validates an `RL.SETSTATE` payload.
pub fn decode_effect(bytes: &[u8]) -> Result<EffectRecord, DecodeError> {
    let (expiry, rest) = bytes
        .split_first_chunk::<8>()
        .ok_or(DecodeError::BadLength)?;
    let expires_at_ms = i64::from_le_bytes(*expiry);
    if expires_at_ms < 0 {
        return Err(DecodeError::InvalidState);
    }
    Ok(EffectRecord {
        expires_at_ms,
        limiter: decode(rest)?,
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
            DecodeError::UnsupportedVersion(version) => write!(
                f,
                "encoding version {version} is not supported (this module reads up to \
                 {ENCODING_VERSION}); upgrade the module"
            ),
            DecodeError::UnknownKind(kind) => write!(f, "unknown limiter kind {kind}"),
            DecodeError::BadLength => f.write_str("wrong payload length"),
            DecodeError::InvalidState => f.write_str("field values out of range"),
        }
    }
}

/// Decodes and validates a limiter.
pub fn decode(bytes: &[u8]) -> Result<Limiter, DecodeError> {
    let mut reader = Reader { rest: bytes };
    let version = reader.byte()?;
    if version != ENCODING_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let kind_byte = reader.byte()?;
    let kind = Kind::from_byte(kind_byte).ok_or(DecodeError::UnknownKind(kind_byte))?;
    let limiter = match kind {
        Kind::TokenBucket => {
            let empty_at_ns = i64::from_le_bytes(reader.array()?);
            let interval_ns = u64::from_le_bytes(reader.array()?);
            TokenBucket::from_parts(empty_at_ns, interval_ns)
                .map(Limiter::TokenBucket)
                .ok_or(DecodeError::InvalidState)?
        }
    };
    if !reader.rest.is_empty() {
        return Err(DecodeError::BadLength);
    }
    Ok(limiter)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, DecodeError> {
        self.array::<1>().map(|[byte]| byte)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, tail) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(DecodeError::BadLength)?;
        self.rest = tail;
        Ok(*head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bucket() -> Limiter {
        Limiter::TokenBucket(
            TokenBucket::from_parts(1_700_000_000_000_000_000, 333_333_334).unwrap(),
        )
    }

    #[test]
    fn round_trips() {
        let limiter = bucket();
        let encoded = encode(limiter.as_ref());
        assert_eq!(encoded.as_bytes().len(), 18);
        assert_eq!(encoded.as_bytes()[..2], [ENCODING_VERSION, 0]);
        assert_eq!(decode(encoded.as_bytes()), Ok(limiter));
    }

    #[test]
    fn effects_carry_the_expiry() {
        let limiter = bucket();
        let Limiter::TokenBucket(state) = limiter.clone();
        let effect = encode_effect::<TokenBucketAlgorithm>(1_234, &state, &state);
        assert_eq!(effect.as_bytes().len(), 26);
        assert_eq!(
            decode_effect(effect.as_bytes()),
            Ok(EffectRecord {
                expires_at_ms: 1_234,
                limiter: limiter.clone()
            })
        );
        let rewrite = encode_state_effect(0, limiter.as_ref());
        assert_eq!(
            decode_effect(rewrite.as_bytes()).map(|e| e.expires_at_ms),
            Ok(0)
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

    #[test]
    fn refuses_what_it_did_not_write() {
        let good = encode(bucket().as_ref()).as_bytes().to_vec();
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
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(limiter) = decode(&bytes) {
                let encoded = encode(limiter.as_ref());
                prop_assert_eq!(encoded.as_bytes(), &bytes[..]);
            }
        }
    }
}
