//! The attempt deadline as a tower layer.
//!
//! Ours rather than tower's `TimeoutLayer` (which apalis re-exports) for two reasons: the limit differs per
//! attempt (`remaining_ms` of each attempt, measured from its arrival), and when it passes the action must be
//! told — its context's cancellation token is cancelled — as well as dropped, so an in-flight HTTP call is
//! aborted rather than left running.

use std::task::{Context, Poll};

use apalis::prelude::{BoxDynError, Task};
use futures::future::BoxFuture;
use tower::{Layer, Service};

use super::job::AttemptJob;
use super::outcome::AttemptError;

/// Applies [`AttemptDeadline`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AttemptDeadlineLayer;

impl<S> Layer<S> for AttemptDeadlineLayer {
    type Service = AttemptDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AttemptDeadline { inner }
    }
}

/// Fails an attempt with [`AttemptError::TimedOut`] when its context's deadline passes, after cancelling the
/// context and dropping the inner future.
#[derive(Debug, Clone)]
pub(crate) struct AttemptDeadline<S> {
    inner: S,
}

impl<S, R> Service<Task<AttemptJob>> for AttemptDeadline<S>
where
    S: Service<Task<AttemptJob>, Response = R>,
    S::Error: Into<BoxDynError>,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = R;
    // apalis' lifecycle layer (just inside this one) boxes errors; the report layer downcasts them back.
    type Error = BoxDynError;
    type Future = BoxFuture<'static, Result<R, BoxDynError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<AttemptJob>) -> Self::Future {
        let deadline = task.args.ctx.deadline;
        let cancel = task.args.ctx.cancellation().clone();
        let timeout_ms = task.args.timeout_ms;
        let attempt = self.inner.call(task);
        Box::pin(async move {
            let outcome = tokio::time::timeout_at(deadline, attempt).await;
            // By now the inner future is dropped either way (`timeout_at` owned it).
            match outcome {
                Ok(result) => result.map_err(Into::into),
                Err(_elapsed) => {
                    cancel.cancel();
                    Err(AttemptError::TimedOut { timeout_ms }.into())
                }
            }
        })
    }
}
