//! Webhook: a JSON `POST` of the message's payload to the recipient's `url` (or the worker's
//! `CAIRN_NOTIFY_WEBHOOK` for a step without `to`), signed when the recipient has a `secret`.
//!
//! Headers: `Idempotency-Key: <step key>/<recipient>` (the step key alone for the worker's own webhook), the
//! same on every attempt; with a secret, `Cairn-Timestamp: <unix seconds>` and
//! `Cairn-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>`, so the receiver can check the
//! body came from a holder of the secret and is recent (docs/architecture.md, "Verifying webhook
//! signatures"). Any 2xx is delivered; other statuses are classified as every outbound call's are.

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;

use super::{ChannelError, Message, Sent};

const WHAT: &str = "webhook";

/// The signature header's value for `body` sent at `timestamp`.
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut signed = format!("{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    let mac = super::hmac_sha256(secret.as_bytes(), &signed);
    format!("v1={}", mac.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// One `POST` of `message.payload` to `url`.
pub(crate) async fn send(
    client: &reqwest::Client,
    url: &str,
    secret: Option<&str>,
    message: &Message<'_>,
    timeout: Duration,
) -> Result<Sent, ChannelError> {
    // Signed over the exact bytes sent, so the body is serialised once, here.
    let body = serde_json::to_vec(&message.payload).unwrap_or_default();
    let mut request = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header("Idempotency-Key", message.dedupe_key())
        .timeout(timeout);
    if let Some(secret) = secret {
        let timestamp = super::unix_seconds();
        request = request
            .header("Cairn-Timestamp", timestamp.to_string())
            .header("Cairn-Signature", signature(secret, timestamp, &body));
    }
    let answer = super::exchange(WHAT, request.body(body)).await?;
    if answer.status.is_success() { Ok(Sent::default()) } else { Err(answer.rejected(WHAT)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body_in_hex() {
        // Computed independently: printf '1700000000.{"text":"hi"}' | openssl dgst -sha256 -hmac s3cret
        let value = signature("s3cret", 1_700_000_000, br#"{"text":"hi"}"#);
        assert_eq!(value, "v1=a4abab2c9ec335a751cf8c3848e413a84a4e0eef17a9660d993911fafacadb66");
    }
}
