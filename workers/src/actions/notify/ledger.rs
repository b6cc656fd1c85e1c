//! The delivery ledger of `notify.send`: which channels already received the message of an idempotency key,
//! so a retry never sends twice to a channel that succeeded.
//!
//! One file per idempotency key under the ledger directory (`<percent-encoded key>.jsonl`), one JSON line per
//! delivered channel (`{"channel": "file", "at": "2027-03-15T08:00:00Z"}`), appended after the delivery
//! succeeded. Each line is one small append to an `O_APPEND` file, so concurrent writers do not interleave
//! lines in practice; unreadable lines are ignored. A crash between a delivery and its line means that channel
//! is sent again by the next attempt (at least once, never silently lost); receivers can de-duplicate with the
//! `Idempotency-Key` they are given.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// A ledger rooted at a directory (created on first write).
#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct Line {
    channel: String,
    at: String,
}

impl Ledger {
    /// A ledger in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The file holding `key`'s deliveries.
    pub fn path(&self, key: &str) -> PathBuf {
        let mut name = String::with_capacity(key.len() + 6);
        for byte in key.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
                name.push(char::from(byte));
            } else {
                name.push_str(&format!("%{byte:02X}"));
            }
        }
        name.push_str(".jsonl");
        self.dir.join(name)
    }

    /// Channels already delivered for `key` (empty when the key has no file yet).
    ///
    /// # Errors
    /// Any I/O error other than the file not existing.
    pub async fn delivered(&self, key: &str) -> std::io::Result<BTreeSet<String>> {
        let text = match tokio::fs::read_to_string(self.path(key)).await {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(e) => return Err(e),
        };
        Ok(text.lines().filter_map(|l| serde_json::from_str::<Line>(l).ok()).map(|l| l.channel).collect())
    }

    /// Records that `channel` received `key`'s message.
    ///
    /// # Errors
    /// I/O errors creating the directory or appending.
    pub async fn record(&self, key: &str, channel: &str) -> std::io::Result<()> {
        tokio::fs::create_dir_all(&self.dir).await?;
        let line = Line { channel: channel.to_owned(), at: jiff::Timestamp::now().to_string() };
        let mut text = serde_json::to_string(&line).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(self.path(key)).await?;
        file.write_all(text.as_bytes()).await?;
        file.flush().await
    }
}
