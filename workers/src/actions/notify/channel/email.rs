//! Email: one message over SMTP to the recipient's `address`, through lettre.
//!
//! The server is `CAIRN_NOTIFY_SMTP_URL` in lettre's URL form: `smtp://user:pass@host:587?tls=required`
//! (STARTTLS, required), `smtps://user:pass@host:465` (implicit TLS), `smtp://host:25` (plain, for a local
//! relay only). `CAIRN_NOTIFY_SMTP_CA_FILE` adds a PEM root to the system's, so a server with a private CA can
//! still be verified. From is `CAIRN_NOTIFY_SMTP_FROM`; the subject is the title, else the text's first line.
//!
//! The `Message-ID` is derived from the step's idempotency key and the recipient, so every attempt sends the
//! same one and a receiver can drop a repeat; it is also the provider id.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_core::failure::codes;
use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{ChannelError, ErrorKind, Message, Sent};

const WHAT: &str = "email";

/// The SMTP server and the sender.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SmtpConfig {
    /// `CAIRN_NOTIFY_SMTP_URL`: lettre's connection URL, credentials included (hence a secret); `None` leaves
    /// the channel unconfigured.
    pub url: Option<SecretString>,
    /// `CAIRN_NOTIFY_SMTP_FROM`: the From mailbox (`Cairn <cairn@example.com>` or a bare address).
    pub from: Option<String>,
    /// `CAIRN_NOTIFY_SMTP_CA_FILE`: a PEM file of roots to trust besides the system's.
    pub ca_file: Option<PathBuf>,
}

/// The email channel: its transport and sender, or why it cannot send.
pub(crate) struct Email(Result<Sender, String>);

struct Sender {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl fmt::Debug for Email {
    // The transport holds the credentials; say only whether the channel works.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ok(sender) => f.debug_struct("Email").field("from", &sender.from.to_string()).finish_non_exhaustive(),
            Err(why) => f.debug_tuple("Email").field(why).finish(),
        }
    }
}

impl Email {
    /// The channel per `config`; each SMTP command may take up to `timeout`. A configuration that cannot work
    /// is kept as the reason every send fails with (an unconfigured channel, not a worker that will not start).
    pub(crate) fn new(config: &SmtpConfig, timeout: Duration) -> Self {
        Self(Sender::new(config, timeout))
    }

    /// One message to `address`, the whole session taking at most `timeout` (lettre bounds each command).
    pub(crate) async fn send(
        &self,
        address: &str,
        message: &Message<'_>,
        timeout: Duration,
    ) -> Result<Sent, ChannelError> {
        let sender = self.0.as_ref().map_err(|why| ChannelError::unconfigured(format!("{WHAT}: {why}")))?;
        let to: Mailbox = address.parse().map_err(|e| {
            ChannelError::unconfigured(format!("{WHAT}: `{}` is not an address: {e}", address.escape_debug()))
        })?;
        let id = message_id(message, &sender.from);
        let email = lettre::Message::builder()
            .from(sender.from.clone())
            .to(to)
            .subject(subject(message))
            .message_id(Some(id.clone()))
            .header(ContentType::TEXT_PLAIN)
            .body(message.text.to_owned())
            .map_err(|e| ChannelError::unconfigured(format!("{WHAT}: cannot build the message: {e}")))?;
        match tokio::time::timeout(timeout, sender.transport.send(email)).await {
            Ok(Ok(_)) => Ok(Sent { provider_message_id: Some(id) }),
            Ok(Err(e)) => Err(classify(&e)),
            Err(_) => Err(ChannelError::answered(
                ErrorKind::Transient,
                codes::TIMEOUT,
                format!("{WHAT}: no answer within {timeout:?} (the server may have the message)"),
            )
            .ambiguous()),
        }
    }
}

impl Sender {
    fn new(config: &SmtpConfig, timeout: Duration) -> Result<Self, String> {
        let url = config.url.as_ref().ok_or("channel not configured (CAIRN_NOTIFY_SMTP_URL)")?.expose_secret();
        let from = config.from.as_deref().ok_or("channel not configured (no sender: CAIRN_NOTIFY_SMTP_FROM)")?;
        let from: Mailbox = from.parse().map_err(|e| format!("CAIRN_NOTIFY_SMTP_FROM is not a mailbox: {e}"))?;
        // lettre's messages about a URL never repeat it, so the password stays out of them.
        let mut builder =
            AsyncSmtpTransport::<Tokio1Executor>::from_url(url).map_err(|e| format!("CAIRN_NOTIFY_SMTP_URL: {e}"))?;
        if let Some(path) = &config.ca_file {
            builder = builder.tls(tls_trusting(url, path)?);
        }
        Ok(Self { transport: builder.timeout(Some(timeout)).build(), from })
    }
}

/// The URL's TLS mode with `ca_file`'s roots added to the system's (lettre's URL form has no place for them).
fn tls_trusting(url: &str, ca_file: &Path) -> Result<Tls, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("CAIRN_NOTIFY_SMTP_URL: {e}"))?;
    let host = parsed.host_str().ok_or("CAIRN_NOTIFY_SMTP_URL has no host")?.to_owned();
    let pem = std::fs::read(ca_file).map_err(|e| format!("cannot read {}: {e}", ca_file.display()))?;
    let certificate = Certificate::from_pem(&pem).map_err(|e| format!("{}: {e}", ca_file.display()))?;
    let parameters = TlsParameters::builder(host)
        .add_root_certificate(certificate)
        .build_rustls()
        .map_err(|e| format!("{}: {e}", ca_file.display()))?;
    let mode = parsed.query_pairs().find(|(k, _)| k == "tls").map(|(_, v)| v.into_owned());
    match (parsed.scheme(), mode.as_deref()) {
        ("smtps", _) => Ok(Tls::Wrapper(parameters)),
        ("smtp", Some("required")) => Ok(Tls::Required(parameters)),
        ("smtp", Some("opportunistic")) => Ok(Tls::Opportunistic(parameters)),
        _ => Err("CAIRN_NOTIFY_SMTP_CA_FILE needs a TLS URL (smtps://, or smtp:// with ?tls=required)".into()),
    }
}

/// The title, else the text's first line.
fn subject(message: &Message<'_>) -> String {
    match message.title {
        Some(title) => title.to_owned(),
        None => message.text.lines().next().unwrap_or_default().to_owned(),
    }
}

/// `<cairn.HASH@DOMAIN>`: HASH from the step's key and the recipient, DOMAIN the sender's.
fn message_id(message: &Message<'_>, from: &Mailbox) -> String {
    let digest = Sha256::digest(format!("{}\n{}", message.idempotency_key, message.recipient_id));
    let hash: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("<cairn.{hash}@{}>", from.email.domain())
}

/// An SMTP failure as a try's error. A negative reply means the server did not take the message (RFC 5321),
/// so nothing was sent; a broken session may have ended after the data was written, so it is ambiguous.
fn classify(error: &lettre::transport::smtp::Error) -> ChannelError {
    let message = format!("{WHAT}: {}", crate::actions::transport::error_chain(error));
    if let Some(code) = error.status() {
        let failure = match code.to_string().as_str() {
            "530" | "534" | "535" => codes::UNAUTHORIZED,
            _ => codes::ACTION_ERROR,
        };
        let kind = if error.is_permanent() { ErrorKind::Permanent } else { ErrorKind::Transient };
        return ChannelError::answered(kind, failure, message).nothing_sent();
    }
    // lettre does not expose its connection kind; its message does: connecting (TCP, the TLS handshake,
    // STARTTLS) comes before any command that carries the message.
    if error.to_string().starts_with("Connection error") || error.is_tls() || error.is_transport_shutdown() {
        return ChannelError::answered(
            ErrorKind::Transient,
            codes::ACTION_ERROR,
            format!("{message} (nothing was sent)"),
        )
        .nothing_sent();
    }
    if error.is_client() {
        // No STARTTLS offered, no usable AUTH mechanism: the server will not change by retrying.
        return ChannelError::answered(ErrorKind::Permanent, codes::ACTION_ERROR, message).nothing_sent();
    }
    let failure = if error.is_timeout() { codes::TIMEOUT } else { codes::TRANSPORT_ERROR };
    ChannelError::answered(ErrorKind::Transient, failure, format!("{message} (the server may have the message)"))
        .ambiguous()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn message<'a>(key: &'a str, recipient: &'a str) -> Message<'a> {
        Message {
            text: "first line\nsecond",
            title: None,
            idempotency_key: key,
            recipient_id: recipient,
            payload: Value::Null,
        }
    }

    #[test]
    fn the_message_id_is_stable_per_step_and_recipient() {
        let from: Mailbox = "Cairn <cairn@example.com>".parse().expect("a mailbox");
        let id = message_id(&message("run-1/remind", "alice"), &from);
        assert_eq!(id, message_id(&message("run-1/remind", "alice"), &from), "every attempt sends the same id");
        assert_ne!(id, message_id(&message("run-1/remind", "bob"), &from), "each recipient has its own");
        assert!(id.starts_with("<cairn.") && id.ends_with("@example.com>"), "{id}");
        assert_eq!(subject(&message("k", "a")), "first line", "without a title the first line is the subject");
    }

    #[test]
    fn settings_that_cannot_work_leave_the_channel_unconfigured_without_naming_the_password() {
        let config = |url: &str, from: Option<&str>| SmtpConfig {
            url: Some(url.to_owned().into()),
            from: from.map(str::to_owned),
            ca_file: None,
        };
        let no_from = Sender::new(&config("smtp://u:hunter2@127.0.0.1:25", None), Duration::from_secs(1));
        assert!(no_from.is_err_and(|why| why.contains("CAIRN_NOTIFY_SMTP_FROM")));
        let bad_scheme = Sender::new(&config("imap://u:hunter2@host", Some("a@example.com")), Duration::from_secs(1));
        let why = bad_scheme.err().expect("an unknown scheme");
        assert!(!why.contains("hunter2"), "{why}");
        let printed = format!(
            "{:?}",
            Email::new(&config("smtp://u:hunter2@h:25", Some("a@example.com")), Duration::from_secs(1))
        );
        assert!(!printed.contains("hunter2"), "{printed}");
    }
}
