//! What a concurrency limiter stores: its holders, compactly, in one canonical order.

use std::fmt;
use std::mem::size_of;

use super::bounds::{MAX_EXPIRY_US, MAX_STORED_HOLDERS, MIN_TTL_US};

/// Longest holder id, in bytes.
pub const MAX_HOLDER_ID_BYTES: usize = 128;

/// Capacity slack (in elements) allowed on top of twice the length, so small lists do not
/// reallocate on every call.
const SLACK: usize = 8;

/// Why a holder id is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HolderIdError {
    /// An empty id.
    Empty,
    /// An id longer than [`MAX_HOLDER_ID_BYTES`].
    TooLong,
}

/// A caller's id for its slot: 1 to [`MAX_HOLDER_ID_BYTES`] arbitrary bytes, held inline so
/// that parameters stay `Copy` (129 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HolderId {
    len: u8,
    /// The id, then zeros (so that derived equality compares ids).
    bytes: [u8; MAX_HOLDER_ID_BYTES],
}

impl HolderId {
    /// Validates an id: not empty, at most [`MAX_HOLDER_ID_BYTES`] bytes.
    pub fn new(id: &[u8]) -> Result<Self, HolderIdError> {
        if id.is_empty() {
            return Err(HolderIdError::Empty);
        }
        let mut bytes = [0; MAX_HOLDER_ID_BYTES];
        bytes
            .get_mut(..id.len())
            .ok_or(HolderIdError::TooLong)?
            .copy_from_slice(id);
        let len = u8::try_from(id.len()).map_err(|_| HolderIdError::TooLong)?;
        Ok(Self { len, bytes })
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

impl fmt::Debug for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HolderId(\"{}\")", self.as_bytes().escape_ascii())
    }
}

/// The holders of a concurrency limiter: each holder's id and absolute expiry (Unix µs).
///
/// # Representation and memory
///
/// Three buffers in the same order: the expiries (8 bytes each), the ids, each a length byte
/// followed by its bytes, and a 4-byte tag of each id (a hash, derived from the id and never
/// stored on disk or replicated). Finding a holder scans the tags, which a compiler does
/// several at a time, and compares ids only where a tag matches: every acquire and release
/// looks its holder up, so this is their hot loop. A holder costs `13 + id length` bytes (49
/// for a 36-character UUID), plus a fixed header of [`Concurrency::HEADER_BYTES`] (72 on
/// 64-bit targets: three vectors).
/// After every change each buffer's capacity is at most twice its length plus 8 elements,
/// shrinking to 1.5 times its length plus 4 beyond that (as the sliding log does), so
/// reallocations stay amortised O(1) per byte; [`Concurrency::allocated_bytes`] reports
/// header plus capacities.
///
/// # Order
///
/// Holders are sorted by expiry, ties by id (bytewise), so every set of holders has exactly
/// one representation: a replica that applies the same changes holds the same bytes, and
/// [`Concurrency::from_holders`] refuses any other order. Expired holders are therefore a
/// prefix (dropped by one binary search), the earliest expiry is the first and the latest the
/// last; finding a holder by id walks the ids, O(holders).
///
/// Invariants (kept by every constructor and by applying changes): at most
/// [`MAX_STORED_HOLDERS`] holders, ids of 1 to [`MAX_HOLDER_ID_BYTES`] bytes, no two alike,
/// expiries within `[MIN_TTL_US, MAX_EXPIRY_US]`, in the order above.
#[repr(align(8))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Concurrency {
    expiries_us: Vec<i64>,
    ids: Vec<u8>,
    tags: Vec<u32>,
}

impl Concurrency {
    /// Bytes of the fixed part of a holder list, wherever it is stored.
    pub const HEADER_BYTES: usize = size_of::<Concurrency>();

    /// No holder: what a missing key stands for.
    pub(super) const EMPTY: Concurrency = Concurrency {
        expiries_us: Vec::new(),
        ids: Vec::new(),
        tags: Vec::new(),
    };

    /// Rebuilds a stored holder list (decoding RDB, `RESTORE` or replicated payloads) from
    /// `len` holders as (expiry in Unix µs, id) in stored order, refusing what no evaluation
    /// can produce: more than [`MAX_STORED_HOLDERS`], an iterator that yields fewer or more
    /// than `len`, an empty or oversized id, an expiry outside `[MIN_TTL_US, MAX_EXPIRY_US]`,
    /// holders out of order, or one id twice.
    ///
    /// Buffers are reserved with `try_reserve` after the length check, so a forged length can
    /// neither exceed the bound nor abort the process on allocation failure. O(n log n).
    pub fn from_holders<'a, I>(len: u64, holders: I) -> Option<Self>
    where
        I: IntoIterator<Item = (i64, &'a [u8])>,
    {
        if len > MAX_STORED_HOLDERS {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        let mut list = Concurrency::default();
        list.expiries_us.try_reserve_exact(len).ok()?;
        list.tags.try_reserve_exact(len).ok()?;
        let mut holders = holders.into_iter();
        let mut previous: Option<(i64, &[u8])> = None;
        for _ in 0..len {
            let (expiry, id) = holders.next()?;
            let valid = (MIN_TTL_US..=MAX_EXPIRY_US).contains(&expiry)
                && (1..=MAX_HOLDER_ID_BYTES).contains(&id.len())
                && previous.is_none_or(|before| before < (expiry, id));
            if !valid {
                return None;
            }
            list.ids.try_reserve(id.len().saturating_add(1)).ok()?;
            list.push(expiry, id);
            previous = Some((expiry, id));
        }
        if holders.next().is_some() || list.has_duplicate_ids() {
            return None;
        }
        list.trim_slack();
        Some(list)
    }

    /// The holders as (expiry in Unix µs, id), in stored order: what an encoder writes and
    /// [`from_holders`](Self::from_holders) reads back. Includes holders that have expired
    /// since the last change.
    pub fn holders(&self) -> impl ExactSizeIterator<Item = (i64, &[u8])> + '_ {
        self.expiries_us.iter().copied().zip(self.ids())
    }

    /// Number of stored holders, including any that have expired since the last change.
    pub fn len(&self) -> usize {
        self.expiries_us.len()
    }

    /// Whether no holder is stored: the key should be deleted (the last holder was released).
    pub fn is_empty(&self) -> bool {
        self.expiries_us.is_empty()
    }

    /// Bytes this list occupies: the header plus both buffers' capacities, for `MEMORY USAGE`.
    pub fn allocated_bytes(&self) -> usize {
        self.expiries_us
            .capacity()
            .saturating_mul(size_of::<i64>())
            .saturating_add(self.ids.capacity())
            .saturating_add(self.tags.capacity().saturating_mul(size_of::<u32>()))
            .saturating_add(Self::HEADER_BYTES)
    }

    /// The ids, in stored order.
    fn ids(&self) -> Ids<'_> {
        Ids {
            rest: &self.ids,
            left: self.expiries_us.len(),
        }
    }

    /// Every holder as (index, byte offset of its record in `ids`, id).
    fn records(&self) -> impl Iterator<Item = (usize, usize, &[u8])> + '_ {
        self.ids()
            .scan(0usize, |offset, id| {
                let at = *offset;
                *offset = at.saturating_add(id.len()).saturating_add(1);
                Some((at, id))
            })
            .enumerate()
            .map(|(index, (offset, id))| (index, offset, id))
    }

    /// Whether two holders share an id (the order only makes equal ids with equal expiries
    /// adjacent).
    fn has_duplicate_ids(&self) -> bool {
        let mut ids: Vec<&[u8]> = self.ids().collect();
        ids.sort_unstable();
        ids.windows(2).any(|pair| pair.first() == pair.last())
    }

    /// Appends a holder (the caller keeps the order).
    fn push(&mut self, expiry_us: i64, id: &[u8]) {
        self.expiries_us.push(expiry_us);
        self.ids.push(u8::try_from(id.len()).unwrap_or(u8::MAX));
        self.ids.extend_from_slice(id);
        self.tags.push(tag_of(id));
    }

    /// Number of holders expired at `at_us` (expiry ≤ `at_us`): the first ones.
    pub(super) fn expired_at(&self, at_us: i64) -> usize {
        self.expiries_us.partition_point(|&expiry| expiry <= at_us)
    }

    /// The expiry of the holder at `index`.
    pub(super) fn expiry(&self, index: usize) -> Option<i64> {
        self.expiries_us.get(index).copied()
    }

    /// The index of the holder `id`, searching from `from` on.
    pub(super) fn position(&self, id: &[u8], from: usize) -> Option<usize> {
        self.find(id, from).map(|(index, _)| index)
    }

    /// The index and record offset of the holder `id`, looking at the holders from index
    /// `from` on: the tags first, then the ids where a tag matches.
    fn find(&self, id: &[u8], from: usize) -> Option<(usize, usize)> {
        let tag = tag_of(id);
        let (mut index, mut offset) = (0usize, 0usize);
        let mut search = from;
        loop {
            let candidate = self
                .tags
                .get(search..)?
                .iter()
                .position(|&stored| stored == tag)?
                .saturating_add(search);
            // Walk the length bytes from the last record reached to the candidate's.
            while index < candidate {
                let len = usize::from(*self.ids.get(offset)?);
                offset = offset.saturating_add(len).saturating_add(1);
                index = index.saturating_add(1);
            }
            let len = usize::from(*self.ids.get(offset)?);
            let start = offset.saturating_add(1);
            if self.ids.get(start..start.saturating_add(len)) == Some(id) {
                return Some((index, offset));
            }
            search = candidate.saturating_add(1);
        }
    }

    /// Drops the holders expired at `at_us`.
    pub(super) fn drop_expired(&mut self, at_us: i64) {
        let count = self.expired_at(at_us);
        let bytes = self
            .records()
            .nth(count)
            .map_or(self.ids.len(), |(_, offset, _)| offset);
        self.expiries_us.drain(..count);
        self.ids.drain(..bytes);
        self.tags.drain(..count);
    }

    /// Removes the holder `id`, if stored.
    pub(super) fn remove(&mut self, id: &[u8]) {
        if let Some((index, offset)) = self.find(id, 0) {
            self.expiries_us.remove(index);
            self.tags.remove(index);
            let end = offset.saturating_add(id.len()).saturating_add(1);
            self.ids.drain(offset..end.min(self.ids.len()));
        }
    }

    /// Inserts a holder not stored yet at its place in the order, unless the list already
    /// holds [`MAX_STORED_HOLDERS`] (only a diverged replica can get there).
    pub(super) fn insert(&mut self, expiry_us: i64, id: &[u8]) {
        let full = u64::try_from(self.len()).map_or(true, |len| len >= MAX_STORED_HOLDERS);
        if full {
            return;
        }
        let first = self.expiries_us.partition_point(|&e| e < expiry_us);
        let past = self.expiries_us.partition_point(|&e| e <= expiry_us);
        let place = self
            .records()
            .skip(first)
            .find(|&(index, _, stored)| index >= past || stored > id)
            .map_or((self.len(), self.ids.len()), |(index, offset, _)| {
                (index, offset)
            });
        let (index, offset) = place;
        self.expiries_us.insert(index, expiry_us);
        self.tags.insert(index, tag_of(id));
        let record = [u8::try_from(id.len()).unwrap_or(u8::MAX)];
        self.ids
            .splice(offset..offset, record.iter().chain(id).copied());
    }

    /// Shrinks each buffer to 1.5 × its length + 4 when its capacity exceeds twice its length
    /// + 8.
    pub(super) fn trim_slack(&mut self) {
        trim(&mut self.expiries_us);
        trim(&mut self.ids);
        trim(&mut self.tags);
    }
}

/// The tag of an id: its 32-bit FNV-1a hash.
fn tag_of(id: &[u8]) -> u32 {
    id.iter().fold(0x811c_9dc5, |hash: u32, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// Shrinks `buffer` to 1.5 × its length + 4 elements when its capacity exceeds 2 × its length
/// + 8.
fn trim<T>(buffer: &mut Vec<T>) {
    let len = buffer.len();
    if buffer.capacity() > len.saturating_mul(2).saturating_add(SLACK) {
        buffer.shrink_to(len.saturating_add(len / 2).saturating_add(SLACK / 2));
    }
}

/// The ids of a holder list, in order: each stored as a length byte and that many bytes.
struct Ids<'a> {
    rest: &'a [u8],
    /// Holders still to yield.
    left: usize,
}

impl<'a> Iterator for Ids<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, tail) = self.rest.split_first()?;
        let (id, rest) = tail.split_at_checked(usize::from(len))?;
        self.rest = rest;
        self.left = self.left.saturating_sub(1);
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Ids<'_> {}
