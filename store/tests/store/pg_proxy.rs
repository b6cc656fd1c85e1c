//! Fixtures shared by the PostgreSQL connection tests (`pg_sessions`, `pg_silence`, and the end-to-end binary's
//! `engine_peers` and `cases_d21_ambiguous_commit`, which include this file by path): a TCP proxy between
//! the store and the test's server that loses a chosen statement's request or answer, or goes silent, and run
//! `r1` with the batches that claim its steps.
#![allow(dead_code)] // each test binary uses its own part

use cairn_store::Batch;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_store::{BatchOutcome, BatchWriter, ClaimRequest, NewRun, ReportItem, ReportLimits, Store, StoreResult};
use sqlx::postgres::PgConnectOptions;

/// Creates run `r1` at time 1: two `noop` roots `a` and `b`, or, with `chain`, `a` → `b`.
pub async fn create_r1(store: &Store, chain: bool) {
    let depends_on: &[&str] = if chain { &["a"] } else { &[] };
    let doc = serde_json::json!({"steps": [
        {"id": "a", "action": "noop", "args": {}},
        {"id": "b", "action": "noop", "args": {}, "depends_on": depends_on},
    ]});
    let limits = cairn_core::validate::Limits::default();
    let plan = cairn_core::validate::validate_value(&doc, &cairn_core::catalog::StaticCatalog::builtin(), &limits)
        .plan
        .expect("the plan validates");
    let run = NewRun {
        run_id: "r1".into(),
        plan,
        input: serde_json::json!({}),
        idempotency_key: None,
        labels: Default::default(),
        timers: vec![],
        now_ms: 1,
    };
    store.create_run(&run).await.expect("created");
}

/// One batch through `writer` at `now`: `items` and a claim by `w1` for one `noop` step.
pub async fn batch(writer: &mut BatchWriter, items: &[ReportItem], now: i64) -> StoreResult<BatchOutcome> {
    let request = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 1, now_ms: now };
    let nobody = |_: usize| Vec::new();
    writer
        .write_batch(&Batch {
            runs: &[],
            reports: items,
            claims: &[request],
            limits: ReportLimits { max_output_bytes: 1024 },
            lease_ttl_ms: 30_000,
            now_ms: now,
            handoff: &nobody,
        })
        .await
}

/// What a [`proxy`] does, once armed, to the next message naming its statement.
#[derive(Clone, Copy, PartialEq)]
pub enum Loss {
    /// Forwards the statement's execution, then closes the client's socket as soon as the server answers it,
    /// without passing the answer on: the statement ran, and the client sees a lost connection.
    Answer,
    /// Closes both sockets instead of forwarding the message: the statement never reached the server.
    Request,
    /// Forwards nothing from that message on, in either direction, and keeps each side's socket open even after
    /// the other side closed its own: a network cut, or a server host that vanished. The client waits for an answer
    /// that never comes; the server's session, having never received the statement, sits idle in its
    /// transaction (holding its locks) until it times out.
    Silence,
    /// As `Silence`, but from just after the statement's answer: the statement ran and was answered, then the
    /// connection was cut (a listener's `LISTEN`, after which the client only reads).
    SilenceAfter,
    /// As `Answer`, for the next `COMMIT` the connection sends after the message naming the statement: the
    /// transaction the statement ran in committed, and its client sees a lost connection instead of the answer.
    /// This picks one transaction by a statement only it runs, where `COMMIT` itself names none. The flag goes
    /// down when that `COMMIT` is sent on, not when the statement is seen.
    CommitAnswerAfter,
}

impl Loss {
    fn silent(self) -> bool {
        matches!(self, Loss::Silence | Loss::SilenceAfter)
    }
}

/// The text of a `COMMIT` as sqlx sends it (a simple query, its string ended by a NUL).
const COMMIT: &[u8] = b"COMMIT\0";

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A TCP proxy to PostgreSQL that, once armed (the returned flag), loses the answer to or the request of the next
/// message naming `statement` (`loss`; with [`Loss::CommitAnswerAfter`], of the next `COMMIT` on that message's
/// connection). With `prepared`, the statement's execution is the client's write after that message: sqlx
/// prepares a statement (`Parse`, `Describe`, `Sync`) in one write and runs it (`Bind`, `Execute`, `Sync`) in
/// the next; a simple query (`COMMIT`) runs in the write naming it. A prepared statement's text crosses a
/// connection only the first time it runs there, so the statement must not have run on it before the proxy is
/// armed. Returns the proxy's port and the flag (left unarmed while the migrations run: they name the functions
/// too).
pub async fn proxy(
    server: std::net::SocketAddr,
    statement: &'static [u8],
    prepared: bool,
    loss: Loss,
) -> (u16, Arc<AtomicBool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(server).await else { continue };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = upstream.into_split();
            let (doomed, answering) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
            let (armed, doomed_up, answering_up) = (armed.clone(), doomed.clone(), answering.clone());
            tokio::spawn(async move {
                let mut buf = vec![0_u8; 64 * 1024];
                let mut next_runs_it = false;
                // `CommitAnswerAfter`: the statement was named here; the next `COMMIT` is the doomed one.
                let mut commit_doomed = false;
                while let Ok(n) = client_read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut runs_it = std::mem::take(&mut next_runs_it);
                    let named = find(&buf[..n], statement);
                    let mut commit_from = 0;
                    if let Some(at) = named
                        && loss == Loss::CommitAnswerAfter
                        && armed.load(Ordering::SeqCst)
                    {
                        // The flag goes down with the `COMMIT` itself, so a test sees that the answer was lost.
                        (commit_doomed, commit_from) = (true, at);
                    } else if named.is_some() && armed.swap(false, Ordering::SeqCst) {
                        if prepared { next_runs_it = true } else { runs_it = true }
                    }
                    if commit_doomed && find(&buf[commit_from..n], COMMIT).is_some() {
                        commit_doomed = false;
                        runs_it |= armed.swap(false, Ordering::SeqCst);
                    }
                    if runs_it && loss == Loss::Request {
                        break;
                    }
                    if runs_it && loss == Loss::SilenceAfter {
                        answering_up.store(true, Ordering::SeqCst);
                    } else if runs_it {
                        doomed_up.store(true, Ordering::SeqCst);
                    }
                    if loss.silent() && doomed_up.load(Ordering::SeqCst) {
                        continue;
                    }
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                if loss.silent() && doomed_up.load(Ordering::SeqCst) {
                    // The server must not learn its client is gone: hold its socket open for good.
                    std::future::pending::<()>().await;
                    drop(server_write);
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0_u8; 64 * 1024];
                while let Ok(n) = server_read.read(&mut buf).await {
                    if n > 0 && loss.silent() && doomed.load(Ordering::SeqCst) {
                        continue;
                    }
                    if n > 0 && answering.swap(false, Ordering::SeqCst) {
                        // The statement's answer passes; nothing after it.
                        doomed.store(true, Ordering::SeqCst);
                        if client_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    // The server answered the doomed statement: it ran. Drop both sockets unanswered.
                    if n == 0 || doomed.load(Ordering::SeqCst) {
                        break;
                    }
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                if loss.silent() && doomed.load(Ordering::SeqCst) {
                    // Nor may the client learn the server ended the session: a cut passes no FIN either way.
                    std::future::pending::<()>().await;
                    drop(client_write);
                }
            });
        }
    });
    (port, arm)
}

/// A migrated store through a [`proxy`] to the test's server, with run `r1` (two roots) created, and the
/// proxy's flag.
pub async fn store_behind(
    options: &PgConnectOptions,
    statement: &'static [u8],
    prepared: bool,
    loss: Loss,
) -> (Store, Arc<AtomicBool>) {
    store_behind_with(options, statement, prepared, loss, cairn_store::DEFAULT_ANSWER_DEADLINE).await
}

/// As [`store_behind`], with the store's answer deadline (`Store::connect_with`).
pub async fn store_behind_with(
    options: &PgConnectOptions,
    statement: &'static [u8],
    prepared: bool,
    loss: Loss,
    answer_deadline: std::time::Duration,
) -> (Store, Arc<AtomicBool>) {
    let database = options.get_database().expect("sqlx::test names the database").to_owned();
    let server = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .expect("the server resolves")
        .next()
        .expect("an address");
    let (port, armed) = proxy(server, statement, prepared, loss).await;
    let url = format!("postgres://{}@127.0.0.1:{port}/{database}", options.get_username());
    let store = Store::connect_with(&url, answer_deadline).await.expect("the store connects through the proxy");
    store.migrate().await.expect("migrations apply");
    create_r1(&store, false).await;
    (store, armed)
}

/// Each step's id, status and attempt, for `r1`.
pub async fn steps_of_r1(store: &Store) -> Vec<(String, String, u32)> {
    let steps = store.steps("r1").await.expect("steps");
    steps.into_iter().map(|s| (s.id, s.status.to_string(), s.attempts)).collect()
}
