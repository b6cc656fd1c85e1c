//! Recipients: the people (or systems) `notify.send` delivers to. A recipient has an id, the channels it is
//! bound to — a map keyed by [`ChannelType`], each value that channel's settings — and an optional preferred
//! time zone:
//!
//! ```json
//! {"channels": {"telegram": {"chat_id": "42"}, "email": {"address": "a@example.com"}}, "timezone": "Asia/Shanghai"}
//! ```
//!
//! The rules live here so the API, the CLI, the validator (unknown channel names at submit) and the worker that
//! delivers agree on them. Every size is bounded before anything is stored or sent.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::catalog::ActionCatalog;
use serde_json::Value;

use crate::text::{Field, TextError};

/// A recipient's id: `[A-Za-z0-9_.:@-]`, 1 to 128 bytes.
pub const RECIPIENT_ID: Field = Field { name: "recipient id", max_bytes: 128 };
/// Longest setting value (a chat id, an address, a URL, a secret), in bytes.
pub const MAX_SETTING_BYTES: usize = 2048;
/// Most recipients one `notify.send` step may name.
pub const MAX_RECIPIENTS_PER_STEP: usize = 100;

/// A kind of channel a recipient can be bound to.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ChannelType {
    /// Telegram Bot API `sendMessage` to `chat_id`.
    Telegram,
    /// Email over SMTP (STARTTLS) to `address`.
    Email,
    /// A Slack incoming webhook.
    Slack,
    /// A Feishu/Lark bot webhook, signed when it has a `secret`.
    Feishu,
    /// A JSON `POST` to `url`, signed with HMAC-SHA256 when it has a `secret`.
    Webhook,
    /// An ntfy topic (`server` defaults to the worker's configured one).
    Ntfy,
    /// A line on the worker's standard output (development).
    Stdout,
    /// A JSON line appended to the worker's notification file (development).
    File,
}

impl ChannelType {
    /// The name plans and recipients spell it with.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every channel type's name, for messages.
    pub fn names() -> Vec<&'static str> {
        <Self as strum::VariantArray>::VARIANTS.iter().map(|c| c.as_str()).collect()
    }
}

/// One bound channel's settings, typed by its channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelSettings {
    /// `{"chat_id": "42"}` (a numeric id or `@channelusername`).
    Telegram {
        /// Chat id.
        chat_id: String,
    },
    /// `{"address": "a@example.com"}`.
    Email {
        /// Mailbox address.
        address: String,
    },
    /// `{"webhook_url": "https://hooks.slack.com/services/…"}`.
    Slack {
        /// Incoming-webhook URL (a credential).
        webhook_url: String,
    },
    /// `{"webhook_url": "…", "secret": "…"}`.
    Feishu {
        /// Bot webhook URL.
        webhook_url: String,
        /// Signing secret, when the bot has signature verification on.
        secret: Option<String>,
    },
    /// `{"url": "…", "secret": "…"}`.
    Webhook {
        /// Where to post.
        url: String,
        /// HMAC-SHA256 key for the `Cairn-Signature` header.
        secret: Option<String>,
    },
    /// `{"topic": "…", "server": "https://ntfy.sh"}`.
    Ntfy {
        /// Topic name.
        topic: String,
        /// Server base URL, when not the worker's default.
        server: Option<String>,
    },
    /// `{}`.
    Stdout,
    /// `{}`.
    File,
}

/// A recipient as stored and served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Recipient {
    /// Bound channels, keyed by type; each value is that channel's settings.
    pub channels: BTreeMap<ChannelType, Value>,
    /// Preferred IANA time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// Why a recipient, its id or a channel's settings break the rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipientError {
    /// The id is empty, too long or holds NUL.
    #[error(transparent)]
    Id(#[from] TextError),
    /// The id holds a character outside `[A-Za-z0-9_.:@-]`.
    #[error("recipient id `{id}` may only hold A-Z, a-z, 0-9, `_`, `.`, `:`, `@` and `-`")]
    IdCharacters {
        /// The id, escaped for printing.
        id: String,
    },
    /// The body is not a recipient (unknown field, unknown channel type, wrong types).
    #[error("not a recipient: {0}")]
    Shape(String),
    /// A recipient with no channel.
    #[error("a recipient needs at least one channel")]
    NoChannels,
    /// One channel's settings are wrong.
    #[error("channel `{channel}`: {message}")]
    Settings {
        /// The channel type.
        channel: &'static str,
        /// What is wrong.
        message: String,
    },
    /// `timezone` is not an IANA time zone.
    #[error("timezone `{0}` is not an IANA time zone name")]
    Timezone(String),
}

/// Checks a recipient id.
///
/// # Errors
/// The first rule broken.
pub fn check_id(id: &str) -> Result<(), RecipientError> {
    RECIPIENT_ID.check(id)?;
    if !id.chars().all(|c| c.is_ascii_alphanumeric() || "_.:@-".contains(c)) {
        return Err(RecipientError::IdCharacters { id: id.escape_debug().to_string() });
    }
    Ok(())
}

/// Parses and checks a recipient body: its shape, every channel's settings and the time zone.
///
/// # Errors
/// What is wrong, naming the channel.
pub fn parse(body: &Value) -> Result<Recipient, RecipientError> {
    let recipient: Recipient =
        serde_json::from_value(body.clone()).map_err(|e| RecipientError::Shape(shape_message(&e)))?;
    if recipient.channels.is_empty() {
        return Err(RecipientError::NoChannels);
    }
    for (kind, settings) in &recipient.channels {
        ChannelSettings::parse(*kind, settings)?;
    }
    if let Some(zone) = &recipient.timezone
        && crate::time_spec::zone(zone).is_err()
    {
        return Err(RecipientError::Timezone(zone.escape_debug().to_string()));
    }
    Ok(recipient)
}

fn shape_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("unknown variant") {
        return format!("{text} (channel types: {})", ChannelType::names().join(", "));
    }
    text
}

impl ChannelSettings {
    /// Parses `settings` as the settings of a `kind` channel.
    ///
    /// # Errors
    /// [`RecipientError::Settings`] naming the field.
    pub fn parse(kind: ChannelType, settings: &Value) -> Result<Self, RecipientError> {
        let fields = Fields::of(kind, settings)?;
        let parsed = match kind {
            ChannelType::Telegram => Self::Telegram { chat_id: fields.chat_id()? },
            ChannelType::Email => Self::Email { address: fields.address()? },
            ChannelType::Slack => Self::Slack { webhook_url: fields.url("webhook_url")? },
            ChannelType::Feishu => {
                Self::Feishu { webhook_url: fields.url("webhook_url")?, secret: fields.optional("secret")? }
            }
            ChannelType::Webhook => Self::Webhook { url: fields.url("url")?, secret: fields.optional("secret")? },
            ChannelType::Ntfy => Self::Ntfy {
                topic: fields.topic()?,
                server: fields.optional("server")?.map(|s| fields.check_url("server", s)).transpose()?,
            },
            ChannelType::Stdout => Self::Stdout,
            ChannelType::File => Self::File,
        };
        fields.no_others()?;
        Ok(parsed)
    }

    /// The channel type these settings belong to.
    pub fn kind(&self) -> ChannelType {
        match self {
            Self::Telegram { .. } => ChannelType::Telegram,
            Self::Email { .. } => ChannelType::Email,
            Self::Slack { .. } => ChannelType::Slack,
            Self::Feishu { .. } => ChannelType::Feishu,
            Self::Webhook { .. } => ChannelType::Webhook,
            Self::Ntfy { .. } => ChannelType::Ntfy,
            Self::Stdout => ChannelType::Stdout,
            Self::File => ChannelType::File,
        }
    }
}

/// The settings object of one channel, read field by field.
struct Fields<'a> {
    kind: ChannelType,
    map: &'a serde_json::Map<String, Value>,
    allowed: &'static [&'static str],
}

impl<'a> Fields<'a> {
    fn of(kind: ChannelType, settings: &'a Value) -> Result<Self, RecipientError> {
        let allowed: &'static [&'static str] = match kind {
            ChannelType::Telegram => &["chat_id"],
            ChannelType::Email => &["address"],
            ChannelType::Slack => &["webhook_url"],
            ChannelType::Feishu => &["webhook_url", "secret"],
            ChannelType::Webhook => &["url", "secret"],
            ChannelType::Ntfy => &["topic", "server"],
            ChannelType::Stdout | ChannelType::File => &[],
        };
        let Some(map) = settings.as_object() else {
            return Err(RecipientError::Settings {
                channel: kind.as_str(),
                message: "settings must be an object".into(),
            });
        };
        Ok(Self { kind, map, allowed })
    }

    fn error(&self, message: impl Into<String>) -> RecipientError {
        RecipientError::Settings { channel: self.kind.as_str(), message: message.into() }
    }

    fn no_others(&self) -> Result<(), RecipientError> {
        match self.map.keys().find(|k| !self.allowed.contains(&k.as_str())) {
            Some(key) if self.allowed.is_empty() => Err(self.error(format!("takes no settings; `{key}` was given"))),
            Some(key) => Err(self.error(format!(
                "unknown field `{}`; expected {}",
                key.escape_debug(),
                self.allowed.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", ")
            ))),
            None => Ok(()),
        }
    }

    fn optional(&self, name: &str) -> Result<Option<String>, RecipientError> {
        let Some(value) = self.map.get(name) else { return Ok(None) };
        let Some(text) = value.as_str() else { return Err(self.error(format!("`{name}` must be a string"))) };
        if text.is_empty() || text.len() > MAX_SETTING_BYTES || text.contains('\0') {
            return Err(self.error(format!("`{name}` must be 1 to {MAX_SETTING_BYTES} bytes without NUL")));
        }
        Ok(Some(text.to_owned()))
    }

    fn required(&self, name: &str) -> Result<String, RecipientError> {
        self.optional(name)?.ok_or_else(|| self.error(format!("`{name}` is required")))
    }

    fn chat_id(&self) -> Result<String, RecipientError> {
        let id = self.required("chat_id")?;
        let numeric = id.strip_prefix('-').unwrap_or(&id);
        let numeric = !numeric.is_empty() && numeric.bytes().all(|b| b.is_ascii_digit());
        let username = id
            .strip_prefix('@')
            .is_some_and(|u| (5..=32).contains(&u.len()) && u.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        if !(username || (numeric && id.len() <= 32)) {
            return Err(
                self.error(format!("`chat_id` `{}` is neither a numeric chat id nor @username", id.escape_debug()))
            );
        }
        Ok(id)
    }

    fn address(&self) -> Result<String, RecipientError> {
        let address = self.required("address")?;
        let plausible = address.len() <= 254
            && address.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty() && domain.contains('.') && !domain.starts_with('.') && !domain.ends_with('.')
            })
            && address.matches('@').count() == 1
            && !address.chars().any(|c| c.is_whitespace() || c.is_control() || "<>,;\"".contains(c));
        if !plausible {
            return Err(self.error(format!("`address` `{}` is not an email address", address.escape_debug())));
        }
        Ok(address)
    }

    fn topic(&self) -> Result<String, RecipientError> {
        let topic = self.required("topic")?;
        if topic.len() > 64 || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(self.error("`topic` must be 1 to 64 characters of A-Z, a-z, 0-9, `_` and `-`"));
        }
        Ok(topic)
    }

    fn url(&self, name: &str) -> Result<String, RecipientError> {
        let url = self.required(name)?;
        self.check_url(name, url)
    }

    fn check_url(&self, name: &str, url: String) -> Result<String, RecipientError> {
        let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
        let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or_default());
        let fits = host.is_some_and(|h| !h.is_empty()) && !url.chars().any(|c| c.is_whitespace() || c.is_control());
        if !fits {
            return Err(self.error(format!("`{name}` must be an http:// or https:// URL with a host")));
        }
        Ok(url)
    }
}

/// The recipient ids a `to` value names: one id, or a list of ids. `None` when `to` is neither (a placeholder
/// string is returned as it is; callers skip placeholders).
pub fn ids_of(to: &Value) -> Option<Vec<&str>> {
    match to {
        Value::String(id) => Some(vec![id.as_str()]),
        Value::Array(items) => items.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

/// The recipient ids `args` names at `pointers` (an action's `recipient_args`), in order, each once. Values that
/// are not an id or a list of ids are skipped: the args schema and the validator speak about those.
pub fn named_in<'a>(pointers: &[String], args: &'a Value) -> Vec<&'a str> {
    let mut ids: Vec<&str> = Vec::new();
    for pointer in pointers {
        for id in args.pointer(pointer).and_then(ids_of).unwrap_or_default() {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// The literal recipient ids a plan document's steps name, each once, at most `max`: for every step whose action
/// `catalog` knows with `recipient_args`, the ids at those pointers that pass the id rules (a placeholder does
/// not). Lenient over a malformed plan: it names what it can. What a validation looks up before it runs, so
/// that [`ActionCatalog::recipient_exists`] can answer for them.
pub fn literal_ids(plan: &Value, catalog: &dyn ActionCatalog, max: usize) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let steps = plan.get("steps").and_then(Value::as_array).into_iter().flatten();
    for step in steps {
        let Some(entry) = step.get("action").and_then(Value::as_str).and_then(|a| catalog.get(a)) else { continue };
        let args = step.get("args").unwrap_or(&Value::Null);
        for id in named_in(&entry.spec().recipient_args, args) {
            if ids.len() == max {
                return ids;
            }
            if check_id(id).is_ok() && !ids.iter().any(|seen| seen == id) {
                ids.push(id.to_owned());
            }
        }
    }
    ids
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_plans_literal_ids_skip_placeholders_and_actions_without_recipients() {
        let catalog = crate::catalog::StaticCatalog::builtin();
        let plan = json!({"steps": [
            {"id": "a", "action": "notify.send", "args": {"to": ["alice", "$who.output.id", "bob"], "text": "t"}},
            {"id": "b", "action": "noop", "args": {"to": "carol"}},
            {"id": "c", "action": "notify.send", "args": {"to": "alice", "text": "t"}}]});
        assert_eq!(literal_ids(&plan, &catalog, 10), ["alice", "bob"]);
        assert_eq!(literal_ids(&plan, &catalog, 1), ["alice"]);
    }

    #[test]
    fn the_ids_args_name_come_once_in_order() {
        let args = json!({"to": ["b", "a", "b"], "cc": "a", "bcc": 7});
        let pointers = ["/to".to_owned(), "/cc".to_owned(), "/bcc".to_owned(), "/missing".to_owned()];
        assert_eq!(named_in(&pointers, &args), ["b", "a"]);
    }

    #[test]
    fn a_recipient_with_every_channel_type_parses() {
        let body = json!({"channels": {
            "telegram": {"chat_id": "-100123"}, "email": {"address": "a@example.com"},
            "slack": {"webhook_url": "https://hooks.slack.com/services/T/B/x"},
            "feishu": {"webhook_url": "https://open.feishu.cn/open-apis/bot/v2/hook/x", "secret": "s"},
            "webhook": {"url": "http://127.0.0.1:9/hook"}, "ntfy": {"topic": "alerts_1"},
            "stdout": {}, "file": {}}, "timezone": "Asia/Shanghai"});
        let recipient = parse(&body).unwrap();
        assert_eq!(recipient.channels.len(), 8);
        assert_eq!(serde_json::to_value(&recipient).unwrap(), body);
    }

    #[test]
    fn wrong_settings_name_the_channel_and_the_field() {
        let cases = [
            (json!({"channels": {"telegram": {}}}), "channel `telegram`: `chat_id` is required"),
            (json!({"channels": {"telegram": {"chat_id": "abc"}}}), "neither a numeric chat id"),
            (json!({"channels": {"email": {"address": "nobody"}}}), "is not an email address"),
            (json!({"channels": {"slack": {"webhook_url": "ftp://x"}}}), "http:// or https:// URL"),
            (json!({"channels": {"webhook": {"url": "https://x", "sekret": "s"}}}), "unknown field `sekret`"),
            (json!({"channels": {"stdout": {"x": 1}}}), "takes no settings"),
            (json!({"channels": {"sms": {}}}), "channel types: telegram, email"),
            (json!({"channels": {}}), "at least one channel"),
            (json!({"channels": {"stdout": {}}, "timezone": "Mars/Base"}), "not an IANA time zone"),
            (json!({"channels": {"stdout": {}}, "tz": "UTC"}), "unknown field `tz`"),
        ];
        for (body, expected) in cases {
            let error = parse(&body).unwrap_err().to_string();
            assert!(error.contains(expected), "{body}: {error}");
        }
    }

    #[test]
    fn ids_are_bounded_and_plain() {
        check_id("alice").unwrap();
        check_id("user:42@team-a.b_c").unwrap();
        assert!(check_id("").is_err());
        assert!(check_id("a b").is_err());
        assert!(check_id("a/b").is_err());
        assert!(check_id(&"x".repeat(129)).is_err());
    }

    #[test]
    fn to_names_one_id_or_a_list() {
        assert_eq!(ids_of(&json!("alice")), Some(vec!["alice"]));
        assert_eq!(ids_of(&json!(["a", "b"])), Some(vec!["a", "b"]));
        assert_eq!(ids_of(&json!(["a", 1])), None);
        assert_eq!(ids_of(&json!(3)), None);
    }

    #[test]
    fn channel_names_round_trip() {
        for name in ChannelType::names() {
            let kind: ChannelType = name.parse().unwrap();
            assert_eq!(kind.as_str(), name);
        }
    }
}
