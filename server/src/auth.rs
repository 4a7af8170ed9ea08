//! The shared token a caller presents as `Authorization: Bearer <token>`, in an HTTP header
//! or in gRPC metadata: read from a file at start and refused there if no request could
//! ever carry it; compared in constant time.
//!
//! **Rotation.** The file is looked at again at most once a second (by the request that
//! finds the last look older), and read again when it changed (its modification time, size
//! or inode: a Kubernetes secret's symlink swap too): the new token is in force from then
//! on, logged. A new content that is no token (empty, unreadable, not visible ASCII, over
//! [`MAX_TOKEN_FILE_BYTES`]) is logged and the token read before stays in force.

use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

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
    /// The file is larger than a token file can be.
    #[error("{}: over {MAX_TOKEN_FILE_BYTES} bytes: not a token file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
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

/// The largest token file read (a token is a header value: a few hundred bytes at most).
pub const MAX_TOKEN_FILE_BYTES: u64 = 16 * 1024;

/// How often the file is looked at for a change, at most.
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// What tells a changed file: modification time, size, inode.
type Stamp = (Option<SystemTime>, u64, u64);

/// The token in force, and what the file was when last looked at.
#[derive(Debug)]
struct Current {
    token: Arc<str>,
    stamp: Option<Stamp>,
    looked_at: Instant,
}

/// A token callers must present, read again from its file when the file changes. Cheap
/// to clone (clones share the token).
#[derive(Clone, Debug)]
pub struct Token {
    /// The file (`None`: a token given as is, in tests).
    path: Option<PathBuf>,
    current: Arc<Mutex<Current>>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok(), metadata.len(), metadata.ino()))
}

/// The token in the file at `path`, read whole up to the bound.
fn read_file(path: &Path) -> Result<String, TokenError> {
    let unreadable = |error| TokenError::Unreadable {
        path: path.to_path_buf(),
        error,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_TOKEN_FILE_BYTES.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_TOKEN_FILE_BYTES {
        return Err(TokenError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    parse(text.trim()).map_err(|problem| match problem {
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

impl Token {
    /// The token in `path`, surrounding white space (a final newline) trimmed; read again
    /// when the file changes.
    pub fn read(path: &Path) -> Result<Self, TokenError> {
        let stamp = stamp(path);
        let token = read_file(path)?;
        Ok(Self {
            path: Some(path.to_path_buf()),
            current: Arc::new(Mutex::new(Current {
                token: token.into(),
                stamp,
                looked_at: Instant::now(),
            })),
        })
    }

    /// The token in force: the file read again first if it changed since last looked at
    /// (at most once every [`RECHECK_EVERY`]).
    fn current(&self) -> Arc<str> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(path) = &self.path else {
            return Arc::clone(&current.token);
        };
        if current.looked_at.elapsed() < RECHECK_EVERY {
            return Arc::clone(&current.token);
        }
        current.looked_at = Instant::now();
        let now = stamp(path);
        if now == current.stamp {
            return Arc::clone(&current.token);
        }
        current.stamp = now;
        match read_file(path) {
            Ok(token) if *token == *current.token => {}
            Ok(token) => {
                current.token = token.into();
                tracing::info!(
                    "{}: the token file changed: its new token is in force",
                    path.display()
                );
            }
            Err(error) => tracing::warn!(
                "{error}; the token read before stays in force until the file holds a token"
            ),
        }
        Arc::clone(&current.token)
    }

    /// A token given as is, never read again.
    #[cfg(test)]
    fn given(text: &str) -> Result<Self, Option<(usize, char)>> {
        let token = parse(text)?;
        Ok(Self {
            path: None,
            current: Arc::new(Mutex::new(Current {
                token: token.into(),
                stamp: None,
                looked_at: Instant::now(),
            })),
        })
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
        constant_time_eq(given.trim_ascii_end(), self.current().as_bytes())
    }
}

/// `Err(None)` when empty, `Err(Some((position, character)))` for the first character that is
/// not visible ASCII.
fn parse(text: &str) -> Result<String, Option<(usize, char)>> {
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
    Ok(text.to_string())
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
        let token = Token::given("s3cret").unwrap();
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
        assert!(matches!(parse(""), Err(None)));
        assert_eq!(parse("caf\u{e9}").err(), Some(Some((4, '\u{e9}'))));
        assert_eq!(parse("a b").err(), Some(Some((2, ' '))));
    }

    #[test]
    fn a_rotated_token_is_read_again_and_a_bad_one_keeps_the_old() {
        let dir = std::env::temp_dir().join(format!("rls-token-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "first\n").unwrap();
        let token = Token::read(&file).unwrap();
        let admits = |text: &str| token.admits(Some(format!("Bearer {text}").as_bytes()));
        assert!(admits("first"));
        // Rotated (another inode, as a secret's symlink swap gives): in force within the
        // recheck period, the old one refused from then on.
        let next = dir.join("token.next");
        std::fs::write(&next, "second").unwrap();
        std::fs::rename(&next, &file).unwrap();
        let deadline = Instant::now() + RECHECK_EVERY * 5;
        while !admits("second") {
            assert!(Instant::now() < deadline, "the new token was never read");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!admits("first"));
        // A content that is no token: the token read before stays in force.
        for bad in ["", "two words", &"x".repeat(20_000)] {
            let next = dir.join("token.bad");
            std::fs::write(&next, bad).unwrap();
            std::fs::rename(&next, &file).unwrap();
            token.current.lock().unwrap().looked_at = Instant::now() - RECHECK_EVERY;
            assert!(admits("second"), "{bad:.20}");
        }
        std::fs::remove_file(&file).unwrap();
        token.current.lock().unwrap().looked_at = Instant::now() - RECHECK_EVERY;
        assert!(admits("second"), "a missing file keeps the token too");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
