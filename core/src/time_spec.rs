//! `not_before` time specs: parsing and resolution to a UTC instant with a time zone (architecture §2, §7).
//!
//! Accepted forms ([`parse`]):
//! - an RFC 3339 instant with `Z` or an offset: `2027-03-15T00:00:00Z`, `2027-03-15T08:00:00+08:00`;
//! - a relative duration, `+` or `in` followed by `<n><unit>` groups: `+2h`, `+90m`, `in 1h30m`, `in 45s`,
//!   `in 2 hours`; units `s`/`sec`/`second(s)`, `m`/`min`/`minute(s)`, `h`/`hr`/`hour(s)`, `d`/`day(s)`;
//! - a local (civil) time `today HH:MM`, `tomorrow HH:MM`, `YYYY-MM-DD HH:MM` or `YYYY-MM-DDTHH:MM` (seconds
//!   `:SS` optional), optionally followed by a space and an IANA zone name that overrides the plan's zone.
//!
//! Resolution rules ([`resolve`], case C20):
//! - relative durations are **elapsed** time added to `now` (a day is 24 hours), never wall-clock arithmetic,
//!   so `in 2h` across a fall-back transition is still two real hours;
//! - `today` / `tomorrow` are judged in the target zone (the explicit one, else the plan's), never the host's;
//! - the UTC offset is the one in force at the target local time, not at `now`;
//! - a local time in a DST gap moves forward to the first valid instant (the transition itself: `02:30` on a
//!   spring-forward night in New York is `03:00` EDT); a repeated local time (fold) uses the earlier instant.
//!
//! Pure: `now` is always passed in; the host's clock and zone are never read.

use std::ops::RangeInclusive;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

const FORMS: &str = "expected an RFC 3339 instant (`2027-03-15T00:00:00Z`), a relative duration (`+2h`, \
                     `in 90m`, `in 1h30m`) or a local time (`today 08:00`, `tomorrow 08:00`, `2027-03-14 02:30`, \
                     `2027-03-14T02:30`) optionally followed by an IANA zone (`tomorrow 08:00 Asia/Shanghai`)";

/// A parsed `not_before` spec, not yet tied to a moment or a zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeSpec {
    /// An absolute instant (RFC 3339 with `Z` or an offset).
    Instant(Timestamp),
    /// Elapsed time after `now` (`+2h`, `in 90m`, `in 1h30m`); never negative.
    Relative(SignedDuration),
    /// A civil date and time read in a time zone.
    Local {
        /// Which civil date: relative to `now` in the target zone, or explicit.
        day: LocalDay,
        /// The wall-clock time on that date.
        time: Time,
        /// Explicit trailing IANA zone name as written (`Asia/Shanghai`), overriding the plan's zone. Only its
        /// shape is checked by [`parse`]; [`resolve`] (or [`zone`]) looks it up.
        zone: Option<String>,
    },
}

/// The civil date of a [`TimeSpec::Local`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalDay {
    /// The current date in the target zone at `now`.
    Today,
    /// The day after the current date in the target zone at `now`.
    Tomorrow,
    /// An explicit calendar date.
    Date(Date),
}

/// A spec resolved against `now` and a zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The UTC instant the timer fires at.
    pub at: Timestamp,
    /// For local specs, the original local time and zone as `YYYY-MM-DDTHH:MM[:SS] <zone>` (for example
    /// `2027-11-07T08:00 America/New_York`), kept for display and audit next to the instant; `None` otherwise.
    pub local: Option<String>,
}

/// Why a spec could not be parsed or resolved. None is retryable: the same spec, `now` and zone always give
/// the same error, so the spec (or the zone) has to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeSpecError {
    /// The text matches none of the accepted forms; `reason` says what went wrong and the message lists the forms.
    #[error("cannot read time spec `{spec}`: {reason}; {FORMS}")]
    Unparseable {
        /// The spec as given (truncated when very long).
        spec: String,
        /// The specific problem.
        reason: String,
    },
    /// The zone name is not in the IANA time zone database.
    #[error("unknown time zone `{name}`: use an IANA name such as `America/New_York` or `Asia/Shanghai`")]
    UnknownZone {
        /// The name as given.
        name: String,
    },
    /// The spec is well formed but names an impossible date or time, or its instant is outside the supported
    /// range (years −9999 to 9999).
    #[error("time spec out of range: {detail}")]
    OutOfRange {
        /// What overflowed or does not exist.
        detail: String,
    },
}

/// Looks up an IANA time zone by name (case-insensitive, e.g. `America/New_York`, `UTC`).
///
/// # Errors
/// [`TimeSpecError::UnknownZone`] naming the zone when the database does not have it.
pub fn zone(name: &str) -> Result<TimeZone, TimeSpecError> {
    TimeZone::get(name).map_err(|_| TimeSpecError::UnknownZone { name: name.to_owned() })
}

/// Parses a `not_before` spec in one of the forms listed in the [module docs](self). Surrounding whitespace is
/// ignored; keywords (`in`, `today`, `tomorrow`) and units are case-insensitive.
///
/// # Errors
/// [`TimeSpecError::Unparseable`] for text in none of the forms, [`TimeSpecError::OutOfRange`] for an impossible
/// date or time (`2027-02-30`, `25:00`) or a duration that overflows. Never panics.
pub fn parse(spec: &str) -> Result<TimeSpec, TimeSpecError> {
    let fail = |reason: &str| unparseable(spec, reason);
    let s = spec.trim();
    if s.is_empty() {
        return Err(fail("it is empty"));
    }
    if let Ok(at) = s.parse::<Timestamp>() {
        return Ok(TimeSpec::Instant(at));
    }
    let tokens: Vec<&str> = s.split_whitespace().collect();
    if let Some(rest) = s.strip_prefix('+') {
        return parse_duration(spec, rest).map(TimeSpec::Relative);
    }
    if tokens[0].eq_ignore_ascii_case("in") {
        return parse_duration(spec, &s[2..]).map(TimeSpec::Relative);
    }
    let (first, next, after) = (tokens[0], tokens.get(1).copied(), tokens.get(2..));
    let (day, time, rest) = if first.eq_ignore_ascii_case("today") {
        (LocalDay::Today, next, after)
    } else if first.eq_ignore_ascii_case("tomorrow") {
        (LocalDay::Tomorrow, next, after)
    } else if let Some((date, time)) = first.split_once(['T', 't']) {
        (LocalDay::Date(parse_date(spec, date)?), Some(time), tokens.get(1..))
    } else {
        (LocalDay::Date(parse_date(spec, first)?), next, after)
    };
    let time = parse_time(spec, time.ok_or_else(|| fail("a local time needs `HH:MM` after the day"))?)?;
    let zone = match rest.unwrap_or_default() {
        [] => None,
        [name] if is_zone_shaped(name) => Some((*name).to_owned()),
        [name] => return Err(fail(&format!("`{name}` is not a time zone name"))),
        _ => return Err(fail("unexpected text after the time zone")),
    };
    Ok(TimeSpec::Local { day, time, zone })
}

/// Resolves `spec` to a UTC instant: instants as is, relative specs as `now` + elapsed duration, local specs
/// in the spec's own zone or else `plan_zone` (the plan's `context.timezone`), with the DST rules in the
/// [module docs](self). The result may lie in the past (`today 08:00` at noon); callers decide what that means.
///
/// # Errors
/// [`TimeSpecError::UnknownZone`] for an explicit zone not in the database, [`TimeSpecError::OutOfRange`] when
/// the instant falls outside the supported range. Never panics.
pub fn resolve(spec: &TimeSpec, now: Timestamp, plan_zone: &TimeZone) -> Result<Resolved, TimeSpecError> {
    match spec {
        TimeSpec::Instant(at) => Ok(Resolved { at: *at, local: None }),
        TimeSpec::Relative(duration) => {
            let at = now
                .checked_add(*duration)
                .map_err(|_| out_of_range(format!("{now} plus {} seconds", duration.as_secs())))?;
            Ok(Resolved { at, local: None })
        }
        TimeSpec::Local { day, time, zone: name } => {
            let tz = match name {
                Some(name) => zone(name)?,
                None => plan_zone.clone(),
            };
            let today = tz.to_datetime(now).date();
            let date = match day {
                LocalDay::Today => today,
                LocalDay::Tomorrow => today.tomorrow().map_err(|_| out_of_range(format!("the day after {today}")))?,
                LocalDay::Date(date) => *date,
            };
            let at = local_to_instant(&tz, date.to_datetime(*time))?;
            let zone_name = match (tz.iana_name(), name) {
                (Some(iana), _) => iana.to_owned(),
                (None, Some(name)) => name.clone(),
                (None, None) => tz.to_offset(at).to_string(),
            };
            Ok(Resolved { at, local: Some(format!("{date}T{} {zone_name}", format_time(*time))) })
        }
    }
}

/// The instant of civil `dt` in `tz`: a gap moves forward to the transition that opened it (the first valid
/// instant after the missing local times), a fold takes the earlier of the two instants.
pub(crate) fn local_to_instant(tz: &TimeZone, dt: DateTime) -> Result<Timestamp, TimeSpecError> {
    let range = |_| out_of_range(format!("{dt} is outside the supported range"));
    match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).map_err(range),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(dt).map_err(range),
        AmbiguousOffset::Gap { before, after } => {
            // With the later offset, `dt` reads as an instant just before the transition; with the earlier
            // offset, as one at or after it. The transition in between is the first valid instant.
            let latest = before.to_timestamp(dt).map_err(range)?;
            let probe = after.to_timestamp(dt).map_err(range)?;
            let transition = tz.following(probe).next().map(|t| t.timestamp());
            Ok(transition.filter(|t| *t <= latest).unwrap_or(latest))
        }
    }
}

/// Parses `<n><unit>` groups (whitespace allowed between and inside groups) into elapsed seconds.
fn parse_duration(spec: &str, text: &str) -> Result<SignedDuration, TimeSpecError> {
    let mut rest = text.trim_start();
    if rest.is_empty() {
        return Err(unparseable(spec, "a duration needs at least one `<number><unit>` such as `90m`"));
    }
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(unparseable(spec, &format!("expected a number at `{rest}`")));
        }
        let overflow = || out_of_range(format!("the duration in `{spec}` is too long"));
        let amount: i64 = rest[..digits_end].parse().map_err(|_| overflow())?;
        rest = rest[digits_end..].trim_start();
        let unit_end = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        let seconds_per_unit = match unit.to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "d" | "day" | "days" => 86_400,
            "" => return Err(unparseable(spec, "a number needs a unit (s, m, h or d)")),
            other => {
                return Err(unparseable(spec, &format!("unknown unit `{other}` (use s, m, h or d)")));
            }
        };
        let seconds = amount.checked_mul(seconds_per_unit).ok_or_else(overflow)?;
        total = total.checked_add(seconds).ok_or_else(overflow)?;
        rest = rest[unit_end..].trim_start();
    }
    Ok(SignedDuration::from_secs(total))
}

/// `YYYY-MM-DD`, exactly.
fn parse_date(spec: &str, text: &str) -> Result<Date, TimeSpecError> {
    let [y, m, d] = numbers(text, '-', [4..=4, 2..=2, 2..=2])
        .ok_or_else(|| unparseable(spec, &format!("`{text}` is not a date like YYYY-MM-DD")))?;
    Date::new(y, m as i8, d as i8).map_err(|_| out_of_range(format!("there is no date {text}")))
}

/// `H:MM`, `HH:MM` or `HH:MM:SS` (24-hour clock).
fn parse_time(spec: &str, text: &str) -> Result<Time, TimeSpecError> {
    let [h, m, s] = numbers(text, ':', [1..=2, 2..=2, 2..=2])
        .or_else(|| numbers(text, ':', [1..=2, 2..=2]).map(|[h, m]| [h, m, 0]))
        .ok_or_else(|| unparseable(spec, &format!("`{text}` is not a time like HH:MM")))?;
    Time::new(h as i8, m as i8, s as i8, 0).map_err(|_| out_of_range(format!("there is no time {text}")))
}

/// `text` split on `sep` into exactly `N` runs of ASCII digits, each as long as its `widths` entry allows
/// (at most 4 digits, so every run fits an `i16`).
fn numbers<const N: usize>(text: &str, sep: char, widths: [RangeInclusive<usize>; N]) -> Option<[i16; N]> {
    let mut out = [0; N];
    let mut parts = text.split(sep);
    for (slot, width) in out.iter_mut().zip(widths) {
        let part = parts.next()?;
        if !width.contains(&part.len()) || part.len() > 4 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Whether `name` could be an IANA zone name (`Area/Location`, `UTC`, `Etc/GMT+5`); the database decides.
fn is_zone_shaped(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+'))
}

fn format_time(time: Time) -> String {
    match time.second() {
        0 => format!("{:02}:{:02}", time.hour(), time.minute()),
        s => format!("{:02}:{:02}:{s:02}", time.hour(), time.minute()),
    }
}

fn unparseable(spec: &str, reason: &str) -> TimeSpecError {
    let spec = match spec.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &spec[..cut]),
        None => spec.to_owned(),
    };
    TimeSpecError::Unparseable { spec, reason: reason.to_owned() }
}

fn out_of_range(detail: String) -> TimeSpecError {
    TimeSpecError::OutOfRange { detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn resolved(spec: &str, now: &str, plan_zone: &str) -> Result<Resolved, TimeSpecError> {
        let now = now.parse().map_err(|_| out_of_range(now.to_owned()))?;
        resolve(&parse(spec)?, now, &zone(plan_zone)?)
    }

    /// Checks a table of `spec | now | plan zone | expected instant | expected local (optional)` rows.
    fn check(table: &str) {
        for row in table.lines().filter(|line| !line.trim().is_empty()) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let got = resolved(cells[0], cells[1], cells[2]).expect(row);
            assert_eq!(got.at.to_string(), cells[3], "{row}");
            assert_eq!(got.local.as_deref(), cells.get(4).copied(), "{row}");
        }
    }

    #[test]
    fn c20_tomorrow_uses_the_offset_in_force_at_the_target_time() {
        check(
            "tomorrow 08:00 | 2027-11-06T14:00Z | America/New_York | 2027-11-07T13:00:00Z | 2027-11-07T08:00 America/New_York
             tomorrow 08:00 | 2027-03-13T15:00Z | America/New_York | 2027-03-14T12:00:00Z | 2027-03-14T08:00 America/New_York
             tomorrow 08:00 America/New_York | 2027-11-06T14:00Z | UTC | 2027-11-07T13:00:00Z | 2027-11-07T08:00 America/New_York",
        );
    }

    #[test]
    fn c20_relative_durations_are_elapsed_time_across_a_fall_back() {
        check(
            "in 2h  | 2027-11-07T04:30Z | America/New_York | 2027-11-07T06:30:00Z
             +120m  | 2027-11-07T04:30Z | America/New_York | 2027-11-07T06:30:00Z",
        );
    }

    #[test]
    fn c20_tomorrow_is_judged_in_the_explicit_zone_not_the_plan_zone() {
        check(
            "tomorrow 08:00 Asia/Shanghai | 2027-03-14T02:00Z | America/New_York | 2027-03-15T00:00:00Z | 2027-03-15T08:00 Asia/Shanghai
             today 08:00 | 2027-03-14T02:00Z | Asia/Shanghai | 2027-03-14T00:00:00Z | 2027-03-14T08:00 Asia/Shanghai",
        );
    }

    #[test]
    fn dst_gaps_move_to_the_first_valid_instant_and_folds_use_the_earlier_one() {
        check(
            "2027-03-14 02:30 | 2027-01-01T00:00Z | America/New_York | 2027-03-14T07:00:00Z | 2027-03-14T02:30 America/New_York
             2027-03-14T02:00 | 2027-01-01T00:00Z | America/New_York | 2027-03-14T07:00:00Z | 2027-03-14T02:00 America/New_York
             2027-03-14 03:00 | 2027-01-01T00:00Z | America/New_York | 2027-03-14T07:00:00Z | 2027-03-14T03:00 America/New_York
             2027-11-07 01:30 | 2027-01-01T00:00Z | America/New_York | 2027-11-07T05:30:00Z | 2027-11-07T01:30 America/New_York
             2011-12-30 12:00 Pacific/Apia | 2011-01-01T00:00Z | UTC | 2011-12-30T10:00:00Z | 2011-12-30T12:00 Pacific/Apia
             2027-10-03 02:15 | 2027-01-01T00:00Z | Australia/Lord_Howe | 2027-10-02T15:30:00Z | 2027-10-03T02:15 Australia/Lord_Howe",
        );
    }

    #[test]
    fn explicit_dates_instants_and_durations_resolve_as_documented() {
        check(
            "2027-03-15T08:00 Asia/Shanghai | 2027-01-01T00:00Z | UTC | 2027-03-15T00:00:00Z | 2027-03-15T08:00 Asia/Shanghai
             2027-03-15T00:00:00Z           | 2027-01-01T00:00Z | Asia/Shanghai | 2027-03-15T00:00:00Z
             2027-03-15T08:00:00+08:00      | 2027-01-01T00:00Z | UTC | 2027-03-15T00:00:00Z
             TOMORROW 8:05:30               | 2027-01-01T00:00Z | UTC | 2027-01-02T08:05:30Z | 2027-01-02T08:05:30 UTC
             in 1h30m                       | 2027-01-01T00:00Z | UTC | 2027-01-01T01:30:00Z
             in 2 hours 15 minutes          | 2027-01-01T00:00Z | UTC | 2027-01-01T02:15:00Z
             +90 MIN                        | 2027-01-01T00:00Z | UTC | 2027-01-01T01:30:00Z
             in 1d                          | 2027-01-01T00:00Z | UTC | 2027-01-02T00:00:00Z
             in 45s                         | 2027-01-01T00:00Z | UTC | 2027-01-01T00:00:45Z",
        );
        assert_eq!(parse(" in 90m "), Ok(TimeSpec::Relative(SignedDuration::from_mins(90))));
    }

    #[test]
    fn unknown_zones_are_errors_that_name_the_zone() {
        let err = resolved("tomorrow 08:00 Mars/Olympus", "2027-01-01T00:00Z", "UTC");
        let expected = TimeSpecError::UnknownZone { name: "Mars/Olympus".to_owned() };
        assert_eq!(err, Err(expected.clone()));
        assert_eq!(zone("Mars/Olympus").err(), Some(expected));
        assert!(zone("Mars/Olympus").is_err_and(|e| e.to_string().contains("Mars/Olympus")));
    }

    #[test]
    fn garbage_is_rejected_with_the_accepted_forms() {
        let garbage = "|soon|tomorrow|in|in 5|+2 fortnights|2027-3-15 08:00|08:00|today 8am|in -2h\
                       |tomorrow 08:00 UTC extra|tomorrow 08:00 +08:00|2027-03-15T08:00:00.5";
        for spec in garbage.split('|') {
            let err = parse(spec).expect_err(spec);
            assert!(matches!(err, TimeSpecError::Unparseable { .. }), "{spec}: {err:?}");
            assert!(err.to_string().contains("tomorrow 08:00"), "{err}");
        }
    }

    #[test]
    fn impossible_dates_and_overflowing_instants_are_out_of_range() {
        let impossible = "2027-02-30 08:00|today 25:00|today 08:61|in 99999999999999999999h|+9999999999999999d";
        for spec in impossible.split('|') {
            assert!(matches!(parse(spec), Err(TimeSpecError::OutOfRange { .. })), "{spec}");
        }
        for spec in ["in 9000000d", "tomorrow 00:00"] {
            let err = parse(spec).and_then(|p| resolve(&p, Timestamp::MAX, &TimeZone::UTC));
            assert!(matches!(err, Err(TimeSpecError::OutOfRange { .. })), "{spec}: {err:?}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_or_spec_shaped_text_never_panics(
            text in any::<String>(),
            shaped in "(today|tomorrow|in|\\+|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ])?[0-9:]{0,8}[hmsd ]{0,2}( [A-Za-z_/]{1,12})?",
            secs in -377_705_116_800i64..=253_402_207_200,
        ) {
            let now = Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH);
            let plan_zone = zone("America/New_York").unwrap_or(TimeZone::UTC);
            for spec in [text, shaped] {
                let _ = parse(&spec).and_then(|parsed| resolve(&parsed, now, &plan_zone));
            }
        }
    }
}
