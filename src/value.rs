//! Limiters as Redis holds them: one allocation per key, with the kind in the pointer.
//!
//! Redis stores a module value as an opaque `void *` and only ever hands it back to this
//! module (commands and type callbacks); it never dereferences it. Each kind is boxed at its
//! natural size, so a token bucket costs exactly one 16-byte allocation, and the kind is kept
//! in the three low bits of the pointer. Those bits are always zero because every state type
//! is at least 8-byte aligned (checked at compile time below). A tag inside the allocation
//! would instead push a 16-byte state into the allocator's 32-byte size class.
//!
//! This is the only module that turns raw value pointers into references.

use std::ffi::c_void;
use std::mem::{align_of, size_of};

use crate::core::token_bucket::TokenBucket;
use crate::limiter::{Kind, KindState, Limiter, LimiterRef};

const TAG_MASK: usize = 0b111;

const _: () = assert!(
    Kind::ALL.len() <= TAG_MASK + 1,
    "kinds must fit in the pointer tag"
);
const _: () = assert!(
    align_of::<TokenBucket>() > TAG_MASK,
    "tag bits must be free"
);

/// Moves a limiter to the heap and returns the tagged pointer Redis will hold.
pub fn into_raw(limiter: Limiter) -> *mut c_void {
    match limiter {
        Limiter::TokenBucket(state) => boxed(state),
    }
}

/// Boxes one state of a known kind.
pub fn boxed<S: KindState>(state: S) -> *mut c_void {
    let pointer = Box::into_raw(Box::new(state));
    pointer
        .map_addr(|address| address | S::KIND as usize)
        .cast()
}

fn kind_of(raw: *const c_void) -> Option<Kind> {
    // The mask keeps three bits, so the cast cannot truncate.
    Kind::from_byte((raw.addr() & TAG_MASK) as u8)
}

fn untagged<T>(raw: *const c_void) -> *mut T {
    raw.map_addr(|address| address & !TAG_MASK)
        .cast::<T>()
        .cast_mut()
}

/// Borrows the limiter behind a value pointer.
///
/// # Safety
/// `raw` must have been returned by [`into_raw`] or [`boxed`], not yet freed, and not be
/// mutably borrowed for `'a`.
pub unsafe fn borrow<'a>(raw: *const c_void) -> Option<LimiterRef<'a>> {
    match kind_of(raw)? {
        // SAFETY: the tag says the allocation is a Box<TokenBucket>; the caller guarantees it
        // is live and not mutably borrowed.
        Kind::TokenBucket => Some(LimiterRef::TokenBucket(unsafe { &*untagged(raw) })),
    }
}

/// Mutably borrows the state behind a value pointer if it is of kind `S`; otherwise returns
/// the kind the key actually holds.
///
/// # Safety
/// `raw` must have been returned by [`into_raw`] or [`boxed`], not yet freed, and not be
/// borrowed at all for `'a`.
pub unsafe fn state_mut<'a, S: KindState>(raw: *mut c_void) -> Result<&'a mut S, Option<Kind>> {
    match kind_of(raw) {
        // SAFETY: kinds and state types correspond one to one, so the allocation is a Box<S>;
        // the caller guarantees exclusive access.
        Some(kind) if kind == S::KIND => Ok(unsafe { &mut *untagged::<S>(raw) }),
        other => Err(other),
    }
}

/// Borrows the state behind a value pointer if it is of kind `S`; otherwise returns the
/// kind the key actually holds.
///
/// # Safety
/// `raw` must have been returned by [`into_raw`] or [`boxed`], not yet freed, and not be
/// mutably borrowed for `'a`.
pub unsafe fn state_ref<'a, S: KindState>(raw: *const c_void) -> Result<&'a S, Option<Kind>> {
    match kind_of(raw) {
        // SAFETY: kinds and state types correspond one to one, so the allocation is a Box<S>;
        // the caller guarantees no mutable borrow.
        Some(kind) if kind == S::KIND => Ok(unsafe { &*untagged::<S>(raw) }),
        other => Err(other),
    }
}

/// Replaces the limiter behind a value pointer in place when it is of the same kind;
/// otherwise hands the limiter back.
///
/// # Safety
/// As for [`state_mut`].
pub unsafe fn overwrite(raw: *mut c_void, limiter: Limiter) -> Result<(), Limiter> {
    /// Writes `state` over the value if the kinds match.
    unsafe fn put<S: KindState>(
        raw: *mut c_void,
        state: S,
        wrap: fn(S) -> Limiter,
    ) -> Result<(), Limiter> {
        // SAFETY: forwarded from the caller.
        match unsafe { state_mut::<S>(raw) } {
            Ok(slot) => {
                *slot = state;
                Ok(())
            }
            Err(_) => Err(wrap(state)),
        }
    }
    match limiter {
        // SAFETY: forwarded from the caller.
        Limiter::TokenBucket(state) => unsafe { put(raw, state, Limiter::TokenBucket) },
    }
}

/// Frees a value pointer.
///
/// # Safety
/// `raw` must have been returned by [`into_raw`] or [`boxed`] and not freed; it is dangling
/// afterwards.
pub unsafe fn free(raw: *mut c_void) {
    match kind_of(raw) {
        // SAFETY: the allocation is a Box<TokenBucket> owned by the caller.
        Some(Kind::TokenBucket) => drop(unsafe { Box::from_raw(untagged::<TokenBucket>(raw)) }),
        None => {}
    }
}

/// Bytes allocated for the value (what `MEMORY USAGE` adds to the key's overhead).
///
/// # Safety
/// As for [`borrow`].
pub unsafe fn allocated_bytes(raw: *const c_void) -> usize {
    // SAFETY: forwarded from the caller.
    match unsafe { borrow(raw) } {
        Some(LimiterRef::TokenBucket(_)) => size_of::<TokenBucket>(),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(empty_at_ns: i64) -> TokenBucket {
        TokenBucket::from_parts(empty_at_ns, 1_000).unwrap()
    }

    #[test]
    fn round_trips_through_a_tagged_pointer() {
        let raw = into_raw(Limiter::TokenBucket(bucket(42)));
        // SAFETY: `raw` comes from into_raw, is used by one reference at a time, freed once.
        unsafe {
            assert_eq!(borrow(raw), Some(LimiterRef::TokenBucket(&bucket(42))));
            let state = state_mut::<TokenBucket>(raw).unwrap();
            *state = bucket(43);
            assert_eq!(
                borrow(raw).map(LimiterRef::to_owned),
                Some(Limiter::TokenBucket(bucket(43)))
            );
            assert_eq!(allocated_bytes(raw), 16);
            free(raw);
        }
    }
}
