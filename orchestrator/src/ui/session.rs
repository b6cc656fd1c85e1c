//! The dashboard's session: who may use `/v1` from a browser without holding the API token in page script.
//!
//! `POST /ui/login` with the API token sets two cookies (design and reasons: `docs/design/dashboard.md`):
//! - `cairn_session` (HttpOnly, SameSite=Strict): `v1.<issued_ms>.<mac>`, where `mac` is HMAC-SHA256 keyed by
//!   the API token over `session|v1|<issued_ms>`. Nothing is stored server-side, so a session survives a
//!   restart and is accepted by every orchestrator serving the same token; changing the token ends every
//!   session. It expires [`SESSION_TTL_MS`] after login.
//! - `cairn_csrf` (readable by the page, SameSite=Strict): HMAC-SHA256 over `csrf|<session value>`. The page
//!   echoes it in `X-CSRF-Token` on every request that is not a read; the server recomputes it from the
//!   session cookie (a signed double-submit token), so another site can neither read nor forge it.
//!
//! Script never sees the API token or the session value (HttpOnly), so an injected script cannot take the
//! session elsewhere; SameSite=Strict keeps other sites' requests from carrying the cookie at all, and the
//! CSRF header is the second, independent lock for browsers or proxies that ignore SameSite.

use axum::http::{HeaderMap, HeaderValue, Method, header};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "cairn_session";
/// The CSRF cookie's name (the page reads it and echoes it).
pub const CSRF_COOKIE: &str = "cairn_csrf";
/// The header a state change carries the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts after login: 12 hours, one working shift.
pub const SESSION_TTL_MS: i64 = 12 * 3_600_000;
/// How far in the future a session's issue time may be (clocks of orchestrators sharing a token differ a
/// little).
const CLOCK_SKEW_MS: i64 = 60_000;

/// What a request's cookies say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionCheck {
    /// A valid session, and either a read or a state change with the right CSRF token.
    Valid,
    /// A valid session, but a state change without the right CSRF token: refused (403 `csrf_failed`).
    CsrfFailed,
    /// No session cookie, or one that is forged, expired or from another token.
    Absent,
}

/// A new session issued at `now_ms`: the session cookie's value and its CSRF token.
#[must_use]
pub fn issue(token: &str, now_ms: i64) -> (String, String) {
    let session = format!("v1.{now_ms}.{}", mac(token, &format!("session|v1|{now_ms}")));
    let csrf = csrf_for(token, &session);
    (session, csrf)
}

/// Checks the session cookie (and, for anything but `GET`/`HEAD`, the `X-CSRF-Token` header) of a request.
#[must_use]
pub fn check(token: &str, method: &Method, headers: &HeaderMap, now_ms: i64) -> SessionCheck {
    let Some(session) = cookie(headers, SESSION_COOKIE) else { return SessionCheck::Absent };
    if !session_valid(token, session, now_ms) {
        return SessionCheck::Absent;
    }
    if matches!(*method, Method::GET | Method::HEAD) {
        return SessionCheck::Valid;
    }
    let given = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if same(given.as_bytes(), csrf_for(token, session).as_bytes()) {
        SessionCheck::Valid
    } else {
        SessionCheck::CsrfFailed
    }
}

/// Whether `headers` carry a valid session cookie (the pages redirect to the login form otherwise).
#[must_use]
pub fn has_session(token: &str, headers: &HeaderMap, now_ms: i64) -> bool {
    cookie(headers, SESSION_COOKIE).is_some_and(|s| session_valid(token, s, now_ms))
}

/// Whether `given` equals `expected`, in time independent of where they differ (a login's token).
#[must_use]
pub fn same(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The `Set-Cookie` values of a new session; `secure` adds `Secure` (the request came over HTTPS through a
/// proxy that says so).
#[must_use]
pub fn set_cookies(session: &str, csrf: &str, secure: bool) -> [HeaderValue; 2] {
    let max_age = SESSION_TTL_MS / 1000;
    let secure = if secure { "; Secure" } else { "" };
    // Both values are ASCII made here (digits, dots, hex), so the header values are always valid.
    [
        HeaderValue::from_str(&format!(
            "{SESSION_COOKIE}={session}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
        ))
        .unwrap_or(HeaderValue::from_static("")),
        HeaderValue::from_str(&format!("{CSRF_COOKIE}={csrf}; Path=/; Max-Age={max_age}; SameSite=Strict{secure}"))
            .unwrap_or(HeaderValue::from_static("")),
    ]
}

/// The `Set-Cookie` values that end a session (logout).
#[must_use]
pub fn clear_cookies() -> [HeaderValue; 2] {
    [
        HeaderValue::from_static("cairn_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
        HeaderValue::from_static("cairn_csrf=; Path=/; Max-Age=0; SameSite=Strict"),
    ]
}

fn session_valid(token: &str, session: &str, now_ms: i64) -> bool {
    let mut parts = session.splitn(3, '.');
    let (Some("v1"), Some(issued), Some(given)) = (parts.next(), parts.next(), parts.next()) else { return false };
    let Ok(issued_ms) = issued.parse::<i64>() else { return false };
    let fresh = issued_ms <= now_ms + CLOCK_SKEW_MS && now_ms - issued_ms < SESSION_TTL_MS;
    fresh && same(given.as_bytes(), mac(token, &format!("session|v1|{issued_ms}")).as_bytes())
}

fn csrf_for(token: &str, session: &str) -> String {
    mac(token, &format!("csrf|{session}"))
}

/// HMAC-SHA256 of `message` keyed by the API token, as lowercase hex.
fn mac(token: &str, message: &str) -> String {
    // HMAC takes keys of any length, so `new_from_slice` cannot fail here.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.as_bytes()) else { return String::new() };
    mac.update(message.as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn request(session: &str, csrf: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers
            .insert(header::COOKIE, HeaderValue::from_str(&format!("a=b; {SESSION_COOKIE}={session}")).expect("ASCII"));
        if let Some(csrf) = csrf {
            headers.insert(CSRF_HEADER, HeaderValue::from_str(csrf).expect("ASCII"));
        }
        headers
    }

    #[test]
    fn a_session_reads_and_changes_state_only_with_its_csrf_token() {
        let (session, csrf) = issue("tok", NOW);

        assert_eq!(check("tok", &Method::GET, &request(&session, None), NOW), SessionCheck::Valid);
        assert_eq!(check("tok", &Method::POST, &request(&session, Some(&csrf)), NOW), SessionCheck::Valid);
        assert_eq!(check("tok", &Method::POST, &request(&session, None), NOW), SessionCheck::CsrfFailed);
        assert_eq!(check("tok", &Method::POST, &request(&session, Some("00")), NOW), SessionCheck::CsrfFailed);
    }

    #[test]
    fn a_session_of_another_token_an_expired_or_a_forged_one_is_no_session() {
        let (session, _) = issue("tok", NOW);
        let forged = format!("v1.{}.{}", NOW + 1, session.rsplit('.').next().expect("a MAC"));

        assert_eq!(check("other", &Method::GET, &request(&session, None), NOW), SessionCheck::Absent);
        assert_eq!(check("tok", &Method::GET, &request(&session, None), NOW + SESSION_TTL_MS), SessionCheck::Absent);
        assert_eq!(check("tok", &Method::GET, &request(&forged, None), NOW), SessionCheck::Absent);
        assert_eq!(check("tok", &Method::GET, &HeaderMap::new(), NOW), SessionCheck::Absent);
    }
}
