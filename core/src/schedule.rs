//! Cron schedules: parsing, DST-correct fire times in an IANA zone, and the misfire decision (contract §10,
//! "Waiting"; cases C18, C20, C21). Pure: "now" is always passed in.
//!
//! How a fire time is found. `croner` parses the expression (5 fields, or 6 with leading seconds; `L`, `W`,
//! `#`, ranges and steps; day-of-month and day-of-week are OR-ed as in Vixie cron) and searches **wall-clock
//! (civil) time** only: it is handed a zone-less civil type, so it never sees an offset. Each matching civil
//! time is then mapped to one instant with jiff:
//! - a civil time that exists once maps to its instant;
//! - one repeated at a fall-back (fold) maps to its **first** occurrence (`30 1 * * *` on 2027-11-07 in New
//!   York fires at 05:30Z, never again at 06:30Z);
//! - one inside a spring-forward gap maps to the **transition instant**, the first valid instant after it
//!   (`30 2 * * *` on 2027-03-14 in New York fires at 07:00Z = 03:00 EDT). Several civil times in one gap map
//!   to the same instant and fire once.
//!
//! The mapping never decreases as civil time increases, so "the next fire time after `t`" is the first match
//! after `t`'s civil time whose instant is later than `t`. That instant is the tick's identity: computed once,
//! stored, and never recomputed from another offset.
//!
//! Day 29–31 and `L` follow the calendar (`0 9 31 * *` fires in the seven months with 31 days, `0 9 L 2 *` on
//! Feb 28 or 29). Every search is bounded: a match more than [`SEARCH_YEARS`] years ahead counts as none, which
//! still finds every Feb 29 (at most 8 years apart), and [`CronSchedule::new`] rejects an expression with no
//! fire time in that window as "never fires" (`0 9 30 2 *`) instead of accepting it or searching forever.

use std::collections::VecDeque;
use std::str::FromStr;

use croner::Cron;
use croner::errors::CronError;
use croner::time::{CivilDateTime, CronDateTime, Resolution, Weekday};
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::time_spec;

/// How far ahead a fire time is searched, in years. Eight years covers the longest gap between two Feb 29s
/// (2096 → 2104).
pub const SEARCH_YEARS: i16 = 8;

/// Most civil candidates examined for one fire time: bounds the walk through a repeated (fold) hour of an
/// every-second expression, so no search can spin.
const MAX_CANDIDATES: usize = 100_000;

/// Most due ticks examined in one misfire decision; past this only the most recent hour is looked at.
const MAX_DUE_SCAN: usize = 100_000;

/// Largest accepted `catch_up_max`.
pub const MAX_CATCH_UP: u32 = 100;

/// Why a schedule was refused. None is retryable: the expression or zone has to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("invalid cron expression `{expr}`: {reason}")]
    InvalidCron {
        /// The expression as given.
        expr: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The zone is not in the IANA database.
    #[error("unknown time zone `{name}`: use an IANA name such as `America/New_York` or `Asia/Shanghai`")]
    UnknownZone {
        /// The name as given.
        name: String,
    },
    /// The expression is well formed but matches no date within [`SEARCH_YEARS`] years (`0 9 30 2 *`).
    #[error("cron expression `{expr}` never fires: no matching date within {SEARCH_YEARS} years")]
    NeverFires {
        /// The expression as given.
        expr: String,
    },
    /// A policy value is out of range.
    #[error("{0}")]
    InvalidPolicy(String),
}

/// What to do when a tick comes while the schedule's previous run is still open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Do not start a run for this tick (recorded as `skipped_overlap`).
    #[default]
    Skip,
    /// Start the run anyway; runs of one schedule may overlap.
    Allow,
    /// Cancel the open runs of the schedule, then start the new one.
    CancelPrevious,
}

/// What to do with ticks missed while no orchestrator was ticking (a tick is missed when it is found more
/// than the misfire grace after its time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// One run, for the most recent missed tick.
    #[default]
    FireOnce,
    /// No run for missed ticks; the schedule continues with the next one.
    Skip,
    /// A run for each of the most recent missed ticks, at most `catch_up_max`, oldest first.
    CatchUp,
}

/// What became of one tick of a schedule (`schedule_ticks.outcome`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display, strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TickOutcome {
    /// A run was started.
    Started,
    /// No run: the previous one was still open and the overlap policy is `skip`.
    SkippedOverlap,
    /// No run: the plan could not become one at that instant (its detail says why).
    InvalidPlan,
}

impl TickOutcome {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

crate::state::compares_with_names!(TickOutcome);

impl Overlap {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Allow => "allow",
            Overlap::CancelPrevious => "cancel_previous",
        }
    }
}

impl Misfire {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::FireOnce => "fire_once",
            Misfire::Skip => "skip",
            Misfire::CatchUp => "catch_up",
        }
    }
}

impl FromStr for Overlap {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
            ScheduleError::InvalidPolicy(format!("unknown overlap `{s}`: expected skip, allow or cancel_previous"))
        })
    }
}

impl FromStr for Misfire {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
            ScheduleError::InvalidPolicy(format!("unknown misfire `{s}`: expected fire_once, skip or catch_up"))
        })
    }
}

/// A parsed cron expression bound to a time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    cron: Cron,
    zone: TimeZone,
    zone_name: String,
}

impl CronSchedule {
    /// Parses `expr` in the IANA zone `zone_name` and checks that it fires at least once within
    /// [`SEARCH_YEARS`] years after `from`.
    ///
    /// # Errors
    /// [`ScheduleError::InvalidCron`], [`ScheduleError::UnknownZone`], [`ScheduleError::NeverFires`].
    pub fn new(expr: &str, zone_name: &str, from: Timestamp) -> Result<Self, ScheduleError> {
        let schedule = Self::parse(expr, zone_name)?;
        if schedule.next_after(from).is_none() {
            return Err(ScheduleError::NeverFires { expr: expr.to_owned() });
        }
        Ok(schedule)
    }

    /// Parses without the "never fires" check (for schedules already stored).
    ///
    /// # Errors
    /// [`ScheduleError::InvalidCron`], [`ScheduleError::UnknownZone`].
    pub fn parse(expr: &str, zone_name: &str) -> Result<Self, ScheduleError> {
        let cron = Cron::from_str(expr.trim())
            .map_err(|e| ScheduleError::InvalidCron { expr: expr.to_owned(), reason: e.to_string() })?;
        let zone = time_spec::zone(zone_name).map_err(|_| ScheduleError::UnknownZone { name: zone_name.to_owned() })?;
        let zone_name = zone.iana_name().unwrap_or(zone_name).to_owned();
        Ok(Self { expr: expr.to_owned(), cron, zone, zone_name })
    }

    /// The expression as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The zone's IANA name.
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// The first fire instant strictly after `after`, or `None` when there is none within [`SEARCH_YEARS`]
    /// years. Deterministic: the same `after` always gives the same instant, whatever the current offset.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = self.zone.to_datetime(after);
        let limit = start.checked_add(jiff::Span::new().years(SEARCH_YEARS)).ok()?;
        let mut cursor = Wall(start);
        for _ in 0..MAX_CANDIDATES {
            let found = self.cron.find_next_occurrence(&cursor, false).ok()?;
            if found.0 > limit {
                return None;
            }
            let at = self.instant(found.0)?;
            if at > after {
                return Some(at);
            }
            cursor = found;
        }
        None
    }

    /// Up to `count` fire instants after `after`, in order.
    pub fn upcoming(&self, after: Timestamp, count: usize) -> Vec<Timestamp> {
        let mut out = Vec::with_capacity(count.min(1000));
        let mut at = after;
        while out.len() < count {
            match self.next_after(at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    /// `at` as local time in the schedule's zone, e.g. `2027-11-07T09:00:00-05:00[America/New_York]`.
    pub fn local(&self, at: Timestamp) -> String {
        at.to_zoned_datetime(self.zone.clone()).to_string()
    }

    /// The instant of a civil time in the schedule's zone: gap → transition, fold → first occurrence.
    fn instant(&self, civil: DateTime) -> Option<Timestamp> {
        time_spec::local_to_instant(&self.zone, civil).ok()
    }

    /// Decides what one tick pass does for a schedule whose next fire time `next_fire_at` is due at `now`:
    /// which nominal instants get a run, and the next fire time after the pass. A tick found within `grace`
    /// of its time is on time; older ones are missed and handled per `misfire` (at most `catch_up_max` for
    /// [`Misfire::CatchUp`]).
    pub fn due(&self, next_fire_at: Timestamp, now: Timestamp, policy: MisfirePolicy) -> DuePlan {
        let keep = match policy.misfire {
            Misfire::CatchUp => policy.catch_up_max.clamp(1, MAX_CATCH_UP) as usize,
            Misfire::FireOnce | Misfire::Skip => 1,
        };
        let mut last: VecDeque<Timestamp> = VecDeque::with_capacity(keep + 1);
        let mut due_count = 0usize;
        let mut at = Some(next_fire_at);
        let mut scanned = 0usize;
        while let Some(tick) = at.filter(|t| *t <= now) {
            due_count += 1;
            last.push_back(tick);
            if last.len() > keep {
                last.pop_front();
            }
            scanned += 1;
            at = if scanned == MAX_DUE_SCAN {
                // Skip far ahead: ticks older than an hour before now are missed anyway.
                let hour_ago = now.checked_sub(SignedDuration::from_hours(1)).unwrap_or(now);
                self.next_after(tick.max(hour_ago))
            } else {
                self.next_after(tick)
            };
        }
        let next_fire_at = match last.back() {
            Some(latest) => self.next_after(*latest.max(&now)),
            None => Some(next_fire_at),
        };
        let on_time = |t: &Timestamp| now.duration_since(*t) <= policy.grace;
        let fire: Vec<Timestamp> = if due_count == 1 && last.front().is_some_and(on_time) {
            last.into_iter().collect()
        } else {
            match policy.misfire {
                Misfire::FireOnce => last.back().copied().into_iter().collect(),
                Misfire::Skip => last.back().copied().filter(on_time).into_iter().collect(),
                Misfire::CatchUp => last.into_iter().collect(),
            }
        };
        DuePlan { missed: due_count.saturating_sub(fire.len()), fire, next_fire_at }
    }
}

/// The misfire settings a tick pass needs.
#[derive(Debug, Clone, Copy)]
pub struct MisfirePolicy {
    /// What to do with missed ticks.
    pub misfire: Misfire,
    /// Most runs started for missed ticks under [`Misfire::CatchUp`] (1 to [`MAX_CATCH_UP`]).
    pub catch_up_max: u32,
    /// A tick found at most this long after its time is on time, not missed.
    pub grace: SignedDuration,
}

/// The outcome of [`CronSchedule::due`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuePlan {
    /// Nominal instants that get a run, oldest first.
    pub fire: Vec<Timestamp>,
    /// Due ticks that get no run (missed and dropped by the policy).
    pub missed: usize,
    /// The next fire time after this pass (`None`: never again within the search window).
    pub next_fire_at: Option<Timestamp>,
}

/// A civil (wall-clock) date and time handed to croner: no zone, so no gaps or folds; the schedule maps the
/// result to an instant itself.
#[derive(Debug, Clone, Copy)]
struct Wall(DateTime);

impl CronDateTime for Wall {
    fn to_civil(&self) -> CivilDateTime {
        let d = self.0;
        // jiff's civil parts are always in range, so the conversion cannot fail.
        CivilDateTime::from_ymd_hms_opt(
            i32::from(d.year()),
            u32::try_from(d.month()).unwrap_or(1),
            u32::try_from(d.day()).unwrap_or(1),
            u32::try_from(d.hour()).unwrap_or(0),
            u32::try_from(d.minute()).unwrap_or(0),
            u32::try_from(d.second()).unwrap_or(0),
        )
        .unwrap_or_else(|| {
            CivilDateTime::new(
                croner::time::CivilDate::from_parts_unchecked(1970, 1, 1),
                croner::time::CivilTime::MIDNIGHT,
            )
        })
    }

    fn civil_weekday(&self) -> Weekday {
        Weekday::from_days_from_sunday(u32::try_from(self.0.weekday().to_sunday_zero_offset()).unwrap_or(0))
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        let dt = DateTime::new(
            i16::try_from(civil.year()).map_err(|_| CronError::InvalidDate)?,
            i8::try_from(civil.month()).map_err(|_| CronError::InvalidDate)?,
            i8::try_from(civil.day()).map_err(|_| CronError::InvalidDate)?,
            i8::try_from(civil.hour()).map_err(|_| CronError::InvalidTime)?,
            i8::try_from(civil.minute()).map_err(|_| CronError::InvalidTime)?,
            i8::try_from(civil.second()).map_err(|_| CronError::InvalidTime)?,
            0,
        )
        .map_err(|_| CronError::InvalidDate)?;
        Ok(Resolution::Single(Wall(dt)))
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0.checked_add(SignedDuration::from_secs(seconds)).ok().map(Wall)
    }

    fn cmp_instant(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn fires(expr: &str, zone: &str, from: &str, until: &str) -> Vec<String> {
        let s = CronSchedule::new(expr, zone, ts(from)).expect("valid");
        let until = ts(until);
        s.upcoming(ts(from), 1000).into_iter().filter(|t| *t <= until).map(|t| t.to_string()).collect()
    }

    #[test]
    fn fall_back_keeps_nine_local_and_a_repeated_time_fires_once_at_the_first_occurrence() {
        let daily = fires("0 9 * * *", "America/New_York", "2027-11-05T12:00:00Z", "2027-11-09T00:00:00Z");
        assert_eq!(
            daily,
            ["2027-11-05T13:00:00Z", "2027-11-06T13:00:00Z", "2027-11-07T14:00:00Z", "2027-11-08T14:00:00Z"]
        );
        let folded = fires("30 1 * * *", "America/New_York", "2027-11-06T12:00:00Z", "2027-11-08T00:00:00Z");
        assert_eq!(folded, ["2027-11-07T05:30:00Z"], "01:30 happens twice on 2027-11-07: fire at the first");
        let s = CronSchedule::parse("30 1 * * *", "America/New_York").expect("valid");
        assert_eq!(s.next_after(ts("2027-11-07T06:10:00Z")), Some(ts("2027-11-08T06:30:00Z")), "from the 2nd 01:10");
    }

    #[test]
    fn a_time_in_the_spring_forward_gap_fires_once_at_the_transition() {
        let got = fires("30 2 * * *", "America/New_York", "2027-03-12T12:00:00Z", "2027-03-16T00:00:00Z");
        assert_eq!(
            got,
            ["2027-03-13T07:30:00Z", "2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"],
            "02:30 does not exist on 2027-03-14: fire at 03:00 EDT"
        );
        let quarter = fires("*/15 2 * * *", "America/New_York", "2027-03-14T00:00:00Z", "2027-03-14T12:00:00Z");
        assert_eq!(quarter, ["2027-03-14T07:00:00Z"], "four civil times in the gap fire once");
    }

    #[test]
    fn leap_day_schedules_fire_every_four_years() {
        let s = CronSchedule::new("0 9 29 2 *", "Asia/Shanghai", ts("2027-03-01T00:00:00Z")).expect("valid");
        assert_eq!(s.next_after(ts("2027-03-01T00:00:00Z")), Some(ts("2028-02-29T01:00:00Z")));
        assert_eq!(s.next_after(ts("2028-02-29T01:00:00Z")), Some(ts("2032-02-29T01:00:00Z")));
        let s = CronSchedule::parse("0 9 29 2 *", "UTC").expect("valid");
        assert_eq!(s.next_after(ts("2096-03-01T00:00:00Z")), Some(ts("2104-02-29T09:00:00Z")), "2100 is no leap year");
    }

    #[test]
    fn a_date_that_never_exists_is_rejected_without_hanging() {
        let err = CronSchedule::new("0 9 30 2 *", "Asia/Shanghai", ts("2027-03-01T00:00:00Z")).expect_err("never");
        assert!(matches!(err, ScheduleError::NeverFires { .. }));
        assert!(err.to_string().contains("never fires"), "{err}");
    }

    #[test]
    fn day_31_and_last_day_follow_the_calendar() {
        let got = fires("0 9 31 * *", "UTC", "2027-01-01T00:00:00Z", "2027-12-31T23:59:59Z");
        let months: Vec<&str> = got.iter().map(|t| &t[5..7]).collect();
        assert_eq!(months, ["01", "03", "05", "07", "08", "10", "12"]);
        let got = fires("0 9 L * *", "UTC", "2028-01-01T00:00:00Z", "2028-12-31T23:59:59Z");
        assert_eq!(got.len(), 12);
        assert_eq!(got[1], "2028-02-29T09:00:00Z");
    }

    #[test]
    fn bad_expressions_and_zones_are_refused() {
        assert!(matches!(CronSchedule::parse("0 9 * *", "UTC"), Err(ScheduleError::InvalidCron { .. })));
        assert!(matches!(CronSchedule::parse("0 9 * * *", "Mars/Olympus"), Err(ScheduleError::UnknownZone { .. })));
    }

    fn hourly() -> CronSchedule {
        CronSchedule::parse("0 * * * *", "UTC").expect("valid")
    }

    fn policy(misfire: Misfire, catch_up_max: u32) -> MisfirePolicy {
        MisfirePolicy { misfire, catch_up_max, grace: SignedDuration::from_secs(60) }
    }

    #[test]
    fn an_on_time_tick_fires_whatever_the_policy() {
        for m in [Misfire::FireOnce, Misfire::Skip, Misfire::CatchUp] {
            let plan = hourly().due(ts("2027-01-01T11:00:00Z"), ts("2027-01-01T11:00:30Z"), policy(m, 2));
            assert_eq!(plan.fire, [ts("2027-01-01T11:00:00Z")]);
            assert_eq!(plan.next_fire_at, Some(ts("2027-01-01T12:00:00Z")));
        }
    }

    #[test]
    fn three_missed_ticks_follow_the_misfire_policy() {
        let (next, now) = (ts("2027-01-01T11:00:00Z"), ts("2027-01-01T13:30:00Z"));
        let once = hourly().due(next, now, policy(Misfire::FireOnce, 2));
        assert_eq!((once.fire, once.missed), (vec![ts("2027-01-01T13:00:00Z")], 2));
        let skip = hourly().due(next, now, policy(Misfire::Skip, 2));
        assert_eq!((skip.fire.len(), skip.missed), (0, 3));
        let catch_up = hourly().due(next, now, policy(Misfire::CatchUp, 2));
        assert_eq!(catch_up.fire, [ts("2027-01-01T12:00:00Z"), ts("2027-01-01T13:00:00Z")]);
        for plan in [skip, catch_up] {
            assert_eq!(plan.next_fire_at, Some(ts("2027-01-01T14:00:00Z")));
        }
    }

    #[test]
    fn nothing_due_changes_nothing() {
        let plan = hourly().due(ts("2027-01-01T11:00:00Z"), ts("2027-01-01T10:59:59Z"), policy(Misfire::FireOnce, 1));
        assert_eq!(plan, DuePlan { fire: vec![], missed: 0, next_fire_at: Some(ts("2027-01-01T11:00:00Z")) });
    }
}
