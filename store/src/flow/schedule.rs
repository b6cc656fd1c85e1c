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
use crate::waiting::{FireOutcome, ScheduleFire, ScheduleTrigger, TickRun};

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
        let firing = Firing { schedule_id: &f.schedule_id, overlap: f.overlap, note: None, now };
        fire_tick(tx, &firing, tick, events, &mut out).await?;
    }
    Ok(out)
}

/// Fires one run now ("run now", `POST /v1/schedules/{id}:trigger`), under the schedule's overlap policy as a
/// tick would be (case D19): the schedule row is locked first, so a tick pass of the same schedule waits and then
/// sees this run. `None` when the schedule does not exist.
pub(crate) async fn trigger<T: WaitTx>(
    tx: &mut T,
    t: &ScheduleTrigger,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Option<FireOutcome>> {
    if !tx.schedule_lock(&t.schedule_id, t.now_ms).await? {
        return Ok(None);
    }
    let mut out = FireOutcome { claimed: true, ..FireOutcome::default() };
    let manual = json!({"trigger": "manual"}).to_string();
    let firing = Firing { schedule_id: &t.schedule_id, overlap: t.overlap, note: Some(&manual), now: t.now_ms };
    fire_tick(tx, &firing, &t.tick, events, &mut out).await?;
    Ok(Some(out))
}

/// How ticks of one schedule are fired.
struct Firing<'a> {
    schedule_id: &'a str,
    overlap: Overlap,
    /// The detail of a started tick's row (`{"trigger": "manual"}` for "run now").
    note: Option<&'a str>,
    now: i64,
}

/// Fires one tick: its row and run, under the overlap policy against the schedule's runs still open.
async fn fire_tick<T: WaitTx>(
    tx: &mut T,
    firing: &Firing<'_>,
    tick: &TickRun,
    events: &mut Vec<EventInsert>,
    out: &mut FireOutcome,
) -> StoreResult<()> {
    let Firing { schedule_id, overlap, note, now } = *firing;
    let base = TickInsert {
        schedule_id,
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
            return Ok(());
        }
    };
    let open = tx.schedule_open_runs(schedule_id).await?;
    if !open.is_empty() {
        match overlap {
            Overlap::Skip => {
                let mut detail = json!({"open_runs": open});
                if note.is_some() {
                    detail["trigger"] = json!("manual");
                }
                let detail = detail.to_string();
                let skipped = TickInsert { outcome: TickOutcome::SkippedOverlap, detail: Some(&detail), ..base };
                tx.tick_insert(&skipped, now).await?;
                out.skipped.push(tick.fire_at_ms);
                return Ok(());
            }
            Overlap::Allow => {}
            Overlap::CancelPrevious => {
                for run_id in open {
                    if cancel_run(tx, &run_id, None, now, events).await? {
                        out.cancelled.push(run_id);
                    }
                }
            }
        }
    }
    let started = TickInsert { run_id: Some(&run.run_id), outcome: TickOutcome::Started, detail: note, ..base };
    if !tx.tick_insert(&started, now).await? {
        return Ok(()); // this nominal instant already has its row: never a second run
    }
    match create(tx, run, events).await? {
        CreateOutcome::Created(run_id) => {
            tx.schedule_last_run(schedule_id, tick.fire_at_ms, &run_id, now).await?;
            out.started.push((tick.fire_at_ms, run_id));
            Ok(())
        }
        other => Err(StoreError::corrupt("schedule run", format!("a scheduled run was not created: {other:?}"))),
    }
}
