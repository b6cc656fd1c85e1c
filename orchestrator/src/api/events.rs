//! `GET /v1/runs/{id}/events`: the run's history as JSON (`?after=ID&limit=N`), or as a live
//! `text/event-stream` when the client asks for it: one SSE event per history entry (`id` = sequence number,
//! `event` = kind, `data` = the entry as JSON), ending after the run finished and everything was sent, or when
//! the orchestrator shuts down (a client resumes with `Last-Event-ID` or `?after=`). At most
//! `max_sse_subscribers` live streams are open at once: the next one is answered 503 `too_many_subscribers`
//! (with `Retry-After`) until one ends, because every stream holds a connection and reads the store five
//! times a second.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::stream::{self, Stream};
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::error::ApiError;

/// Query of the events route.
#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    after: Option<i64>,
    limit: Option<i64>,
}

/// How often a live stream looks for new events (the store is the source of truth, so several orchestrators
/// can serve one run's stream).
const POLL: Duration = Duration::from_millis(200);

/// `Retry-After` of a refused live stream, in seconds.
const RETRY_SUBSCRIBING_AFTER_S: u32 = 5;

pub(super) async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if state.engine.store().run(&id).await?.is_none() {
        return Err(ApiError::not_found("run"));
    }
    // A reconnecting EventSource says where it stopped in `Last-Event-ID`; `?after=` wins when both are given.
    let last_seen = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let after = q.after.or(last_seen).unwrap_or(0);
    let wants_stream =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/event-stream"));
    if wants_stream {
        let Ok(subscriber) = state.subscribers.clone().try_acquire_owned() else {
            return Ok(too_many_subscribers());
        };
        // The permit lives as long as the stream: hyper drops the stream when the client goes away.
        let stream = live(state, id, after).map(move |event| {
            let _subscriber = &subscriber;
            event
        });
        return Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response());
    }
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000);
    let events = state.engine.store().events(&id, after, limit).await?;
    Ok(Json(json!({"events": events})).into_response())
}

/// 503 `too_many_subscribers`: every live stream this orchestrator may serve is open.
fn too_many_subscribers() -> Response {
    let mut error = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_subscribers",
        "too many live event streams are open on this orchestrator; retry later, or read the history as JSON",
    );
    error.details = json!({"retry_after_s": RETRY_SUBSCRIBING_AFTER_S});
    let mut answer = error.into_response();
    answer.headers_mut().insert(header::RETRY_AFTER, RETRY_SUBSCRIBING_AFTER_S.into());
    answer
}

/// Waits [`POLL`], or less when the orchestrator begins to shut down.
async fn pause(state: &AppState) {
    tokio::select! {
        () = tokio::time::sleep(POLL) => {}
        () = state.engine.stopping() => {}
    }
}

fn live(state: AppState, run_id: String, after: i64) -> impl Stream<Item = Result<Event, Infallible>> {
    let start = (state, run_id, after, Vec::new(), false);
    stream::unfold(start, |(state, run_id, mut after, mut pending, mut done)| async move {
        loop {
            if let Some(event) = pending.pop() {
                return Some((Ok(event), (state, run_id, after, pending, done)));
            }
            // A stream ends when the orchestrator shuts down; the client resumes from its last id elsewhere.
            if done || state.engine.is_stopping() {
                return None;
            }
            let finished = matches!(state.engine.store().run(&run_id).await, Ok(Some(r)) if r.finished_at_ms.is_some());
            match state.engine.store().events(&run_id, after, 500).await {
                Ok(batch) if !batch.is_empty() => {
                    after = batch.last().map_or(after, |e| e.id);
                    pending = batch
                        .iter()
                        .rev()
                        .map(|e| {
                            Event::default().id(e.id.to_string()).event(e.kind.as_str()).data(json!(e).to_string())
                        })
                        .collect();
                }
                Ok(_) if finished => done = true,
                Ok(_) => pause(&state).await,
                Err(e) => {
                    tracing::warn!(error = %e, "event stream read failed; retrying");
                    pause(&state).await;
                }
            }
        }
    })
}
