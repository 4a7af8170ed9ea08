//! The limiter kinds one `ratelimit` key can hold, and their single binary encoding.
//!
//! The same bytes travel everywhere a limiter leaves memory: the RDB file, `DUMP`/`RESTORE`
//! payloads (and so `MIGRATE` in a cluster), the AOF rewrite, and the effects replicated to
//! replicas through `RL.SETSTATE`. One encoder and one strict decoder mean a value accepted
//! from any of those sources has passed the same validation.
//!
//! Layout, little-endian: `[version: u8][kind: u8][kind-specific fields]`. The version equals
//! the module type's encoding version (the RDB `encver`).

use crate::core::token_bucket::TokenBucket;

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

/// Longest encoding of a fixed-size kind.
const INLINE_CAPACITY: usize = 32;

/// An encoded limiter. Fixed-size kinds are encoded on the stack, so replicating a token
/// bucket allocates nothing.
pub struct Encoded {
    bytes: [u8; INLINE_CAPACITY],
    len: usize,
}

impl Encoded {
    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    fn new(kind: Kind) -> Self {
        let mut encoded = Encoded {
            bytes: [0; INLINE_CAPACITY],
            len: 0,
        };
        encoded.push(&[ENCODING_VERSION, kind as u8]);
        encoded
    }

    fn push(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        if let Some(slot) = self.bytes.get_mut(self.len..end) {
            slot.copy_from_slice(bytes);
            self.len = end;
        }
    }
}

/// Encodes a limiter.
pub fn encode(limiter: LimiterRef<'_>) -> Encoded {
    let mut encoded = Encoded::new(limiter.kind());
    match limiter {
        LimiterRef::TokenBucket(state) => {
            encoded.push(&state.empty_at_ns().to_le_bytes());
            encoded.push(&state.interval_ns().to_le_bytes());
        }
    }
    encoded
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
