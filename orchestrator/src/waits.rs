//! Approval decisions and timeouts, and `event.wait` steps: the engine side of human and event waits (contract
//! §10, "Waiting").
//! The store does each change in one transaction; the engine adds the clock, limits and wake-ups.

use cairn_store::{ApprovalOutcome, Delivery, NewEvent, PendingApproval, StoreResult};
use serde_json::Value;

use crate::engine::Engine;

/// Most approvals or waits ended per pass.
const BATCH: i64 = 500;

/// Most `event.wait` steps started per pass.
const START_BATCH: u32 = 100;

/// An event delivered through `POST /v1/events`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventIn {
    /// Event name.
    pub name: String,
    /// Correlation key.
    #[serde(default)]
    pub key: Option<String>,
    /// The caller's dedupe id: the same name and id again is answered as a duplicate and delivered once.
    #[serde(default)]
    pub id: Option<String>,
    /// Payload (any JSON; `null` when absent).
    #[serde(default)]
    pub payload: Value,
}

/// What a delivered event did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Delivered {
    /// The stored event's id (for a duplicate, the id of the event first stored).
    pub id: String,
    /// Whether an event of the same name and dedupe `id` had been stored already: nothing was stored or
    /// delivered.
    pub duplicate: bool,
    /// Steps it completed: `{run_id, step_id}`.
    pub matched: Vec<MatchedStep>,
}

/// A step completed by an event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MatchedStep {
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
}

impl Engine {
    /// Approves (`approve`) or rejects a step waiting for approval. A decision at or after the approval's
    /// deadline is refused ([`ApprovalOutcome::TimedOut`]) and the declared `on_timeout` applies instead.
    ///
    /// # Errors
    /// Store errors.
    pub async fn decide_approval(
        &self,
        run_id: &str,
        step_id: &str,
        approve: bool,
        actor: &str,
    ) -> StoreResult<ApprovalOutcome> {
        let outcome = self.store().decide_approval(run_id, step_id, approve, actor, self.now_ms()).await?;
        tracing::info!(run_id, step_id, approve, actor, ?outcome, "approval decision");
        if outcome != ApprovalOutcome::WrongState {
            self.wake();
        }
        Ok(outcome)
    }

    /// Applies `on_timeout` to approvals past their deadline. Returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn expire_approvals(&self) -> StoreResult<usize> {
        let expired = self.store().expire_approvals(self.now_ms(), BATCH).await?;
        if expired > 0 {
            tracing::info!(expired, "approvals timed out");
            self.wake();
        }
        Ok(expired)
    }

    /// Steps waiting for approval across runs, oldest first.
    ///
    /// # Errors
    /// Store errors.
    pub async fn pending_approvals(&self, limit: i64) -> StoreResult<Vec<PendingApproval>> {
        self.store().approvals_pending(limit).await
    }

    /// Starts the waits of ready `event.wait` steps (matching stored events within their lookback). Returns how
    /// many steps were started.
    ///
    /// # Errors
    /// Store errors.
    pub async fn start_event_waits(&self) -> StoreResult<usize> {
        let _one_at_a_time = self.event_wait_start().lock().await;
        let started = self.store().start_event_waits(self.now_ms(), START_BATCH, self.report_limits()).await?;
        if started > 0 {
            self.wake();
        }
        Ok(started)
    }

    /// Ends event waits past their deadline per `on_timeout`. Returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn expire_event_waits(&self) -> StoreResult<usize> {
        let ended = self.store().expire_event_waits(self.now_ms(), BATCH, self.report_limits()).await?;
        if ended > 0 {
            tracing::info!(ended, "event waits timed out");
            self.wake();
        }
        Ok(ended)
    }

    /// Stores an external event and completes the waiting steps it matches. Steps that become ready for an
    /// `event.wait` of their own are started right away, so an event sent next is matched too.
    ///
    /// # Errors
    /// Store errors (retryable: the event was not stored).
    pub async fn deliver_event(&self, e: &EventIn) -> StoreResult<Delivered> {
        let now_ms = self.now_ms();
        let secs = u64::try_from(now_ms.div_euclid(1000)).unwrap_or(0);
        let nanos = u32::try_from(now_ms.rem_euclid(1000) * 1_000_000).unwrap_or(0);
        let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, nanos)).to_string();
        let event = NewEvent {
            id: id.clone(),
            name: e.name.clone(),
            key: e.key.clone(),
            payload: e.payload.clone(),
            now_ms,
            dedupe_id: e.id.clone(),
        };
        let matched = match self.store().deliver_event(&event, self.report_limits()).await? {
            Delivery::Delivered { matched } => matched,
            Delivery::Duplicate { id } => {
                tracing::info!(event_id = %id, name = %e.name, "event received again: a duplicate, not delivered");
                return Ok(Delivered { id, duplicate: true, matched: Vec::new() });
            }
        };
        tracing::info!(event_id = %id, name = %e.name, matched = matched.len(), "event received");
        if !matched.is_empty() {
            self.wake();
            self.start_event_waits().await?;
        }
        let matched = matched.into_iter().map(|(run_id, step_id)| MatchedStep { run_id, step_id }).collect();
        Ok(Delivered { id, duplicate: false, matched })
    }
}
