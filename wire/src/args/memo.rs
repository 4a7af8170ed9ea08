//! Remembering the last arguments a command parsed.
//!
//! Services call a limiter with the same limits over and over, and parsing them (a decimal
//! rate especially) costs about as much as deciding the call. A [`Memo`] keeps one entry: the
//! arguments (each prefixed with its length, so `"1" "23"` and `"12" "3"` differ), a
//! `context` value the parse also depends on (server settings), and what they parsed to.
//! Arguments too long to remember are parsed every time.

use std::cell::RefCell;

use crate::error::CommandError;

/// Room for the arguments a memo remembers, each with a length byte: enough for the limits
/// of a multi-limit call over a few keys.
const MEMO_BYTES: usize = 160;

/// The last arguments one command parsed successfully, and what they parsed to.
pub struct Memo<P> {
    last: RefCell<Option<(MemoKey, P)>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct MemoKey {
    bytes: [u8; MEMO_BYTES],
    len: usize,
    context: u64,
}

impl MemoKey {
    fn new(args: &[&[u8]], context: u64) -> Option<Self> {
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
    fn matches(&self, args: &[&[u8]], context: u64) -> bool {
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

impl<P> Memo<P> {
    /// An empty memo.
    pub const fn new() -> Self {
        Memo {
            last: RefCell::new(None),
        }
    }

    /// Runs `then` with what `args` parse to under `context`: the remembered value if they
    /// are the last arguments parsed with the same context, otherwise `parse(args)` (which is
    /// remembered if valid). Lends the value rather than copying it out.
    pub fn with<R>(
        &self,
        args: &[&[u8]],
        context: u64,
        parse: impl FnOnce(&[&[u8]]) -> Result<P, CommandError>,
        then: impl FnOnce(&P) -> R,
    ) -> Result<R, CommandError> {
        // Commands do not nest, so the memo is never borrowed here; if it were, parsing
        // without it is still right.
        let Ok(mut last) = self.last.try_borrow_mut() else {
            return parse(args).map(|parsed| then(&parsed));
        };
        if let Some((key, parsed)) = last.as_ref() {
            if key.matches(args, context) {
                return Ok(then(parsed));
            }
        }
        let parsed = parse(args)?;
        match MemoKey::new(args, context) {
            Some(key) => Ok(then(&last.insert((key, parsed)).1)),
            None => Ok(then(&parsed)),
        }
    }
}

impl<P> Default for Memo<P> {
    fn default() -> Self {
        Memo::new()
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    /// A parse that counts how often it runs.
    fn counting(runs: &RefCell<u32>) -> impl Fn(&[&[u8]]) -> Result<Vec<u8>, CommandError> {
        |args| {
            *runs.borrow_mut() += 1;
            if args.first() == Some(&&b"bad"[..]) {
                return Err(CommandError::WrongArity);
            }
            Ok(args.concat())
        }
    }

    #[test]
    fn parses_once_per_distinct_arguments() {
        let memo = Memo::new();
        let runs = RefCell::new(0);
        let parse = counting(&runs);
        let call = |args: &[&[u8]], context| memo.with(args, context, &parse, Vec::clone);
        assert_eq!(call(&[b"10", b"0.5"], 0), Ok(b"100.5".to_vec()));
        assert_eq!(call(&[b"10", b"0.5"], 0), Ok(b"100.5".to_vec()));
        assert_eq!(*runs.borrow(), 1, "remembered");
        assert_eq!(call(&[b"1", b"00.5"], 0), Ok(b"100.5".to_vec()));
        assert_eq!(*runs.borrow(), 2, "length-prefixed, not joined");
        assert_eq!(call(&[b"1", b"00.5"], 7), Ok(b"100.5".to_vec()));
        assert_eq!(*runs.borrow(), 3, "the context counts");
        assert_eq!(call(&[b"bad"], 0), Err(CommandError::WrongArity));
        assert_eq!(call(&[b"bad"], 0), Err(CommandError::WrongArity));
        assert_eq!(*runs.borrow(), 5, "errors are not remembered");
        let long = vec![b'1'; 300];
        assert_eq!(call(&[&long], 0), Ok(long.clone()));
        assert_eq!(call(&[&long], 0), Ok(long.clone()));
        assert_eq!(*runs.borrow(), 7, "too long to remember: parsed every time");
    }
}
