//! The REST API's HTTP server: its own accept loop over hyper's connection builder, because `axum::serve`
//! exposes neither a header read timeout nor a cap on connections.
//!
//! - **Connections** are capped at [`HttpLimits::max_connections`]: the loop accepts only while it holds a free
//!   slot, so a connection over the cap waits in the listen queue (the kernel's backlog) until one closes, and
//!   is served then. Nothing is refused by Cairn itself; past the backlog the kernel drops new connection
//!   attempts, which clients retry.
//! - **Request heads** must arrive within [`HttpLimits::header_read_timeout`]: a connection's first head within
//!   that time of its accept (checked here, since hyper starts its own timer only once it has seen the first
//!   bytes and picked HTTP/1 or HTTP/2), and over HTTP/1 every later head within that time of the previous
//!   answer (hyper's `header_read_timeout`, which also closes idle keep-alive connections). A client that sends
//!   half a head and stalls (Slowloris) is disconnected, and its slot freed.
//! - Every connection sets `TCP_NODELAY` (small JSON answers must not wait for a delayed ACK) and hands its peer
//!   address to handlers as [`ConnectInfo`]`<SocketAddr>`.
//! - **Graceful shutdown**: once `stop` is cancelled the listener closes, idle connections close, requests in
//!   flight are answered (HTTP/1 connections then close, HTTP/2 ones get `GOAWAY`), and [`serve`] returns when
//!   the last connection has ended. [`crate::server::Server::shutdown`] bounds that wait by its grace.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::Service;

/// Limits on the REST API's connections.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Longest a client may take to send a full request head: counted from the accept for a connection's first
    /// request and from the previous answer for the next ones (HTTP/1 keep-alive). Past it the connection is
    /// closed without an answer. Default 10 s.
    pub header_read_timeout: Duration,
    /// Most connections served at once; further ones wait in the listen queue until one closes. Default 1,024.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self { header_read_timeout: Duration::from_secs(10), max_connections: 1024 }
    }
}

/// Serves `router` on `listener` within `limits` until `stop` is cancelled and every connection has ended.
pub(crate) async fn serve(listener: TcpListener, router: Router, limits: HttpLimits, stop: CancellationToken) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    loop {
        // A free slot first, then the accept: a connection over the cap stays in the listen queue.
        let slot = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (tcp, peer) = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let first_request = Arc::new(Notify::new());
        let service = {
            let (router, first_request) = (router.clone(), first_request.clone());
            hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                first_request.notify_one();
                request.extensions_mut().insert(ConnectInfo(peer));
                router.clone().call(request)
            })
        };
        let connection =
            graceful.watch(builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).into_owned());
        let head_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            tokio::pin!(connection);
            let ended = tokio::select! {
                biased;
                ended = &mut connection => Some(ended),
                () = first_request.notified() => None,
                () = tokio::time::sleep(head_timeout) => {
                    tracing::debug!(%peer, "no request head within the header read timeout; closing the connection");
                    return;
                }
            };
            let ended = match ended {
                Some(ended) => ended,
                None => connection.await,
            };
            if let Err(e) = ended {
                // Clients hanging up, header timeouts, malformed requests: the client's doing, not ours.
                tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// An accept that failed. A connection reset before it was accepted costs nothing; anything else (out of file
/// descriptors, above all) would fail again at once, so the loop pauses for a second first, as `axum::serve`
/// does.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accepting an HTTP connection failed; pausing for 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
