//! The lease reaper loop: every `reap_interval`, fail attempts whose lease expired (crashed, frozen or
//! partitioned workers; attempts past `timeout_ms`). Safe to run in every orchestrator at once: each expired
//! attempt is failed once, fenced by its attempt number.

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;

/// Spawns the reaper loop on the current tokio runtime. It ends between passes once `stop` is cancelled (or when
/// the handle is aborted). Store errors are logged and retried on the next pass (the database may be restarting).
pub fn spawn(engine: Engine, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(engine.config().reap_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => return,
            }
            if let Err(e) = engine.reap().await {
                tracing::warn!(error = %e, retryable = e.is_retryable(), "reaper pass failed");
            }
        }
    })
}
