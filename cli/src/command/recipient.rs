//! `cairn recipient set|show|list|delete`: the people and places reminders go to, over the REST API.
//!
//! `cairn recipient set alice --channel telegram:chat_id=42 --channel email:address=a@example.com --timezone
//! Asia/Shanghai` creates or replaces `alice` with those channels. A channel is `TYPE` or `TYPE:KEY=VALUE,…`;
//! a comma starts a new setting only when a `KEY=` follows it, so URLs keep theirs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::runs::Target;
use crate::settings::Settings;

/// `cairn recipient` subcommands.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Create or replace a recipient with its bound channels.
    Set(SetArgs),
    /// Show a recipient (secrets redacted).
    Show(One),
    /// List recipients.
    List(Only),
    /// Delete a recipient (the delivery ledger keeps its records).
    Delete(One),
}

/// Flags of `cairn recipient set`.
#[derive(Debug, clap::Args)]
struct SetArgs {
    /// Recipient id (A-Z, a-z, 0-9, `_.:@-`).
    id: String,
    /// A bound channel: `telegram:chat_id=42`, `email:address=a@example.com`, `slack:webhook_url=…`,
    /// `feishu:webhook_url=…,secret=…`, `webhook:url=…,secret=…`, `ntfy:topic=…`, `stdout`, `file` (repeatable).
    #[arg(long = "channel", value_name = "TYPE[:KEY=VALUE,…]")]
    channels: Vec<String>,
    /// Preferred IANA time zone.
    #[arg(long, alias = "tz")]
    timezone: Option<String>,
    /// The whole recipient as a JSON or YAML file instead (`-` reads stdin): `{"channels": {…}, "timezone": "…"}`.
    #[arg(long, conflicts_with_all = ["channels", "timezone"])]
    file: Option<PathBuf>,
    #[command(flatten)]
    target: Target,
}

/// Flags naming nothing but the server.
#[derive(Debug, clap::Args)]
struct Only {
    #[command(flatten)]
    target: Target,
}

/// Flags naming one recipient.
#[derive(Debug, clap::Args)]
struct One {
    /// Recipient id.
    id: String,
    #[command(flatten)]
    target: Target,
}

/// Runs a `cairn recipient` subcommand.
pub async fn run(args: &Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    match &args.command {
        Command::Set(a) => set(a, settings).await,
        Command::Show(a) => {
            let r = a.target.client(settings)?.get(&format!("/v1/recipients/{}", a.id)).await?;
            if a.target.json {
                out!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print_recipient(&r);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List(a) => list(&a.target, settings).await,
        Command::Delete(a) => {
            let client = a.target.client(settings)?;
            let (status, body) = client.call(Method::DELETE, &format!("/v1/recipients/{}", a.id), None).await?;
            crate::client::ok(status, body)?;
            out!("recipient {} deleted", a.id);
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn set(a: &SetArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let body = match &a.file {
        Some(path) => super::runs::read_plan(path)?,
        None => from_flags(&a.channels, a.timezone.as_deref())?,
    };
    let client = a.target.client(settings)?;
    let (status, answer) = client.call(Method::PUT, &format!("/v1/recipients/{}", a.id), Some(&body)).await?;
    let created = status == reqwest::StatusCode::CREATED;
    let answer = crate::client::ok(status, answer)?;
    if a.target.json {
        out!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        out!("recipient {} {}", a.id, if created { "created" } else { "replaced" });
        print_recipient(&answer);
    }
    Ok(ExitCode::SUCCESS)
}

/// The recipient body `--channel` and `--timezone` describe.
fn from_flags(channels: &[String], timezone: Option<&str>) -> anyhow::Result<Value> {
    if channels.is_empty() {
        bail!("give at least one --channel (e.g. --channel telegram:chat_id=42), or --file");
    }
    let mut bound = Map::new();
    for flag in channels {
        let (kind, settings) = channel(flag)?;
        if bound.insert(kind.clone(), settings).is_some() {
            bail!("--channel {kind} is given twice");
        }
    }
    let mut body = json!({"channels": bound});
    if let Some(zone) = timezone {
        body["timezone"] = json!(zone);
    }
    Ok(body)
}

/// `TYPE` or `TYPE:KEY=VALUE,KEY=VALUE`.
fn channel(flag: &str) -> anyhow::Result<(String, Value)> {
    let (kind, rest) = flag.split_once(':').unwrap_or((flag, ""));
    let mut settings = Map::new();
    let mut pairs: Vec<String> = Vec::new();
    for part in rest.split(',').filter(|p| !p.is_empty()) {
        let starts_setting = part
            .split_once('=')
            .is_some_and(|(key, _)| !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        match pairs.last_mut() {
            Some(last) if !starts_setting => {
                last.push(',');
                last.push_str(part);
            }
            _ => pairs.push(part.to_owned()),
        }
    }
    for pair in pairs {
        let (key, value) =
            pair.split_once('=').with_context(|| format!("--channel {flag}: `{pair}` is not KEY=VALUE"))?;
        settings.insert(key.to_owned(), json!(value));
    }
    Ok((kind.to_owned(), Value::Object(settings)))
}

async fn list(target: &Target, settings: &Settings) -> anyhow::Result<ExitCode> {
    let client = target.client(settings)?;
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/v1/recipients?limit=500&after={a}"),
            None => "/v1/recipients?limit=500".to_owned(),
        };
        let page = client.get(&path).await?;
        all.extend(page["recipients"].as_array().cloned().unwrap_or_default());
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    if target.json {
        out!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    for r in &all {
        let channels: Vec<&str> = r["channels"].as_object().into_iter().flatten().map(|(k, _)| k.as_str()).collect();
        let zone = r["timezone"].as_str().unwrap_or("-");
        out!("{:<24} {:<20} {}", r["id"].as_str().unwrap_or("?"), zone, channels.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_recipient(r: &Value) {
    out!("{}  timezone {}", r["id"].as_str().unwrap_or("?"), r["timezone"].as_str().unwrap_or("-"));
    for (kind, settings) in r["channels"].as_object().into_iter().flatten() {
        let shown: Vec<String> = settings
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
            .collect();
        out!("  {kind:<10} {}", shown.join(" "));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_flag_reads_type_and_settings_keeping_commas_in_values() {
        let (kind, settings) = channel("webhook:url=https://x.test/a,b?c=1,secret=s3").unwrap();
        assert_eq!(kind, "webhook");
        assert_eq!(settings, json!({"url": "https://x.test/a,b?c=1", "secret": "s3"}));
        assert_eq!(channel("stdout").unwrap(), ("stdout".to_owned(), json!({})));
        assert!(channel("telegram:42").is_err(), "a setting needs KEY=VALUE");
    }

    #[test]
    fn flags_make_one_recipient_body() {
        let body = from_flags(&["telegram:chat_id=42".into(), "file".into()], Some("Asia/Shanghai")).unwrap();
        assert_eq!(body, json!({"channels": {"telegram": {"chat_id": "42"}, "file": {}}, "timezone": "Asia/Shanghai"}));
        assert!(from_flags(&["stdout".into(), "stdout".into()], None).is_err());
        assert!(from_flags(&[], None).is_err());
    }
}
