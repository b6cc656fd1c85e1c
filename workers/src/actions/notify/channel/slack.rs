//! Slack: an incoming webhook, `POST webhook_url` with `{"text"}`; the title is a bold first line (`*title*`,
//! Slack's mrkdwn). Slack answers 200 `ok`, or a status with a reason (`400 invalid_payload`, `403
//! action_prohibited`, `404 channel_not_found`, `410 channel_is_archived`, `429` with `Retry-After`), classified
//! as every outbound call's status is. An incoming webhook returns no message id.

use std::time::Duration;

use serde_json::json;

use super::{ChannelError, Message, Sent};

const WHAT: &str = "slack";

/// One message to the incoming webhook at `url`.
pub(crate) async fn send(
    client: &reqwest::Client,
    url: &str,
    message: &Message<'_>,
    timeout: Duration,
) -> Result<Sent, ChannelError> {
    let text = match message.title {
        Some(title) => format!("*{title}*\n{}", message.text),
        None => message.text.to_owned(),
    };
    let answer = super::exchange(WHAT, client.post(url).json(&json!({"text": text})).timeout(timeout)).await?;
    if answer.status.is_success() { Ok(Sent::default()) } else { Err(answer.rejected(WHAT)) }
}
