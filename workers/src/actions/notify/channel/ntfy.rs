//! ntfy: `POST <server>/<topic>` with the text as the body and the title in the `Title` header (RFC 2047
//! encoded when it is not ASCII, which ntfy decodes). The server is the recipient's `server`, else
//! `CAIRN_NOTIFY_NTFY_SERVER` (default `https://ntfy.sh`); ntfy answers the message as JSON, whose `id` is the
//! provider id.

use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use super::{ChannelError, Message, Sent};

const WHAT: &str = "ntfy";

/// The worker's default ntfy server.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct NtfyConfig {
    /// Base URL of the server for recipients that name none (`CAIRN_NOTIFY_NTFY_SERVER`).
    pub server: String,
}

impl Default for NtfyConfig {
    fn default() -> Self {
        Self { server: "https://ntfy.sh".into() }
    }
}

#[derive(Debug, Deserialize)]
struct Published {
    id: Option<String>,
}

/// One message to `topic` on `server`.
pub(crate) async fn send(
    client: &reqwest::Client,
    server: &str,
    topic: &str,
    message: &Message<'_>,
    timeout: Duration,
) -> Result<Sent, ChannelError> {
    let url = format!("{}/{topic}", server.trim_end_matches('/'));
    let mut request = client.post(url).body(message.text.to_owned()).timeout(timeout);
    if let Some(title) = message.title {
        request = request.header("Title", header_text(title));
    }
    let answer = super::exchange(WHAT, request).await?;
    if !answer.status.is_success() {
        return Err(answer.rejected(WHAT));
    }
    let id = serde_json::from_str::<Published>(&answer.body).ok().and_then(|p| p.id);
    Ok(Sent { provider_message_id: id })
}

/// `text` as a header value: itself when it is printable ASCII, else an RFC 2047 encoded word.
fn header_text(text: &str) -> String {
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return text.to_owned();
    }
    format!("=?UTF-8?B?{}?=", base64::engine::general_purpose::STANDARD.encode(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_that_is_not_ascii_is_an_encoded_word() {
        assert_eq!(header_text("Rain today"), "Rain today");
        assert_eq!(header_text("下雨"), "=?UTF-8?B?5LiL6Zuo?=");
    }
}
