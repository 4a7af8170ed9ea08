//! The shared token a caller presents as `Authorization: Bearer <token>`, in an HTTP header
//! or in gRPC metadata: read from a file at start and refused there if no request could
//! ever carry it; compared in constant time.

use std::path::{Path, PathBuf};

/// Why a token file is refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("{}: {error}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file holds nothing but white space.
    #[error("{}: the file is empty", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A character a header value cannot carry.
    #[error(
        "{}: the token must be visible ASCII (no spaces or control characters), found {found:?} at character {at}",
        path.display()
    )]
    NotVisibleAscii {
        /// The file.
        path: PathBuf,
        /// The character.
        found: char,
        /// Its position, from 1.
        at: usize,
    },
}

/// A token callers must present.
#[derive(Clone, Debug)]
pub struct Token(String);

impl Token {
    /// The token in `path`, surrounding white space (a final newline) trimmed.
    pub fn read(path: &Path) -> Result<Self, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|error| TokenError::Unreadable {
            path: path.to_path_buf(),
            error,
        })?;
        Self::parse(text.trim()).map_err(|problem| match problem {
            None => TokenError::Empty {
                path: path.to_path_buf(),
            },
            Some((at, found)) => TokenError::NotVisibleAscii {
                path: path.to_path_buf(),
                found,
                at,
            },
        })
    }

    /// `Err(None)` when empty, `Err(Some((position, character)))` for the first character
    /// that is not visible ASCII.
    fn parse(text: &str) -> Result<Self, Option<(usize, char)>> {
        if text.is_empty() {
            return Err(None);
        }
        if let Some((index, found)) = text
            .chars()
            .enumerate()
            .find(|(_, c)| !c.is_ascii_graphic())
        {
            return Err(Some((index.saturating_add(1), found)));
        }
        Ok(Self(text.to_string()))
    }

    /// Whether an `Authorization` value presents this token: the `Bearer` scheme in any
    /// case (RFC 9110's schemes are case-insensitive), one or more spaces, the token.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some(scheme) = value.get(..6) else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return false;
        }
        let Some(rest) = value.get(6..) else {
            return false;
        };
        let given = rest.trim_ascii_start();
        if given.len() == rest.len() {
            // No space after the scheme (`Bearerxyz`).
            return false;
        }
        constant_time_eq(given.trim_ascii_end(), self.0.as_bytes())
    }
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive_and_the_token_exact() {
        let token = Token::parse("s3cret").unwrap();
        for value in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER   s3cret",
            "Bearer s3cret ",
        ] {
            assert!(token.admits(Some(value.as_bytes())), "{value}");
        }
        for value in [
            "Bearer s3cre",
            "Bearers3cret",
            "Basic s3cret",
            "Bearer",
            "",
            "s3cret",
        ] {
            assert!(!token.admits(Some(value.as_bytes())), "{value}");
        }
        assert!(!token.admits(None));
    }

    #[test]
    fn a_token_no_header_can_carry_is_refused() {
        assert!(matches!(Token::parse(""), Err(None)));
        assert_eq!(Token::parse("caf\u{e9}").err(), Some(Some((4, '\u{e9}'))));
        assert_eq!(Token::parse("a b").err(), Some(Some((2, ' '))));
    }
}
