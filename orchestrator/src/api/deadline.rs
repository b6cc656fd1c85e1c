//! The body read timeout: a request body must have arrived within [`super::ApiConfig::body_read_timeout`] of
//! the end of its head, however it trickles in (a client sending a byte every few seconds never trips a
//! per-read timeout, so this one is a deadline for the whole body).
//!
//! The body is wrapped in [`DeadlineBody`], which fails the read once the deadline has passed while data is
//! still awaited; whatever the handler then answered (a failed extractor's 400), the request is answered 408
//! `body_timeout` with `Connection: close` on HTTP/1, because the rest of the body is still on its way and the
//! connection cannot carry another request. A handler that never reads its body never waits on the client, so
//! nothing times out; a request without a body is not wrapped at all.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use serde_json::json;
use tokio::time::Sleep;

use super::error::ApiError;

/// Puts the deadline `limit` from now on the request's body, and answers 408 when it passed.
pub(super) async fn body_deadline(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let expired = Arc::new(AtomicBool::new(false));
    let http1 = request.version() <= Version::HTTP_11;
    let request = request.map(|inner| {
        Body::new(DeadlineBody { inner, deadline: Box::pin(tokio::time::sleep(limit)), expired: expired.clone() })
    });
    let response = next.run(request).await;
    if !expired.load(Ordering::Acquire) {
        return response;
    }
    let timeout_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    tracing::info!(timeout_ms, "the request body did not arrive within the body read timeout");
    let mut error = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "body_timeout",
        format!("the request body did not arrive within {timeout_ms} ms"),
    );
    error.details = json!({"timeout_ms": timeout_ms});
    let mut answer = error.into_response();
    if http1 {
        answer.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    answer
}

/// A request body that fails with [`BodyTimedOut`] when data is still awaited at its deadline.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
    /// Set when the deadline failed a read, for [`body_deadline`] to answer 408.
    expired: Arc<AtomicBool>,
}

/// The error a [`DeadlineBody`] read fails with.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body read timeout")]
struct BodyTimedOut;

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        // Data already here is taken even past the deadline: only waiting on the client times out.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
