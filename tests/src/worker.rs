//! [`TestWorker`]: an in-process worker loop with per-action handlers and a call log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cairn_core::failure::Failure;
use cairn_orchestrator::Engine;
use cairn_store::{Claimed, Report};
use serde_json::Value;

/// What a handler does with one attempt.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Report success with this output.
    Succeed(Value),
    /// Report this failure.
    Fail(Failure),
    /// Report nothing (the worker "crashed" or is still working).
    Hang,
}

type Handler = Arc<dyn Fn(&Claimed) -> Outcome + Send + Sync>;

/// An in-process worker: claims steps, runs handlers, reports, and records every call.
#[derive(Clone)]
pub struct TestWorker {
    /// Worker id used for leases.
    pub id: String,
    handlers: HashMap<String, Handler>,
    calls: Arc<Mutex<Vec<Claimed>>>,
}

impl TestWorker {
    /// A worker with no handlers.
    pub fn new(id: &str) -> Self {
        Self { id: id.into(), handlers: HashMap::new(), calls: Arc::default() }
    }

    /// Serves `action` with `handler`.
    pub fn on(mut self, action: &str, handler: impl Fn(&Claimed) -> Outcome + Send + Sync + 'static) -> Self {
        self.handlers.insert(action.into(), Arc::new(handler));
        self
    }

    /// Serves `action` by echoing the resolved args as output (the cases' `noop` convention).
    pub fn echo(self, action: &str) -> Self {
        self.on(action, |c| Outcome::Succeed(c.args.clone()))
    }

    /// Actions served.
    pub fn actions(&self) -> Vec<String> {
        let mut names: Vec<String> = self.handlers.keys().cloned().collect();
        names.sort();
        names
    }

    /// Every attempt handed to this worker, in order.
    pub fn calls(&self) -> Vec<Claimed> {
        self.calls.lock().unwrap().clone()
    }

    /// Attempts handed to this worker for `step_id`.
    pub fn calls_for(&self, step_id: &str) -> Vec<Claimed> {
        self.calls().into_iter().filter(|c| c.lease.step_id == step_id).collect()
    }

    /// Claims and handles steps until nothing is claimable at the current clock time. Returns attempts handled.
    pub async fn run_until_idle(&self, engine: &Engine) -> usize {
        let mut handled = 0;
        loop {
            let claimed = engine.claim(&self.id, &self.actions(), 64).await.unwrap();
            if claimed.is_empty() {
                return handled;
            }
            for c in claimed {
                handled += 1;
                self.handle(engine, c).await;
            }
        }
    }

    /// Runs the handler for one claimed attempt and reports its outcome.
    pub async fn handle(&self, engine: &Engine, c: Claimed) -> Option<Report> {
        self.calls.lock().unwrap().push(c.clone());
        let handler = self.handlers.get(&c.action).cloned()?;
        match handler(&c) {
            Outcome::Succeed(output) => Some(engine.complete(&c.lease, &output).await.unwrap()),
            Outcome::Fail(failure) => Some(engine.fail(&c.lease, &failure).await.unwrap()),
            Outcome::Hang => None,
        }
    }
}
