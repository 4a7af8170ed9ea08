//! Limiters as Redis holds them: one allocation per key, with the kind in the pointer.
//!
//! Redis stores a module value as an opaque `void *` and only ever hands it back to this
//! module (commands and type callbacks); it never dereferences it. Each kind is boxed at its
//! natural size, so a token bucket costs exactly one 16-byte allocation, and the kind is kept
//! in the three low bits of the pointer. Those bits are always zero because every state type
//! is at least 8-byte aligned (checked at compile time below). A tag inside the allocation
//! would instead push a 16-byte state into the allocator's 32-byte size class.
//!
//! This is the only module that turns raw value pointers into references. It has no code per
//! kind: the kinds table of [`redis_ratelimit_core::kinds`] dispatches to the generic functions here.

use std::ffi::c_void;

use redis_ratelimit_core::kinds::{
    Kind, KindState, Limiter, LimiterMut, LimiterRef, StateVisitor, TypeVisitor,
};

const TAG_MASK: usize = 0b111;

const _: () = assert!(
    Kind::ALL.len() <= TAG_MASK + 1,
    "kinds must fit in the pointer tag"
);

// Every state type must leave the tag bits of its address free. (Evaluated at compile time:
// an index out of bounds would fail the build, not panic.)
#[allow(clippy::indexing_slicing)]
const _: () = {
    let mut index = 0;
    while index < Kind::STATE_ALIGNMENTS.len() {
        assert!(
            Kind::STATE_ALIGNMENTS[index] > TAG_MASK,
            "a state type is not 8-byte aligned"
        );
        index += 1;
    }
};

/// Boxes one state of a known kind and returns the tagged pointer Redis will hold.
fn boxed<S: KindState>(state: S) -> *mut c_void {
    let pointer = Box::into_raw(Box::new(state));
    pointer
        .map_addr(|address| address | S::KIND as usize)
        .cast()
}

/// Moves a limiter of any kind to the heap and returns the tagged pointer Redis will hold.
pub fn into_raw(limiter: Limiter) -> *mut c_void {
    struct Boxer;
    impl StateVisitor for Boxer {
        type Output = *mut c_void;
        fn visit<S: KindState>(self, state: S) -> *mut c_void {
            boxed(state)
        }
    }
    limiter.visit(Boxer)
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
    struct Borrower(*const c_void);
    impl TypeVisitor for Borrower {
        type Output = LimiterRef<'static>;
        fn visit<S: KindState>(self) -> LimiterRef<'static> {
            // SAFETY: the tag says the allocation is a Box<S>; the caller guarantees it is
            // live and not mutably borrowed for the lifetime it picks.
            unsafe { &*untagged::<S>(self.0) }.as_limiter()
        }
    }
    Some(kind_of(raw)?.visit_type(Borrower(raw)))
}

/// Mutably borrows the limiter behind a value pointer.
///
/// # Safety
/// `raw` must have been returned by [`into_raw`] or [`boxed`], not yet freed, and not be
/// borrowed at all for `'a`.
pub unsafe fn borrow_mut<'a>(raw: *mut c_void) -> Option<LimiterMut<'a>> {
    struct Borrower(*mut c_void);
    impl TypeVisitor for Borrower {
        type Output = LimiterMut<'static>;
        fn visit<S: KindState>(self) -> LimiterMut<'static> {
            // SAFETY: the tag says the allocation is a Box<S>; the caller guarantees exclusive
            // access for the lifetime it picks.
            unsafe { &mut *untagged::<S>(self.0) }.as_limiter_mut()
        }
    }
    Some(kind_of(raw)?.visit_type(Borrower(raw)))
}

/// Boxes one state of a statically known kind and returns the tagged pointer Redis will hold.
pub fn into_raw_as<S: KindState>(state: S) -> *mut c_void {
    boxed(state)
}

/// Borrows the state behind a value pointer as `S`, its kind known statically: `None` for a
/// pointer without a valid kind (as [`borrow`]), `Err` with the kind it holds if another.
///
/// # Safety
/// As for [`borrow`].
pub unsafe fn borrow_as<'a, S: KindState>(raw: *const c_void) -> Option<Result<&'a S, Kind>> {
    let kind = kind_of(raw)?;
    if kind != S::KIND {
        return Some(Err(kind));
    }
    // SAFETY: the tag says the allocation is a Box<S>; the caller guarantees it is live and
    // not mutably borrowed for the lifetime it picks.
    Some(Ok(unsafe { &*untagged::<S>(raw) }))
}

/// Mutably borrows the state behind a value pointer as `S` (see [`borrow_as`]).
///
/// # Safety
/// As for [`borrow_mut`].
pub unsafe fn borrow_mut_as<'a, S: KindState>(raw: *mut c_void) -> Option<Result<&'a mut S, Kind>> {
    let kind = kind_of(raw)?;
    if kind != S::KIND {
        return Some(Err(kind));
    }
    // SAFETY: the tag says the allocation is a Box<S>; the caller guarantees exclusive access
    // for the lifetime it picks.
    Some(Ok(unsafe { &mut *untagged::<S>(raw) }))
}

/// Frees a value pointer.
///
/// # Safety
/// `raw` must have been returned by [`into_raw`] or [`boxed`] and not freed; it is dangling
/// afterwards.
pub unsafe fn free(raw: *mut c_void) {
    struct Freer(*mut c_void);
    impl TypeVisitor for Freer {
        type Output = ();
        fn visit<S: KindState>(self) {
            // SAFETY: the allocation is a Box<S> owned by the caller of `free`.
            drop(unsafe { Box::from_raw(untagged::<S>(self.0)) });
        }
    }
    if let Some(kind) = kind_of(raw) {
        kind.visit_type(Freer(raw));
    }
}

/// Bytes allocated for the value (what `MEMORY USAGE` adds to the key's overhead).
///
/// # Safety
/// As for [`borrow`].
pub unsafe fn allocated_bytes(raw: *const c_void) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { borrow(raw) }.map_or(0, LimiterRef::allocated_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_ratelimit_core::sliding_log::SlidingLog;
    use redis_ratelimit_core::token_bucket::TokenBucket;

    fn bucket(empty_at_ns: i64) -> TokenBucket {
        TokenBucket::from_parts(empty_at_ns, 1_000).unwrap()
    }

    #[test]
    fn round_trips_through_a_tagged_pointer() {
        let raw = into_raw(Limiter::TokenBucket(bucket(42)));
        // SAFETY: `raw` comes from into_raw, is used by one reference at a time, freed once.
        unsafe {
            assert_eq!(borrow(raw), Some(LimiterRef::TokenBucket(&bucket(42))));
            let Some(LimiterMut::TokenBucket(state)) = borrow_mut(raw) else {
                panic!("a token bucket")
            };
            *state = bucket(43);
            assert_eq!(
                borrow(raw).map(LimiterRef::to_owned),
                Some(Limiter::TokenBucket(bucket(43)))
            );
            assert_eq!(allocated_bytes(raw), 16);
            free(raw);
        }
        let log = into_raw(Limiter::SlidingLog(SlidingLog::default()));
        // SAFETY: as above.
        unsafe {
            assert_eq!(borrow(log).map(LimiterRef::kind), Some(Kind::SlidingLog));
            free(log);
        }
    }
}
