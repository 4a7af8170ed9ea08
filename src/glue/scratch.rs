//! Working memory a command reuses from call to call.
//!
//! A multi-key call needs a few vectors (its open keys, their decisions, the writes). Kept in
//! a thread-local between calls, they stop allocating once they have grown to the largest
//! call seen; commands run on Redis's main thread, one at a time. The buffers are taken out
//! for the call and put back emptied, so nothing (an open key, a Redis string) outlives it;
//! if a call were ever nested, the inner one would get fresh buffers.

use std::cell::Cell;
use std::thread::LocalKey;

/// Buffers that can be emptied for reuse.
pub trait Reusable: Default {
    /// Drops the contents, keeping the capacity.
    fn clear(&mut self);
}

/// Runs `body` with the buffers kept in `slot`, then empties them and puts them back.
pub fn reusing<T: Reusable, R>(
    slot: &'static LocalKey<Cell<Option<T>>>,
    body: impl FnOnce(&mut T) -> R,
) -> R {
    let mut buffers = slot.take().unwrap_or_default();
    let result = body(&mut buffers);
    buffers.clear();
    slot.set(Some(buffers));
    result
}
