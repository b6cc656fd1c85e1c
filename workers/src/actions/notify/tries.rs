//! The tries of one channel within one attempt: before try `i` it waits `delays[i]` (a rate-limited try makes
//! the next wait at least the provider's `Retry-After`), and it stops at the first delivery, at a permanent
//! error, when the delays run out, or when the next try would not start before the attempt's deadline.
//! Cancellation and the deadline cut a wait or a try short and end the whole attempt (`Err`).

use std::time::Duration;

use cairn_core::failure::codes;

use super::channel::{ChannelError, Channels, ErrorKind, Message, Route, Sent};
use crate::action::ActionError;
use crate::actions::{cancelled, transport};
use crate::context::ActionContext;

/// How a channel ended in this attempt.
#[derive(Debug)]
pub struct Tried {
    /// Sends made (every try counts, a rate-limited one too).
    pub tries: u32,
    /// The delivery, or the channel's failure over all its tries.
    pub result: Result<Sent, ChannelError>,
    /// Why the last failed try failed, also when a later one delivered: the ledger keeps it, so "delivered on
    /// the second try" can say why the first did not.
    pub last_error: Option<String>,
}

/// What earlier failed tries leave behind for the channel's failure.
#[derive(Debug, Default)]
struct Earlier {
    /// The code of a try the provider may have received: the channel stays ambiguous whatever follows.
    ambiguous_code: Option<String>,
    /// Some try may have reached the provider.
    reached: bool,
}

impl Earlier {
    /// `error` as the channel's failure so far.
    fn fold(&mut self, mut error: ChannelError) -> ChannelError {
        if error.ambiguous && self.ambiguous_code.is_none() {
            self.ambiguous_code = Some(error.code.clone());
        }
        self.reached |= !error.nothing_sent;
        if let Some(code) = self.ambiguous_code.as_ref().filter(|_| !error.ambiguous) {
            error.message.push_str(" (an earlier try may have been received)");
            error.code.clone_from(code);
            error.ambiguous = true;
        }
        error.nothing_sent = !self.reached;
        error
    }
}

/// Tries `message` on `route` over `delays` (at least one entry).
///
/// # Errors
/// `cancelled` when the attempt is cancelled, `timeout` when its deadline passes during a try.
pub async fn deliver(
    channels: &Channels,
    route: &Route,
    message: &Message<'_>,
    delays: &[Duration],
    ctx: &ActionContext,
) -> Result<Tried, ActionError> {
    let mut earlier = Earlier::default();
    let mut wait = delays.first().copied().unwrap_or_default();
    let mut tries: u32 = 0;
    let mut last_error = None;
    loop {
        pause(ctx, wait).await?;
        tries += 1;
        let timeout = channels.try_timeout().min(ctx.remaining());
        let error = match transport::race(ctx, channels.send(route, message, timeout)).await? {
            Ok(sent) => return Ok(Tried { tries, result: Ok(sent), last_error }),
            Err(error) => earlier.fold(error),
        };
        last_error = Some(error.message.clone());
        let next = delays.get(usize::try_from(tries).unwrap_or(usize::MAX)).copied();
        match next_wait(error.kind, next) {
            // A try that could not start before the deadline would only turn a known failure into a timeout.
            Some(next) if next < ctx.remaining() => wait = next,
            _ => return Ok(Tried { tries, result: Err(error), last_error }),
        }
    }
}

/// The wait before the next try after a failure of `kind`, when `next_delay` is the next entry of the delays;
/// `None` when the channel is done trying.
fn next_wait(kind: ErrorKind, next_delay: Option<Duration>) -> Option<Duration> {
    match (kind, next_delay) {
        (ErrorKind::Permanent, _) | (_, None) => None,
        (ErrorKind::RateLimited { retry_after }, Some(delay)) => Some(delay.max(retry_after.unwrap_or_default())),
        (ErrorKind::Transient, Some(delay)) => Some(delay),
    }
}

/// Waits `wait`, or until the attempt is cancelled.
async fn pause(ctx: &ActionContext, wait: Duration) -> Result<(), ActionError> {
    if wait.is_zero() {
        return Ok(());
    }
    tokio::select! {
        biased;
        () = ctx.cancelled() => Err(cancelled()),
        () = tokio::time::sleep_until(ctx.deadline) => {
            Err(ActionError::retryable(codes::TIMEOUT, "the attempt's deadline passed between tries"))
        }
        () = tokio::time::sleep(wait) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(ambiguous: bool, nothing_sent: bool, code: &str) -> ChannelError {
        ChannelError { kind: ErrorKind::Transient, code: code.into(), message: "m".into(), ambiguous, nothing_sent }
    }

    #[test]
    fn a_rate_limit_waits_the_longer_of_the_next_delay_and_retry_after() {
        let ms = Duration::from_millis;
        let limited = |after: Option<u64>| ErrorKind::RateLimited { retry_after: after.map(Duration::from_secs) };
        assert_eq!(next_wait(limited(Some(5)), Some(ms(10))), Some(Duration::from_secs(5)));
        assert_eq!(next_wait(limited(Some(5)), Some(ms(20_000))), Some(ms(20_000)));
        assert_eq!(next_wait(limited(None), Some(ms(10))), Some(ms(10)), "without Retry-After the delay holds");
        assert_eq!(next_wait(limited(Some(5)), None), None, "the last try was the last");
        assert_eq!(next_wait(ErrorKind::Transient, Some(ms(10))), Some(ms(10)));
        assert_eq!(next_wait(ErrorKind::Permanent, Some(ms(10))), None, "a permanent error is not tried again");
    }

    #[test]
    fn an_ambiguous_try_keeps_the_channel_ambiguous_whatever_follows() {
        let mut earlier = Earlier::default();
        let first = earlier.fold(error(true, false, codes::TIMEOUT));
        assert!(first.ambiguous && !first.nothing_sent);
        let second = earlier.fold(error(false, true, codes::ACTION_ERROR));
        assert_eq!(second.code, codes::TIMEOUT, "the ambiguous code wins");
        assert!(second.ambiguous && !second.nothing_sent, "{second:?}");
    }

    #[test]
    fn a_channel_sent_nothing_only_when_no_try_reached_the_provider() {
        let mut earlier = Earlier::default();
        assert!(earlier.fold(error(false, true, codes::ACTION_ERROR)).nothing_sent);
        assert!(!earlier.fold(error(false, false, codes::ACTION_ERROR)).nothing_sent, "a 5xx answer reached it");
        assert!(!earlier.fold(error(false, true, codes::ACTION_ERROR)).nothing_sent, "and stays reached");
    }
}
