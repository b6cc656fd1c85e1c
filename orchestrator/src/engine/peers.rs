//! Wake-ups between orchestrators sharing a PostgreSQL database (`docs/design/dispatcher.md`).
//!
//! An orchestrator wakes its own long polls in memory when what it commits makes steps claimable
//! ([`Engine::wake`]). What another orchestrator commits (a submission, a report releasing steps no poll there
//! took, a claim given back) reaches them through the store's peer channel ([`cairn_store::PEER_CHANNEL`],
//! `LISTEN`/`NOTIFY`), so a worker polling here claims at once instead of at its poll's next idle re-check
//! ([`crate::EngineConfig::idle_recheck`], 1 s by default, which still covers a message lost while a listener
//! reconnects).
//!
//! Messages, as text: `hello <id>` ("I am here": sent once listening, every
//! [`crate::EngineConfig::peer_hello_every`] (10 s by default), and in answer to a hello from an orchestrator not
//! heard from within the peer TTL, three hellos, so two that start together learn of each other at once) and
//! `wake <id>`. PostgreSQL also delivers a message to its sender's own listener: those only show the listener is
//! alive. Wakes go out only while another orchestrator was heard within the TTL, so one alone (and any SQLite
//! store) sends none, and they are coalesced: one `NOTIFY` at a time, the wakes asked for while it is out sent as
//! one more. Each `NOTIFY` is a transaction of its own on a pooled connection, off the writer's.
//!
//! A listener that hears nothing for the TTL, not even this orchestrator's own hellos, is made again on a new
//! connection: its connection was cut without a close (a failover, a network cut), which sqlx's listener, only
//! ever reading, never notices. Left alone, wake-ups from the others would stop for good after such a cut, and
//! polls here would find their steps at the idle re-check only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use cairn_store::{PeerListener, Store, StoreError, StoreResult};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::Inner;

/// Wait before listening again after the listener failed (the database unreachable).
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// This orchestrator's side of the peer channel, shared by the engine and the channel's two tasks.
pub(super) struct Peers {
    /// This orchestrator's id in messages (random per engine).
    id: String,
    /// How often this orchestrator says hello.
    hello_every: Duration,
    /// When another orchestrator was last heard from.
    heard_at: Mutex<Option<Instant>>,
    wake_pending: AtomicBool,
    hello_pending: AtomicBool,
    send: Notify,
}

impl Peers {
    pub(super) fn new(hello_every: Duration) -> Peers {
        Peers {
            id: uuid::Uuid::new_v4().simple().to_string(),
            hello_every,
            heard_at: Mutex::new(None),
            wake_pending: AtomicBool::new(false),
            hello_pending: AtomicBool::new(false),
            send: Notify::new(),
        }
    }

    /// Asks the other orchestrators to wake their polls, if any was heard from lately.
    pub(super) fn wake(&self) {
        if self.present() {
            self.wake_pending.store(true, Ordering::Release);
            self.send.notify_one();
        }
    }

    /// How long after its last message another orchestrator still counts as present, and how long a listener may
    /// hear nothing before it is made again: three hellos.
    fn ttl(&self) -> Duration {
        self.hello_every.saturating_mul(3)
    }

    /// Whether another orchestrator was heard from within the TTL.
    pub(super) fn present(&self) -> bool {
        let heard = *self.heard_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        heard.is_some_and(|at| at.elapsed() < self.ttl())
    }

    /// Notes a message from another orchestrator; true when it was not present before.
    fn heard(&self) -> bool {
        let mut heard = self.heard_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let new = heard.is_none_or(|at| at.elapsed() >= self.ttl());
        *heard = Some(Instant::now());
        new
    }
}

/// What a message asks of this orchestrator.
#[derive(Debug, PartialEq, Eq)]
enum Message<'a> {
    Hello(&'a str),
    Wake(&'a str),
}

fn parse(payload: &str) -> Option<Message<'_>> {
    match payload.split_once(' ')? {
        ("hello", id) => Some(Message::Hello(id)),
        ("wake", id) => Some(Message::Wake(id)),
        _ => None,
    }
}

/// Starts the listening and the sending task of `inner`'s peer channel (PostgreSQL only). Both end when the
/// engine's stop sender is dropped (with the engine); the listener wakes the engine's polls while it lives.
pub(super) fn spawn(inner: &Arc<Inner>) {
    if !matches!(inner.store, Store::Postgres(_)) {
        return;
    }
    let (store, peers) = (&inner.store, &inner.peers);
    tokio::spawn(listen(Arc::downgrade(inner), store.clone(), Arc::clone(peers), inner.peers_stop.subscribe()));
    tokio::spawn(send(store.clone(), Arc::clone(peers), inner.peers_stop.subscribe()));
}

async fn listen(engine: Weak<Inner>, store: Store, peers: Arc<Peers>, mut stop: watch::Receiver<()>) {
    loop {
        let mut listener = match store.peer_listener().await {
            Ok(Some(listener)) => listener,
            Ok(None) | Err(StoreError::Stopped) => return,
            Err(error) => {
                tracing::warn!(error = %error, "listening to other orchestrators failed; trying again");
                tokio::select! {
                    _ = stop.changed() => return,
                    () = tokio::time::sleep(RELISTEN_AFTER) => continue,
                }
            }
        };
        // Hello once listening, so the answers of the orchestrators that did not know this one are heard.
        peers.hello_pending.store(true, Ordering::Release);
        peers.send.notify_one();
        // `next` is cancelled only on the way out, and the listener dropped right after.
        loop {
            let payload = tokio::select! {
                _ = stop.changed() => return,
                payload = tokio::time::timeout(peers.ttl(), next(&mut listener)) => payload,
            };
            let payload = match payload {
                Ok(Ok(payload)) => payload,
                Ok(Err(StoreError::Stopped)) => return,
                Ok(Err(_)) => break,
                Err(_) => {
                    tracing::warn!(
                        silent_ms = peers.ttl().as_millis(),
                        "the listener to other orchestrators heard nothing, not even this one's hellos; listening again"
                    );
                    break;
                }
            };
            received(&engine, &peers, &payload);
        }
    }
}

/// The next message; after a failure (other than the store closing), a pause before the listener is made again.
async fn next(listener: &mut PeerListener) -> StoreResult<String> {
    let next = listener.next().await;
    if let Err(error) = &next
        && !matches!(error, StoreError::Stopped)
    {
        tracing::warn!(error = %error, "the listener to other orchestrators failed; listening again");
        tokio::time::sleep(RELISTEN_AFTER).await;
    }
    next
}

fn received(engine: &Weak<Inner>, peers: &Peers, payload: &str) {
    match parse(payload) {
        Some(Message::Wake(id)) if id != peers.id => {
            peers.heard();
            // This orchestrator's polls only: a wake is never passed on.
            if let Some(inner) = engine.upgrade() {
                inner.wake.notify_waiters();
            }
        }
        Some(Message::Hello(id)) if id != peers.id => {
            if peers.heard() {
                peers.hello_pending.store(true, Ordering::Release);
                peers.send.notify_one();
            }
        }
        Some(_) => {}
        None => tracing::debug!(payload, "unknown message from another orchestrator ignored"),
    }
}

async fn send(store: Store, peers: Arc<Peers>, mut stop: watch::Receiver<()>) {
    let mut hellos = tokio::time::interval_at(Instant::now() + peers.hello_every, peers.hello_every);
    loop {
        for (pending, kind) in [(&peers.hello_pending, "hello"), (&peers.wake_pending, "wake")] {
            if !pending.swap(false, Ordering::AcqRel) {
                continue;
            }
            match store.notify_peers(&format!("{kind} {}", peers.id)).await {
                Ok(()) => {}
                Err(StoreError::Stopped) => return,
                Err(error) => tracing::warn!(error = %error, kind, "telling other orchestrators failed"),
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = peers.send.notified() => {}
            _ = hellos.tick() => peers.hello_pending.store(true, Ordering::Release),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Message, parse};

    #[test]
    fn messages_parse_and_unknown_ones_do_not() {
        assert_eq!(parse("hello 0a1b"), Some(Message::Hello("0a1b")));
        assert_eq!(parse("wake 0a1b"), Some(Message::Wake("0a1b")));
        assert_eq!(parse("wake"), None);
        assert_eq!(parse("shout 0a1b"), None);
    }
}
