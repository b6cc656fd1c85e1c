//! `GET /v1/runs` answered live: with `Accept: text/event-stream` the same page of runs (same filters, same
//! JSON) is sent as SSE events named `runs`, the first at once and then one whenever the page changed. The
//! dashboard's run list keeps itself current with it.
//!
//! The orchestrator re-reads the page every [`REREAD`] and compares the answer, rather than listening for
//! changes: any orchestrator of the database may have changed a run, and the store is the only place that
//! knows. A stream holds one of the `max_sse_subscribers` permits that run event streams share, so a crowd of
//! open dashboards cannot turn into unbounded reads.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::stream::{self, Stream};
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use super::runs;

/// How often a live run list re-reads its page.
const REREAD: Duration = Duration::from_secs(1);

/// Largest page body compared (500 runs at most, each well under 8 KiB).
const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// `Retry-After` of a refused live list, in seconds.
const RETRY_SUBSCRIBING_AFTER_S: u32 = 5;

/// `GET /v1/runs`: the JSON page ([`runs::list`]), or, asked for `text/event-stream`, that page live.
pub(super) async fn list(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let wants_stream =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/event-stream"));
    if !wants_stream {
        return page(&state, &uri).await;
    }
    // A bad filter is answered as on the JSON route, once, instead of a stream of errors.
    let first = match body_of(page(&state, &uri).await).await {
        Ok(first) => first,
        Err(refusal) => return refusal,
    };
    let Ok(subscriber) = state.subscribers.clone().try_acquire_owned() else {
        let mut error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_subscribers",
            "too many live streams are open on this orchestrator; retry later, or read the list as JSON",
        );
        error.details = json!({"retry_after_s": RETRY_SUBSCRIBING_AFTER_S});
        let mut answer = error.into_response();
        answer.headers_mut().insert(header::RETRY_AFTER, RETRY_SUBSCRIBING_AFTER_S.into());
        return answer;
    };
    let stream = live(state, uri, first).map(move |event| {
        // The permit lives as long as the stream: hyper drops the stream when the client goes away.
        let _subscriber = &subscriber;
        event
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

async fn page(state: &AppState, uri: &Uri) -> Response {
    runs::list(State(state.clone()), RawQuery(uri.query().map(str::to_owned))).await.into_response()
}

/// The body of a 200 answer, or the answer itself when it is a refusal.
async fn body_of(answer: Response) -> Result<String, Response> {
    if answer.status() != StatusCode::OK {
        return Err(answer);
    }
    let bytes = axum::body::to_bytes(answer.into_body(), MAX_PAGE_BYTES)
        .await
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the page could not be read"))
        .map_err(IntoResponse::into_response)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn live(state: AppState, uri: Uri, first: String) -> impl Stream<Item = Result<Event, Infallible>> {
    let start = (state, uri, None::<String>, Some(first));
    stream::unfold(start, |(state, uri, sent, mut next)| async move {
        loop {
            if let Some(body) = next.take()
                && sent.as_ref() != Some(&body)
            {
                let event = Event::default().event("runs").data(body.clone());
                return Some((Ok(event), (state, uri, Some(body), None)));
            }
            // Ends when the orchestrator shuts down; the browser's EventSource reconnects elsewhere.
            tokio::select! {
                () = tokio::time::sleep(REREAD) => {}
                () = state.engine.stopping() => return None,
            }
            match body_of(page(&state, &uri).await).await {
                Ok(body) => next = Some(body),
                Err(answer) => tracing::warn!(status = %answer.status(), "live run list read failed; retrying"),
            }
        }
    })
}
