//! Engine settings. Durations are [`Duration`]s; sizes say their unit in the name.

use std::time::Duration;

use cairn_core::validate::Limits;

/// How the engine behaves.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How long a lease lives without a heartbeat when the step sets no `heartbeat_timeout_ms`: the liveness
    /// timeout after which a crashed or partitioned worker's attempt is reclaimed. Default 10 s.
    pub lease_ttl: Duration,
    /// How often the reaper looks for expired leases. Default 1 s.
    pub reap_interval: Duration,
    /// After start-up the reaper waits this long before failing any lease, so workers that kept working while no
    /// orchestrator was running can reconnect and heartbeat or report (case C14). Default: `lease_ttl`.
    pub startup_grace: Duration,
    /// Largest accepted step output, in bytes of JSON text. Default 1 MiB.
    pub max_output_bytes: usize,
    /// Plan limits (steps, timeouts).
    pub limits: Limits,
    /// Most expired leases handled per reaper pass.
    pub reap_batch: i64,
    /// Longest a long poll waits before looking for work again when nothing woke it and nothing is due: a guard
    /// against a wake-up lost on the way from another orchestrator sharing the database. Default 1 s.
    pub idle_recheck: Duration,
    /// PostgreSQL with several orchestrators: how often this one says hello on the peer channel
    /// (`engine/peers.rs`). Another orchestrator counts as present for three of these after its last message,
    /// and this one's listener, which hears its own hellos too, is made again on a new connection after hearing
    /// nothing for as long (a connection cut without a close, which sqlx's listener never notices). Default 10 s.
    pub peer_hello_every: Duration,
    /// PostgreSQL: whether the batch writer may complete a chain step, or a batch of leaf steps, with the claim
    /// riding on it in one call to a stored function (the fast path, `docs/design/fast-path.md`). Off, every
    /// batch takes the general path; the decisions and the rows written are the same. Default true.
    pub pg_fast_path: bool,
}

impl EngineConfig {
    /// Longest a worker's long poll waits here: 30 s, and at most half a lease TTL (a worker frozen or cut off
    /// with a poll pending is then not handed the steps reclaimed from it: case C12 b). A polling worker is seen
    /// at least this often, so "connected" means seen within three of these.
    pub fn poll_wait_max(&self) -> Duration {
        Duration::from_secs(30).min(self.lease_ttl / 2)
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        let lease_ttl = Duration::from_secs(10);
        Self {
            lease_ttl,
            reap_interval: Duration::from_secs(1),
            startup_grace: lease_ttl,
            max_output_bytes: 1024 * 1024,
            limits: Limits::default(),
            reap_batch: 500,
            idle_recheck: Duration::from_secs(1),
            peer_hello_every: Duration::from_secs(10),
            pg_fast_path: true,
        }
    }
}
