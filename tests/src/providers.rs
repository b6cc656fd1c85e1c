//! Stand-ins for the providers `notify.send` delivers to, on `127.0.0.1` with an OS-chosen port, each speaking
//! enough of the real protocol for the worker's channel to be exercised end to end:
//!
//! | stand-in | start | the worker's settings | what it records |
//! |---|---|---|---|
//! | [`TelegramStub`] | `start(token)` | `CAIRN_NOTIFY_TELEGRAM_API_URL = url()`, `CAIRN_NOTIFY_TELEGRAM_BOT_TOKEN = token` | [`TelegramMessage`] per chat |
//! | [`WebhookReceiver`] | `start(secret)` | recipient `{"webhook": {"url": url(), "secret": …}}` (any path) | [`WebhookCall`]s whose signature verified; bad ones are 401 and counted by `rejected()` |
//! | [`SlackStub`] | `start()` | recipient `{"slack": {"webhook_url": url()}}` | [`SlackMessage`]s |
//! | [`FeishuStub`] | `start(secret)` | recipient `{"feishu": {"webhook_url": url(), "secret": …}}` | [`FeishuMessage`]s whose `sign` verified; bad ones answer code 19021 |
//! | [`NtfyStub`] | `start()` | `CAIRN_NOTIFY_NTFY_SERVER = url()`, recipient `{"ntfy": {"topic": …}}` | [`NtfyMessage`]s |
//! | [`SmtpStub`] | `start(auth)` | `CAIRN_NOTIFY_SMTP_URL = url()`, `CAIRN_NOTIFY_SMTP_CA_FILE` = a file holding `ca_pem()` | [`ReceivedEmail`]s (STARTTLS is required before `MAIL`) |
//!
//! Every stand-in also has:
//! - `url()`: its base URL (`smtp://…?tls=required` for SMTP);
//! - `received()`: what it accepted, in arrival order;
//! - `fail_next(n, fault)`: the next `n` sends are answered with `fault` instead (see [`Fault`] for how each
//!   stand-in renders it); failed sends are not recorded in `received()`;
//! - `hold()` / `release()`: from `hold()` on, sends that arrive wait (unanswered) until `release()`, so a test
//!   can kill a worker mid-send; `arrivals()` counts sends that arrived, held, failed or accepted.

mod chat;
mod control;
mod ntfy;
mod smtp;
mod telegram;
mod webhook;

pub use chat::{FeishuMessage, FeishuStub, SlackMessage, SlackStub};
pub use control::Fault;
pub use ntfy::{NtfyMessage, NtfyStub};
pub use smtp::{ReceivedEmail, SmtpStub};
pub use telegram::{TelegramMessage, TelegramStub};
pub use webhook::{WebhookCall, WebhookReceiver};

/// The methods every stand-in shares, over its `shared.control` and `task` fields.
macro_rules! stand_in_controls {
    ($stub:ty) => {
        impl $stub {
            /// Answers the next `n` sends with `fault` instead of accepting them.
            pub fn fail_next(&self, n: usize, fault: $crate::providers::Fault) {
                self.shared.control.fail_next(n, fault);
            }

            /// From now on, sends that arrive wait unanswered until [`Self::release`].
            pub fn hold(&self) {
                self.shared.control.hold();
            }

            /// Lets held sends (and later ones) be answered.
            pub fn release(&self) {
                self.shared.control.release();
            }

            /// Sends that arrived so far: held, failed or accepted.
            pub fn arrivals(&self) -> usize {
                self.shared.control.arrivals()
            }
        }

        impl Drop for $stub {
            fn drop(&mut self) {
                self.task.abort();
            }
        }
    };
}
pub(crate) use stand_in_controls;
