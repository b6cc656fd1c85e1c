//! The development channels: `stdout` (a line on the worker's standard output) and `file` (the payload as a
//! JSON line appended to the worker's notification file, `CAIRN_NOTIFY_FILE`). A recipient may bind them too
//! (`{"stdout": {}}`, `{"file": {}}`: they take no settings), and they then deliver the same way.

use std::path::Path;

use cairn_core::failure::codes;
use tokio::io::AsyncWriteExt;

use super::{ChannelError, ErrorKind, Message, Sent};

/// Prints `[notify] title: text` (or `[notify] text`), prefixed with the recipient when there is one.
pub(crate) fn print(message: &Message<'_>) -> Sent {
    let to = if message.recipient_id.is_empty() { String::new() } else { format!(" @{}", message.recipient_id) };
    match message.title {
        Some(title) => println!("[notify{to}] {title}: {}", message.text),
        None => println!("[notify{to}] {}", message.text),
    }
    Sent::default()
}

/// Appends the payload to `path` as one JSON line (parent directories are created).
pub(crate) async fn append(path: &Path, message: &Message<'_>) -> Result<Sent, ChannelError> {
    let failed = |e: std::io::Error| {
        let message = format!("file: cannot append to {}: {e}", path.display());
        ChannelError::answered(ErrorKind::Transient, codes::ACTION_ERROR, message).nothing_sent()
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await.map_err(failed)?;
    }
    let mut line = message.payload.to_string();
    line.push('\n');
    // One write of the whole line to an `O_APPEND` file: concurrent workers do not interleave lines.
    let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await.map_err(failed)?;
    file.write_all(line.as_bytes()).await.map_err(failed)?;
    file.flush().await.map_err(failed)?;
    Ok(Sent::default())
}
