//! Who may use the console: the users file (`--admin-users-file`), one user a line,
//!
//! ```text
//! # ROLE  NAME   TOKEN (none: the client certificate whose common name is NAME)
//! editor  alice  3b1f0c9a7d2e4f6a8b0c1d2e3f4a5b6c
//! viewer  bob    9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b
//! editor  carol
//! ```
//!
//! An `editor` reads and changes plans, tenants and overrides; a `viewer` only reads. The
//! name is who the audit stream records. Read at start (refused there with the line and
//! the reason) and again when the file changes (looked at once a second at most, as the
//! service's token file is): a new content that is refused is logged and the users read
//! before stay in force.

use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// The largest users file read.
pub const MAX_USERS_FILE_BYTES: u64 = 64 * 1024;

/// The most users a file may name.
pub const MAX_USERS: usize = 1_000;

/// The shortest token taken (a guessable token is refused at start, not found later).
pub const MIN_TOKEN_CHARS: usize = 16;

/// How often the file is looked at for a change, at most.
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// What a user may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Reads everything, changes nothing.
    Viewer,
    /// Reads and changes plans, tenants and overrides.
    Editor,
}

impl Role {
    /// Its name, as the file and the API write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
        }
    }
}

/// One user of the console.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// What the user may do.
    pub role: Role,
    /// Who the audit stream records.
    pub name: String,
}

/// One line of the file.
#[derive(Clone, Debug)]
struct Entry {
    user: User,
    /// `None`: known by a client certificate.
    token: Option<String>,
}

/// Why a users file is refused.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    /// The file cannot be read.
    #[error("{}: {error}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Larger than a users file can be.
    #[error("{}: over {MAX_USERS_FILE_BYTES} bytes: not a users file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A line is not a user.
    #[error("{}:{line}: {reason}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// No user at all.
    #[error("{}: names no user ('editor NAME TOKEN' or 'viewer NAME TOKEN', one a line)", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// Reads one line: `None` for a blank line or a comment.
fn entry(line: &str) -> Result<Option<Entry>, String> {
    let text = line.trim();
    if text.is_empty() || text.starts_with('#') {
        return Ok(None);
    }
    let words: Vec<&str> = text.split_ascii_whitespace().collect();
    let (role, name, token) = match words.as_slice() {
        [role, name] => (*role, *name, None),
        [role, name, token] => (*role, *name, Some(*token)),
        _ => {
            return Err(
                "write 'ROLE NAME TOKEN' (ROLE editor or viewer; no TOKEN: a client \
                 certificate's common name)"
                    .into(),
            );
        }
    };
    let role = match role {
        "editor" => Role::Editor,
        "viewer" => Role::Viewer,
        other => return Err(format!("unknown role '{other}': editor or viewer")),
    };
    let name_ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if !name_ok {
        return Err(format!(
            "bad name '{}': 1 to 64 ASCII letters, digits, '.', '_', '-' or '@'",
            name.escape_debug()
        ));
    }
    if let Some(token) = token
        && (token.len() < MIN_TOKEN_CHARS || !token.chars().all(|c| c.is_ascii_graphic()))
    {
        return Err(format!(
            "{name}'s token: at least {MIN_TOKEN_CHARS} visible ASCII characters \
             (`openssl rand -hex 16` makes one)"
        ));
    }
    Ok(Some(Entry {
        user: User {
            role,
            name: name.to_string(),
        },
        token: token.map(String::from),
    }))
}

/// Reads the whole file.
fn read_file(path: &Path) -> Result<Vec<Entry>, UsersError> {
    let unreadable = |error| UsersError::Unreadable {
        path: path.to_path_buf(),
        error,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_USERS_FILE_BYTES.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_USERS_FILE_BYTES {
        return Err(UsersError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    parse(&text)
        .map_err(|(line, reason)| UsersError::Line {
            path: path.to_path_buf(),
            line,
            reason,
        })
        .and_then(|entries| {
            if entries.is_empty() {
                Err(UsersError::Empty {
                    path: path.to_path_buf(),
                })
            } else {
                Ok(entries)
            }
        })
}

/// The users of a file's text, or the first bad line (from 1) and why.
fn parse(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let mut entries: Vec<Entry> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index.saturating_add(1);
        let Some(entry) = entry(line).map_err(|reason| (number, reason))? else {
            continue;
        };
        if entries
            .iter()
            .any(|other| other.user.name == entry.user.name)
        {
            return Err((number, format!("'{}' is named twice", entry.user.name)));
        }
        if entry.token.is_some() && entries.iter().any(|other| other.token == entry.token) {
            return Err((number, "this token is another user's too".into()));
        }
        if entries.len() >= MAX_USERS {
            return Err((number, format!("more than {MAX_USERS} users")));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// What tells a changed file: modification time, size, inode.
type Stamp = (Option<SystemTime>, u64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok(), metadata.len(), metadata.ino()))
}

#[derive(Debug)]
struct Current {
    entries: Arc<Vec<Entry>>,
    stamp: Option<Stamp>,
    looked_at: Instant,
}

/// The users in force, read again from their file when it changes. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Users {
    path: Option<PathBuf>,
    current: Arc<Mutex<Current>>,
}

impl Users {
    /// The users of `path`.
    pub fn read(path: &Path) -> Result<Self, UsersError> {
        let stamp = stamp(path);
        let entries = read_file(path)?;
        Ok(Self {
            path: Some(path.to_path_buf()),
            current: Arc::new(Mutex::new(Current {
                entries: Arc::new(entries),
                stamp,
                looked_at: Instant::now(),
            })),
        })
    }

    /// Users given as the file's text, never read again (tests).
    #[cfg(test)]
    pub fn given(text: &str) -> Self {
        let entries = parse(text).unwrap_or_default();
        Self {
            path: None,
            current: Arc::new(Mutex::new(Current {
                entries: Arc::new(entries),
                stamp: None,
                looked_at: Instant::now(),
            })),
        }
    }

    fn entries(&self) -> Arc<Vec<Entry>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(path) = &self.path else {
            return Arc::clone(&current.entries);
        };
        if current.looked_at.elapsed() < RECHECK_EVERY {
            return Arc::clone(&current.entries);
        }
        current.looked_at = Instant::now();
        let now = stamp(path);
        if now == current.stamp {
            return Arc::clone(&current.entries);
        }
        current.stamp = now;
        match read_file(path) {
            Ok(entries) => {
                current.entries = Arc::new(entries);
                tracing::info!(
                    "{}: the console's users file changed: its users are in force",
                    path.display()
                );
            }
            Err(error) => tracing::warn!(
                "{error}; the console's users read before stay in force until the file is fixed"
            ),
        }
        Arc::clone(&current.entries)
    }

    /// The user whose token `given` is (compared in constant time with every token, so
    /// the time taken tells nothing of which nor how near).
    pub fn by_token(&self, given: &[u8]) -> Option<User> {
        let entries = self.entries();
        let mut found = None;
        for entry in entries.iter() {
            let Some(token) = &entry.token else {
                continue;
            };
            if constant_time_eq(given, token.as_bytes()) {
                found = Some(entry.user.clone());
            }
        }
        found
    }

    /// The user named `name`, however known (a session holds the name only: its role is
    /// the file's now).
    pub fn by_name(&self, name: &str) -> Option<User> {
        self.entries()
            .iter()
            .find(|entry| entry.user.name == name)
            .map(|entry| entry.user.clone())
    }

    /// The user a client certificate's common name names (a line without a token).
    pub fn by_certificate(&self, common_name: &str) -> Option<User> {
        self.entries()
            .iter()
            .find(|entry| entry.token.is_none() && entry.user.name == common_name)
            .map(|entry| entry.user.clone())
    }
}

/// Compares without leaking where the first difference is.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_line_is_a_role_a_name_and_a_token() {
        let users = Users::given(
            "# who\neditor alice aaaaaaaaaaaaaaaa1\n\nviewer bob bbbbbbbbbbbbbbbb2\neditor carol\n",
        );
        assert_eq!(
            users.by_token(b"aaaaaaaaaaaaaaaa1"),
            Some(User {
                role: Role::Editor,
                name: "alice".into()
            })
        );
        assert_eq!(
            users.by_token(b"bbbbbbbbbbbbbbbb2").map(|user| user.role),
            Some(Role::Viewer)
        );
        assert_eq!(users.by_token(b"bbbbbbbbbbbbbbbb"), None);
        assert_eq!(users.by_token(b""), None);
        assert_eq!(
            users.by_certificate("carol").map(|user| user.role),
            Some(Role::Editor)
        );
        // A user with a token is not known by a certificate of the same name.
        assert_eq!(users.by_certificate("alice"), None);
    }

    #[test]
    fn a_bad_line_is_named() {
        let refused = |text: &str| parse(text).err().unwrap();
        assert_eq!(refused("admin x yyyyyyyyyyyyyyyyyy").0, 1);
        assert!(
            refused("admin x yyyyyyyyyyyyyyyyyy")
                .1
                .contains("unknown role")
        );
        assert!(refused("editor x short").1.contains("at least 16"));
        assert!(
            refused("editor <b> yyyyyyyyyyyyyyyyyy")
                .1
                .contains("bad name")
        );
        assert_eq!(
            refused("editor a yyyyyyyyyyyyyyyyyy\nviewer a zzzzzzzzzzzzzzzzzz"),
            (2, "'a' is named twice".to_string())
        );
        assert!(
            refused("editor a yyyyyyyyyyyyyyyyyy\nviewer b yyyyyyyyyyyyyyyyyy")
                .1
                .contains("another user's")
        );
        assert!(refused("editor a b c d").1.contains("ROLE NAME TOKEN"));
    }
}
