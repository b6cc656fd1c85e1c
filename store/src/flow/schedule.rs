//! Firing a schedule's due ticks: one transaction per schedule pass (contract §10, "Waiting"; case C18).
//!
//! The pass first moves the schedule's `next_fire_at` on, fenced on the value the caller read (and on not being
//! paused): of several orchestrators handling the same tick, exactly one gets the row and the others change
//! nothing. Then, for each tick to fire, the tick row (primary key: schedule id + the nominal UTC instant) and the
//! run are inserted together, so a tick never creates two runs, and a tick whose row exists already is left
//! alone. The overlap policy is applied against the schedule's runs still open at that point, including runs
//! started earlier in the same pass.

use cairn_core::schedule::{Overlap, TickOutcome};
use serde_json::json;

use super::control::cancel_run;
use super::submit::create;
use crate::error::{StoreError, StoreResult};
use crate::model::CreateOutcome;
use crate::rows::EventInsert;
use crate::wait_tx::{TickInsert, WaitTx};
use crate::waiting::{FireOutcome, ScheduleFire};

/// Fires `f.ticks` unless another orchestrator already handled this pass (then `claimed` is false).
pub(crate) async fn fire<T: WaitTx>(
    tx: &mut T,
    f: &ScheduleFire,
    events: &mut Vec<EventInsert>,
) -> StoreResult<FireOutcome> {
    let now = f.now_ms;
    let mut out = FireOutcome::default();
    if !tx.schedule_advance(&f.schedule_id, f.expected_next_ms, f.next_fire_at_ms, now).await? {
        return Ok(out);
    }
    out.claimed = true;
    for tick in &f.ticks {
        let base = TickInsert {
            schedule_id: &f.schedule_id,
            fire_at: tick.fire_at_ms,
            run_id: None,
            outcome: TickOutcome::InvalidPlan,
            detail: None,
        };
        let run = match &tick.run {
            Ok(run) => run,
            Err(detail) => {
                tx.tick_insert(&TickInsert { detail: Some(detail), ..base }, now).await?;
                out.invalid.push(tick.fire_at_ms);
                continue;
            }
        };
        let open = tx.schedule_open_runs(&f.schedule_id).await?;
        if !open.is_empty() {
            match f.overlap {
                Overlap::Skip => {
                    let detail = json!({"open_runs": open}).to_string();
                    let skipped = TickInsert { outcome: TickOutcome::SkippedOverlap, detail: Some(&detail), ..base };
                    tx.tick_insert(&skipped, now).await?;
                    out.skipped.push(tick.fire_at_ms);
                    continue;
                }
                Overlap::Allow => {}
                Overlap::CancelPrevious => {
                    for run_id in open {
                        if cancel_run(tx, &run_id, now, events).await? {
                            out.cancelled.push(run_id);
                        }
                    }
                }
            }
        }
        let started = TickInsert { run_id: Some(&run.run_id), outcome: TickOutcome::Started, ..base };
        if !tx.tick_insert(&started, now).await? {
            continue; // this nominal instant already has its row: never a second run
        }
        match create(tx, run, events).await? {
            CreateOutcome::Created(run_id) => {
                tx.schedule_last_run(&f.schedule_id, tick.fire_at_ms, &run_id, now).await?;
                out.started.push((tick.fire_at_ms, run_id));
            }
            other => {
                return Err(StoreError::corrupt("schedule run", format!("a scheduled run was not created: {other:?}")));
            }
        }
    }
    Ok(out)
}
