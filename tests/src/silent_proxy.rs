//! A TCP proxy that can go silent: between [`SilentProxy::silence`] and [`SilentProxy::speak`] it forwards
//! nothing in either direction and closes nothing, as a network stall or a database host that stopped
//! answering would; afterwards the bytes held back flow again, in order. Put it between an orchestrator and
//! PostgreSQL to make the store silent for a while without losing a byte.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; stops accepting when dropped (connections already open end when either side closes).
pub struct SilentProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    silent: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl SilentProxy {
    /// Forwards connections on a fresh local port to `target`.
    pub async fn start(target: SocketAddr) -> SilentProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a local port");
        let addr = listener.local_addr().expect("an address");
        let (silent, watching) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else { continue };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(forward(client_read, server_write, watching.clone()));
                tokio::spawn(forward(server_read, client_write, watching.clone()));
            }
        });
        SilentProxy { addr, silent, accept }
    }

    /// From now on nothing is forwarded.
    pub fn silence(&self) {
        self.silent.send_replace(true);
    }

    /// Forwarding resumes, starting with what was held back.
    pub fn speak(&self) {
        self.silent.send_replace(false);
    }
}

impl Drop for SilentProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to`, holding each chunk back while the proxy is silent.
async fn forward(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, mut silent: watch::Receiver<bool>) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let Ok(n) = from.read(&mut buffer).await else { return };
        if n == 0 || silent.wait_for(|silent| !silent).await.is_err() || to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
