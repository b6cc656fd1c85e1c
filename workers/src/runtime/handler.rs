//! The innermost service: runs one attempt's action next to its heartbeat loop.
//!
//! The action, the heartbeat loop and the watch on the lease are one future: when the orchestrator answers a
//! heartbeat with `alive = false`, the action's context is cancelled and its future dropped on the spot; when an
//! outer layer drops this future (deadline, shutdown past the drain timeout), the heartbeats stop with it and a
//! drop guard cancels the context just before the action's future is dropped, so nothing the action started
//! outlives the attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use apalis::prelude::Task;
use cairn_core::failure::codes;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::time::MissedTickBehavior;
use tower::Service;

use super::job::AttemptJob;
use super::outcome::AttemptError;
use crate::action::{ActionError, DynAction};
use crate::context::ActionContext;

/// Runs attempts of the actions this worker serves.
#[derive(Clone)]
pub(crate) struct AttemptHandler {
    actions: Arc<HashMap<String, Arc<dyn DynAction>>>,
}

impl std::fmt::Debug for AttemptHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttemptHandler").field("actions", &self.actions.keys().collect::<Vec<_>>()).finish()
    }
}

impl AttemptHandler {
    pub(crate) fn new(actions: Arc<HashMap<String, Arc<dyn DynAction>>>) -> Self {
        Self { actions }
    }
}

impl Service<Task<AttemptJob>> for AttemptHandler {
    type Response = Value;
    type Error = AttemptError;
    type Future = BoxFuture<'static, Result<Value, AttemptError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, task: Task<AttemptJob>) -> Self::Future {
        let action = self.actions.get(&task.args.action).cloned();
        Box::pin(run_attempt(action, task.args))
    }
}

async fn run_attempt(action: Option<Arc<dyn DynAction>>, job: AttemptJob) -> Result<Value, AttemptError> {
    let Some(action) = action else {
        // Handed an action it does not serve (a registration that changed, two workers sharing an id): nothing
        // ran, and another worker may serve it, so it goes back at once rather than failing or timing out.
        return Err(AttemptError::NotServed(job.action.clone()));
    };
    let args: Value = serde_json::from_str(&job.args_json).map_err(|e| {
        AttemptError::Action(
            ActionError::permanent(codes::INVALID_ARGS, format!("args are not JSON: {e}")).did_not_take_effect(),
        )
    })?;
    let ctx = job.ctx;
    let mut call = action.call(args, &ctx);
    // Declared after `call`, so dropped before it: an action dropped from outside (deadline, drain timeout) has
    // its context cancelled first, and whatever it spawned sees the cancellation.
    let _cancel_first = ctx.cancellation().clone().drop_guard();
    tokio::select! {
        // Checked first: once the lease is gone, a result the action returns in the same instant is void.
        biased;
        () = job.progress.gone() => {
            ctx.cancellation().cancel();
            Err(AttemptError::LeaseLost)
        }
        outcome = &mut call => outcome.map_err(AttemptError::Action),
        never = heartbeats(&ctx, job.heartbeat_every) => match never {},
    }
}

/// Heartbeats every `every` until the orchestrator says stop, then waits forever (the caller's `select!` sees
/// the lease gone). Carries any checkpoint whose own heartbeat failed.
async fn heartbeats(ctx: &ActionContext, every: Duration) -> std::convert::Infallible {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !ctx.heartbeat().await {
            return std::future::pending().await;
        }
    }
}
