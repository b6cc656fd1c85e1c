//! Limits of the worker protocol's server: message sizes, streams per connection and connections.
//!
//! Message sizes are set on the service ([`super::WorkerGrpc::service_with_limit`]); a message over the limit, a request
//! or an answer, fails its call with `OUT_OF_RANGE` (read from its length prefix, so it is never buffered) and
//! nothing else: the connection and the other calls on it go on. Streams per connection are HTTP/2's
//! `SETTINGS_MAX_CONCURRENT_STREAMS`: a client past it queues its next call until one ends. Connections are
//! capped by [`capped`]: past the cap the accept waits, so a new connection stays in the listen queue until
//! one closes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

/// Limits of the worker protocol's server.
#[derive(Debug, Clone, Copy)]
pub struct GrpcLimits {
    /// Largest message the orchestrator decodes or encodes, in bytes. Default 4 MiB (tonic's decoding default):
    /// the Rust worker sends its completion batches in at most 1 MiB, and one completion alone may carry a step
    /// output of up to `max_output_bytes` (1 MiB by default), so keep this above both.
    pub max_message_bytes: usize,
    /// Most calls in flight on one connection (HTTP/2 streams). Default 256: a worker makes one heartbeat per
    /// running slot, up to 16 completion calls and a poll.
    pub max_concurrent_streams: u32,
    /// Most worker connections at once; further ones wait in the listen queue until one closes. Default 1,024.
    pub max_connections: usize,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        Self { max_message_bytes: 4 * 1024 * 1024, max_concurrent_streams: 256, max_connections: 1024 }
    }
}

/// `incoming`'s connections, at most `max` open at once: the next accept waits for a slot, which each
/// connection holds until it is dropped.
pub(crate) fn capped(incoming: TcpIncoming, max: usize) -> impl Stream<Item = io::Result<Capped>> {
    let slots = Arc::new(Semaphore::new(max.max(1)));
    futures::stream::unfold((incoming, slots), |(mut incoming, slots)| async move {
        let slot = slots.clone().acquire_owned().await.ok()?;
        let accepted = incoming.next().await?;
        Some((accepted.map(|tcp| Capped { tcp, _slot: slot }), (incoming, slots)))
    })
}

/// A connection holding one of the [`capped`] slots.
#[derive(Debug)]
pub(crate) struct Capped {
    tcp: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl Connected for Capped {
    type ConnectInfo = TcpConnectInfo;

    /// The TCP stream's, so `Request::remote_addr` still names the worker.
    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp.connect_info()
    }
}

impl AsyncRead for Capped {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Capped {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
