//! Remembering the last arguments a command parsed.
//!
//! Services call a limiter with the same limits over and over, and parsing them (a decimal
//! rate especially) costs about as much as deciding the call. A [`Memo`] keeps one entry: the
//! arguments (each prefixed with its length, so `"1" "23"` and `"12" "3"` differ), a
//! `context` the parse also depends on (the algorithm, the server settings, `RL.MULTI`'s key
//! count), and what they parsed to. Arguments too long to remember are parsed every time.
//!
//! A remembered value is only right if it is what a fresh parse would give, so the memo
//! compares *everything* the parse can see. That is enforced by the parse's type: a plain
//! `fn(arguments, context)`, not a closure, so it cannot capture anything the memo does not
//! compare (an `RL.MULTI` key count captured that way let a call with more keys than limits
//! reuse the parse of a valid one).

use std::cell::RefCell;

/// Room for the arguments a memo remembers, each with a length byte: enough for the limits
/// of a multi-limit call over a few keys.
const MEMO_BYTES: usize = 160;

/// How a command's arguments are parsed: a function of the remembered arguments and the
/// context alone.
pub type Parse<C, P, E> = fn(&[&[u8]], C) -> Result<P, E>;

/// The last arguments one command parsed successfully, and what they parsed to.
pub struct Memo<C, P> {
    last: RefCell<Option<(MemoKey<C>, P)>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct MemoKey<C> {
    bytes: [u8; MEMO_BYTES],
    len: usize,
    context: C,
}

impl<C: Copy + Eq> MemoKey<C> {
    fn new(args: &[&[u8]], context: C) -> Option<Self> {
        let mut key = MemoKey {
            bytes: [0; MEMO_BYTES],
            len: 0,
            context,
        };
        for arg in args {
            let len = u8::try_from(arg.len()).ok()?;
            let end = key.len.checked_add(1)?.checked_add(arg.len())?;
            let (length_byte, rest) = key.bytes.get_mut(key.len..end)?.split_first_mut()?;
            *length_byte = len;
            rest.copy_from_slice(arg);
            key.len = end;
        }
        Some(key)
    }

    /// Whether `args` and `context` are what this key remembers (compared in place).
    fn matches(&self, args: &[&[u8]], context: C) -> bool {
        if self.context != context {
            return false;
        }
        let mut rest = self.bytes.get(..self.len).unwrap_or_default();
        for arg in args {
            let Some((&len, tail)) = rest.split_first() else {
                return false;
            };
            match tail.split_at_checked(usize::from(len)) {
                Some((bytes, tail)) if bytes == *arg => rest = tail,
                _ => return false,
            }
        }
        rest.is_empty()
    }
}

impl<C: Copy + Eq, P> Memo<C, P> {
    /// An empty memo.
    pub const fn new() -> Self {
        Memo {
            last: RefCell::new(None),
        }
    }

    /// Runs `then` with what `args` parse to under `context`: the remembered value if they
    /// are the last arguments parsed with the same context, otherwise `parse(args, context)`
    /// (remembered if valid; errors are not). Lends the value rather than copying it out.
    pub fn with<R, E>(
        &self,
        args: &[&[u8]],
        context: C,
        parse: Parse<C, P, E>,
        then: impl FnOnce(&P) -> R,
    ) -> Result<R, E> {
        // Commands do not nest, so the memo is never borrowed here; if it were, parsing
        // without it is still right.
        let Ok(mut last) = self.last.try_borrow_mut() else {
            return parse(args, context).map(|parsed| then(&parsed));
        };
        if let Some((key, parsed)) = last.as_ref() {
            if key.matches(args, context) {
                return Ok(then(parsed));
            }
        }
        let parsed = parse(args, context)?;
        match MemoKey::new(args, context) {
            Some(key) => Ok(then(&last.insert((key, parsed)).1)),
            None => Ok(then(&parsed)),
        }
    }
}

impl<C: Copy + Eq, P> Default for Memo<C, P> {
    fn default() -> Self {
        Memo::new()
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::error::CommandError;

    thread_local! {
        static RUNS: Cell<u32> = const { Cell::new(0) };
    }

    /// A parse that counts how often it runs.
    fn counting(args: &[&[u8]], context: u8) -> Result<Vec<u8>, CommandError> {
        RUNS.with(|runs| runs.set(runs.get() + 1));
        if args.first() == Some(&&b"bad"[..]) {
            return Err(CommandError::WrongArity);
        }
        Ok([&[context][..], &args.concat()].concat())
    }

    fn runs() -> u32 {
        RUNS.with(Cell::get)
    }

    #[test]
    fn parses_once_per_distinct_arguments_and_context() {
        let memo = Memo::new();
        let call = |args: &[&[u8]], context| memo.with(args, context, counting, Vec::clone);
        let start = runs();
        assert_eq!(call(&[b"10", b"0.5"], 0), Ok(b"\x00100.5".to_vec()));
        assert_eq!(call(&[b"10", b"0.5"], 0), Ok(b"\x00100.5".to_vec()));
        assert_eq!(runs() - start, 1, "remembered");
        assert_eq!(call(&[b"1", b"00.5"], 0), Ok(b"\x00100.5".to_vec()));
        assert_eq!(runs() - start, 2, "length-prefixed, not joined");
        assert_eq!(call(&[b"1", b"00.5"], 7), Ok(b"\x07100.5".to_vec()));
        assert_eq!(runs() - start, 3, "the context counts");
        assert_eq!(call(&[b"bad"], 0), Err(CommandError::WrongArity));
        assert_eq!(call(&[b"bad"], 0), Err(CommandError::WrongArity));
        assert_eq!(runs() - start, 5, "errors are not remembered");
        let long = vec![b'1'; 300];
        assert_eq!(call(&[&long], 0), Ok([&[0][..], &long].concat()));
        assert_eq!(call(&[&long], 0), Ok([&[0][..], &long].concat()));
        assert_eq!(runs() - start, 7, "too long to remember: parsed every time");
    }
}
