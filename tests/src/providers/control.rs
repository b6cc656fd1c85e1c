//! What a test can make a stand-in do: fail the next sends ([`Fault`]) or hold them unanswered.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// How a send is failed. Each stand-in renders it as its provider would:
///
/// | fault | Telegram | webhook, Slack, ntfy | Feishu | SMTP |
/// |---|---|---|---|---|
/// | `Status(s)` | HTTP `s`, `{"ok": false, "error_code": s}` | HTTP `s` | HTTP `s` | reply code `s` to the end of `DATA` (e.g. 451, 550) |
/// | `RateLimited { retry_after_s }` | 429 with `parameters.retry_after` | 429 with `Retry-After` | 200 with code 11232 | 451 |
/// | `Telegram { error_code, description }` | HTTP `error_code` with that description | as `Status(error_code)` | as `Status` | as `Status` |
/// | `FeishuCode { code, msg }` | as `Status(400)` | as `Status(400)` | 200 with that `code` | as `Status(550)` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// An HTTP status (or an SMTP reply code).
    Status(u16),
    /// Too many requests: wait this many seconds.
    RateLimited {
        /// Seconds to wait.
        retry_after_s: u64,
    },
    /// A Bot API error, e.g. 400 `Bad Request: chat not found`.
    Telegram {
        /// `error_code` and HTTP status.
        error_code: u16,
        /// `description`.
        description: &'static str,
    },
    /// A Feishu bot's non-zero `code`.
    FeishuCode {
        /// The code, e.g. 19024.
        code: i64,
        /// Its `msg`.
        msg: &'static str,
    },
}

impl Fault {
    /// Telegram's answer for a chat the bot cannot see.
    pub fn chat_not_found() -> Fault {
        Fault::Telegram { error_code: 400, description: "Bad Request: chat not found" }
    }

    /// Telegram's answer when the user blocked the bot.
    pub fn bot_blocked() -> Fault {
        Fault::Telegram { error_code: 403, description: "Forbidden: bot was blocked by the user" }
    }

    /// The HTTP status this fault stands for where the provider has no richer form.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Fault::Status(status) => *status,
            Fault::RateLimited { .. } => 429,
            Fault::Telegram { error_code, .. } => *error_code,
            Fault::FeishuCode { .. } => 400,
        }
    }

    /// The fault as a plain HTTP answer (`Retry-After` on a rate limit).
    pub(crate) fn plain_response(&self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        match self {
            Fault::RateLimited { retry_after_s } => {
                let body = axum::Json(json!({"error": "rate limited"}));
                (status, [("retry-after", retry_after_s.to_string())], body).into_response()
            }
            _ => (status, axum::Json(json!({"error": "scripted failure"}))).into_response(),
        }
    }
}

/// A stand-in's scripted faults, its hold gate and its arrival count.
#[derive(Debug)]
pub(crate) struct Control {
    faults: Mutex<VecDeque<Fault>>,
    held: tokio::sync::watch::Sender<bool>,
    arrivals: AtomicUsize,
}

impl Default for Control {
    fn default() -> Self {
        Self { faults: Mutex::default(), held: tokio::sync::watch::Sender::new(false), arrivals: AtomicUsize::new(0) }
    }
}

impl Control {
    pub(crate) fn fail_next(&self, n: usize, fault: Fault) {
        self.faults.lock().unwrap().extend(std::iter::repeat_n(fault, n));
    }

    pub(crate) fn hold(&self) {
        self.held.send_replace(true);
    }

    pub(crate) fn release(&self) {
        self.held.send_replace(false);
    }

    pub(crate) fn arrivals(&self) -> usize {
        self.arrivals.load(Ordering::SeqCst)
    }

    /// A send arrived: counts it, waits while held, then says whether it is to fail.
    pub(crate) async fn arrive(&self) -> Option<Fault> {
        self.arrivals.fetch_add(1, Ordering::SeqCst);
        let mut gate = self.held.subscribe();
        // The sender lives as long as the stand-in, which outlives its calls.
        let _ = gate.wait_for(|held| !*held).await;
        self.faults.lock().unwrap().pop_front()
    }
}
