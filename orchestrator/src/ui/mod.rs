//! The web dashboard at `/ui`: a small single-page app (plain HTML, CSS and JavaScript embedded in the binary
//! with `include_str!`, no build step, no CDN) that reads and operates runs through the `/v1` JSON API.
//!
//! Pages (one HTML document; the script renders by path): `/ui` the run list, `/ui/runs/{id}` one run (its DAG,
//! timeline of attempts, steps and operator actions), `/ui/attention`, `/ui/approvals`, `/ui/schedules`,
//! `/ui/workers`. `/ui/login` asks for the API token once and sets the session cookies ([`session`]);
//! `/ui/logout` clears them. Without an API token (`cairn dev`) there is no login and no session.
//! Design and limits: `docs/design/dashboard.md`.

pub mod session;

use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::Engine;
use crate::auth::Api;
use crate::secret::{ExposeSecret, SecretString};

/// What the dashboard's handlers need.
#[derive(Clone)]
struct Dashboard {
    engine: Engine,
    /// The API token; `None` (`cairn dev`): no login.
    token: Option<SecretString>,
}

/// The dashboard's static files, embedded at build time: (name, content type, body).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("list.js", "text/javascript; charset=utf-8", include_str!("assets/list.js")),
    ("run.js", "text/javascript; charset=utf-8", include_str!("assets/run.js")),
    ("graph.js", "text/javascript; charset=utf-8", include_str!("assets/graph.js")),
    ("inbox.js", "text/javascript; charset=utf-8", include_str!("assets/inbox.js")),
];

const INDEX: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");

/// Scripts and styles come from this origin only, and nothing inline runs: untrusted text that slipped into
/// markup still could not execute.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The dashboard's routes, to merge into the API router.
pub fn router<S: Clone + Send + Sync + 'static>(engine: Engine, token: Option<SecretString>) -> Router<S> {
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/assets/{name}", get(asset))
        .route("/ui/{*path}", get(page))
        .with_state(Dashboard { engine, token })
}

/// Headers every dashboard document carries.
fn document(body: String) -> Response {
    let mut answer = (StatusCode::OK, body).into_response();
    let headers = answer.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    answer
}

fn see_other(to: &str) -> Response {
    match HeaderValue::from_str(to) {
        Ok(location) => (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response(),
        Err(_) => (StatusCode::SEE_OTHER, [(header::LOCATION, HeaderValue::from_static("/ui"))]).into_response(),
    }
}

/// A dashboard path to return to after login, when it is one: under `/ui`, made of characters that need no
/// escaping anywhere (run and step ids are), so it can go into the form and a `Location` as it is. Anything
/// else (another site, a query, markup) is dropped: the login must not become an open redirect.
fn return_path(path: &str) -> Option<&str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/_.-".contains(c);
    (path.starts_with("/ui/") && !path.contains("//") && path.chars().all(safe) && path.len() <= 512).then_some(path)
}

/// `next=PATH` of a query string.
fn next_of(query: Option<&str>) -> Option<&str> {
    query?.split('&').find_map(|pair| pair.strip_prefix("next=")).and_then(return_path)
}

/// Any dashboard page: the one document; the script renders by path. Without a session (when a token is
/// configured) the login form instead.
async fn page(State(ui): State<Dashboard>, uri: axum::http::Uri, headers: HeaderMap) -> Response {
    if let Some(token) = &ui.token
        && !session::has_session(token.expose_secret(), &headers, ui.engine.now_ms())
    {
        // A link to a run opened without a session comes back to that run after the login.
        return match return_path(uri.path()) {
            Some(path) => see_other(&format!("/ui/login?next={path}")),
            None => see_other("/ui/login"),
        };
    }
    document(INDEX.to_owned())
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(file, _, _)| *file == name) {
        Some((_, content_type, body)) => {
            let headers = [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
                // Assets change only with the binary; revalidating each load keeps an upgrade visible at once.
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ];
            (headers, *body).into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// `GET /ui/login[?failed]`: the token form (straight to the run list when no token is configured).
async fn login_form(State(ui): State<Dashboard>, uri: axum::http::Uri) -> Response {
    if ui.token.is_none() {
        return see_other("/ui");
    }
    let failed = uri.query().is_some_and(|q| q.split('&').any(|p| p == "failed"));
    // What goes into the form is a fixed message and a return path checked to hold no markup.
    let message = if failed { "That token was not accepted." } else { "" };
    let next = next_of(uri.query()).unwrap_or("/ui");
    document(LOGIN.replace("{{message}}", message).replace("{{next}}", next))
}

/// Body of `POST /ui/login`.
#[derive(Deserialize)]
struct LoginForm {
    token: String,
    /// Where to go after the login (a dashboard path, [`return_path`]).
    #[serde(default)]
    next: Option<String>,
}

/// `POST /ui/login` (`token=…`, a form): the API token once; on a match, the session and CSRF cookies and a
/// redirect to the run list; otherwise back to the form, counted and logged as a failed login.
async fn login(State(ui): State<Dashboard>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    let Some(token) = &ui.token else { return see_other("/ui") };
    let token = token.expose_secret();
    let next = form.next.as_deref().and_then(return_path);
    if !session::same(form.token.trim().as_bytes(), token.as_bytes()) {
        let failures = ui.engine.metrics().auth_failures(Api::Rest);
        crate::auth::login_failed(Api::Rest, &failures, None, "POST /ui/login");
        return match next {
            Some(next) => see_other(&format!("/ui/login?failed&next={next}")),
            None => see_other("/ui/login?failed"),
        };
    }
    let (value, csrf) = session::issue(token, ui.engine.now_ms());
    // Behind a TLS-terminating proxy the cookies must not travel over plain HTTP afterwards.
    let secure = headers.get("x-forwarded-proto").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let mut answer = see_other(next.unwrap_or("/ui"));
    for cookie in session::set_cookies(&value, &csrf, secure) {
        answer.headers_mut().append(header::SET_COOKIE, cookie);
    }
    answer
}

/// `POST /ui/logout`: clears both cookies and shows the login form. A forged logout could only log a user
/// out, and SameSite=Strict already keeps other sites from sending it with the cookie.
async fn logout() -> Response {
    let mut answer = see_other("/ui/login");
    for cookie in session::clear_cookies() {
        answer.headers_mut().append(header::SET_COOKIE, cookie);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dashboard_paths_without_markup_are_returned_to_after_login() {
        assert_eq!(return_path("/ui/runs/01a2-b3"), Some("/ui/runs/01a2-b3"));
        assert_eq!(return_path("/ui//evil.example"), None, "a protocol-relative URL");
        assert_eq!(return_path("https://evil.example/ui/"), None);
        assert_eq!(return_path("/ui/runs/\"><script>"), None);
        assert_eq!(next_of(Some("failed&next=/ui/approvals")), Some("/ui/approvals"));
    }
}
