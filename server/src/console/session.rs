//! The console's browser sessions: a user who signs in with their token gets a random
//! session id in a cookie (`HttpOnly`, `SameSite=Strict`, `Secure` over TLS) and a CSRF
//! token that every write must carry in a header, which a page of another origin cannot
//! read nor set. Sessions are bounded (the least recently used goes first), end after
//! [`IDLE`] unused or [`LIFETIME`] in all, and hold the user's name only: the role is
//! looked up in the users file at each request, so a user removed or made a viewer there
//! loses the rights at once.
//!
//! A CSRF token is an HMAC, under a key drawn at start, of what the ambient credential is
//! (the session id, or a client certificate's name): nothing to store, nothing a page can
//! compute.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The most sessions open at once.
pub const MAX_SESSIONS: usize = 1_024;

/// A session unused this long is closed.
pub const IDLE: Duration = Duration::from_secs(8 * 3_600);

/// A session is closed this long after it opened, used or not.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3_600);

/// The cookie's name.
pub const COOKIE: &str = "rl_console";

/// Why no session could be opened.
#[derive(Debug, thiserror::Error)]
#[error("the system's random source failed")]
pub struct RandomError;

struct Open {
    name: String,
    opened: Instant,
    used: Instant,
}

/// The open sessions and the CSRF key.
pub struct Sessions {
    random: SystemRandom,
    csrf_key: hmac::Key,
    open: Mutex<HashMap<String, Open>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl Sessions {
    /// No session open; a fresh CSRF key.
    pub fn new() -> Result<Self, RandomError> {
        let random = SystemRandom::new();
        let csrf_key = hmac::Key::generate(hmac::HMAC_SHA256, &random).map_err(|_| RandomError)?;
        Ok(Self {
            random,
            csrf_key,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Opens a session for the user `name`: its id (256 random bits, hex).
    pub fn open(&self, name: &str) -> Result<String, RandomError> {
        let mut bytes = [0u8; 32];
        self.random.fill(&mut bytes).map_err(|_| RandomError)?;
        let id = hex(&bytes);
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, session| live(session, now));
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, session)| session.used)
                .map(|(id, _)| id.clone())
        {
            open.remove(&oldest);
        }
        open.insert(
            id.clone(),
            Open {
                name: name.to_string(),
                opened: now,
                used: now,
            },
        );
        Ok(id)
    }

    /// The user of session `id`, if it is open (and now used).
    pub fn user(&self, id: &str) -> Option<String> {
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let session = open.get_mut(id)?;
        if !live(session, now) {
            open.remove(id);
            return None;
        }
        session.used = now;
        Some(session.name.clone())
    }

    /// Closes session `id`.
    pub fn close(&self, id: &str) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// The CSRF token of an ambient credential (`session:ID`, `certificate:NAME`).
    pub fn csrf(&self, credential: &str) -> String {
        hex(hmac::sign(&self.csrf_key, credential.as_bytes()).as_ref())
    }

    /// Whether `given` is the CSRF token of `credential` (in constant time).
    pub fn csrf_matches(&self, credential: &str, given: &str) -> bool {
        super::users::constant_time_eq(self.csrf(credential).as_bytes(), given.as_bytes())
    }
}

fn live(session: &Open, now: Instant) -> bool {
    now.duration_since(session.used) < IDLE && now.duration_since(session.opened) < LIFETIME
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_session_names_its_user_until_closed_and_the_csrf_token_is_its_own() {
        let sessions = Sessions::new().unwrap();
        let id = sessions.open("alice").unwrap();
        assert_eq!(id.len(), 64);
        assert_eq!(sessions.user(&id).as_deref(), Some("alice"));
        let other = sessions.open("bob").unwrap();
        assert_ne!(id, other);
        let token = sessions.csrf(&format!("session:{id}"));
        assert!(sessions.csrf_matches(&format!("session:{id}"), &token));
        assert!(!sessions.csrf_matches(&format!("session:{other}"), &token));
        assert!(!sessions.csrf_matches(&format!("session:{id}"), ""));
        sessions.close(&id);
        assert_eq!(sessions.user(&id), None);
        assert_eq!(sessions.user("not-a-session"), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let sessions = Sessions::new().unwrap();
        let first = sessions.open("a").unwrap();
        for _ in 0..MAX_SESSIONS {
            sessions.open("b").unwrap();
        }
        assert_eq!(sessions.open.lock().unwrap().len(), MAX_SESSIONS);
        assert_eq!(sessions.user(&first), None, "the least recently used went");
    }
}
