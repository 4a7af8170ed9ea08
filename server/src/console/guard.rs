//! Who is calling the console, and what they may do.
//!
//! A caller is known by, in order: the client certificate of a mutual-TLS connection
//! (its common name, a user without a token in the users file), an `Authorization: Bearer`
//! token (scripts), or the session cookie a sign-in set (the page). Every route but the
//! page's static files and the sign-in needs one (401 otherwise).
//!
//! A write (every `POST`) needs, besides: a JSON body (`Content-Type: application/json`,
//! which a cross-origin page cannot send without a preflight this listener never grants);
//! for a credential the browser sends by itself (the cookie, the certificate), the CSRF
//! token of that credential in `X-CSRF-Token` and, when the browser names one, its own
//! `Origin` (a forged cross-site request has neither); and the `editor` role. A viewer is
//! refused every write, whatever it carries.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::json::problem;
use super::session::COOKIE;
use super::state::Console;
use super::users::{Role, User};
use crate::serve::http::PeerName;

/// The header a write carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// How the caller was known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// The session cookie (its id).
    Session(String),
    /// A client certificate.
    Certificate,
    /// A bearer token: no browser sends one by itself.
    Bearer,
}

/// The caller of a request.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Who.
    pub user: User,
    /// Known by what.
    pub credential: Credential,
}

impl Caller {
    /// The credential a browser sends by itself, which a write must back with its CSRF
    /// token (`None`: a bearer token, sent only by who holds it).
    pub fn ambient(&self) -> Option<String> {
        match &self.credential {
            Credential::Session(id) => Some(format!("session:{id}")),
            Credential::Certificate => Some(format!("certificate:{}", self.user.name)),
            Credential::Bearer => None,
        }
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

/// The caller a request's credentials name, if any.
fn caller(console: &Console, request: &Request) -> Option<Caller> {
    if let Some(PeerName(name)) = request.extensions().get::<PeerName>() {
        return console.users.by_certificate(name).map(|user| Caller {
            user,
            credential: Credential::Certificate,
        });
    }
    if let Some(value) = request.headers().get(header::AUTHORIZATION) {
        let value = value.as_bytes();
        let token = value
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
            .and_then(|_| value.get(7..))
            .map(<[u8]>::trim_ascii)?;
        return console.users.by_token(token).map(|user| Caller {
            user,
            credential: Credential::Bearer,
        });
    }
    let id = cookie(request.headers(), COOKIE)?;
    let name = console.sessions.user(&id)?;
    console.users.by_name(&name).map(|user| Caller {
        user,
        credential: Credential::Session(id),
    })
}

/// Refuses a request without a known caller; gives the caller to the handlers.
pub async fn authenticate(
    State(console): State<Arc<Console>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(caller) = caller(&console, &request) else {
        let mut response = problem(
            StatusCode::UNAUTHORIZED,
            "sign in: the console needs a user's token (a session, or 'Authorization: Bearer \
             <token>'), or a client certificate the users file names",
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
        return response;
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Whether a request comes from this listener's own pages: its `Origin`, when the browser
/// gives one, is the listener's (its scheme and the `Host` asked for), and its
/// `Sec-Fetch-Site`, when given, is `same-origin`.
pub fn same_origin(console: &Console, headers: &HeaderMap) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let scheme = if console.tls { "https" } else { "http" };
        let own = host.map(|host| format!("{scheme}://{host}"));
        if own.as_deref().map(str::as_bytes) != Some(origin.as_bytes()) {
            return false;
        }
    }
    headers
        .get("sec-fetch-site")
        .is_none_or(|site| site.as_bytes() == b"same-origin")
}

/// Whether the body is declared JSON.
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The refusal of a request that uses an ambient credential (the cookie, a certificate)
/// without the CSRF token it makes or from another origin: `None` when it may go on.
pub fn forged(console: &Console, caller: &Caller, headers: &HeaderMap) -> Option<Response> {
    let credential = caller.ambient()?;
    let token = headers
        .get(CSRF_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if same_origin(console, headers) && console.sessions.csrf_matches(&credential, token) {
        return None;
    }
    Some(problem(
        StatusCode::FORBIDDEN,
        "refused: a write from the console's page carries its CSRF token (X-CSRF-Token) and \
         comes from its own origin; this one does not (a request forged by another site?). \
         Nothing was changed",
    ))
}

/// Lets a write through only as the module's text says (JSON, CSRF and origin for an
/// ambient credential, the editor role).
pub async fn writes(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    if request.method() == Method::GET || request.method() == Method::HEAD {
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return problem(StatusCode::UNAUTHORIZED, "sign in first");
    };
    if let Some(refusal) = forged(&console, &caller, request.headers()) {
        return refusal;
    }
    if !is_json(request.headers()) {
        return problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a write's body is JSON: 'Content-Type: application/json'",
        );
    }
    if caller.user.role != Role::Editor {
        return problem(
            StatusCode::FORBIDDEN,
            &format!(
                "{} is a viewer: viewers change nothing (the users file gives the editor \
                 role). Nothing was changed",
                caller.user.name
            ),
        );
    }
    next.run(request).await
}
