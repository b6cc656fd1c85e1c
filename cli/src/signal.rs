//! The signals that stop a long-running command: ctrl-c (SIGINT) and, on Unix, SIGTERM (what Docker, systemd
//! and Kubernetes send).
//!
//! The handlers are installed by [`Stop::install`], before the command starts anything: a signal that arrives
//! while it is still starting (an orchestrator answering already, its worker not yet built) must stop it
//! gracefully too, not kill it with the default action.

/// Installed signal handlers; [`Stop::wait`] resolves on the first signal.
pub struct Stop {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    interrupt: std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>>,
}

impl Stop {
    /// Installs the handlers (call inside the tokio runtime, first thing).
    pub fn install() -> Stop {
        #[cfg(unix)]
        let term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => Some(term),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; stop with ctrl-c");
                None
            }
        };
        // `ctrl_c` registers its handler on first poll; poll it once now.
        let mut interrupt: std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>> =
            Box::pin(tokio::signal::ctrl_c());
        let waker = std::task::Waker::noop();
        let _ = interrupt.as_mut().poll(&mut std::task::Context::from_waker(waker));
        Stop {
            #[cfg(unix)]
            term,
            interrupt,
        }
    }

    /// Resolves on ctrl-c or, on Unix, SIGTERM.
    pub async fn wait(mut self) {
        #[cfg(unix)]
        if let Some(term) = self.term.as_mut() {
            tokio::select! {
                _ = &mut self.interrupt => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = self.interrupt.await;
    }
}
