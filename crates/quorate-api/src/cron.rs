//! Five-field cron schedules (`minute hour day-of-month month day-of-week`, UTC), as used by
//! `fullSnapshotSchedule` and `defragmentationSchedule`, with the next fire time after a
//! given instant so the backup scheduler can sleep until then.
//!
//! Supported: numbers, `*` (and `?` in the day fields), ranges `a-b`, steps `*/n`, `a-b/n`
//! and `a/n` (= `a-max/n`), lists `a,b-c`, month names `JAN`-`DEC`, weekday names `SUN`-`SAT`
//! (`0` and `7` are Sunday), and the shorthands `@hourly`, `@daily`/`@midnight`, `@weekly`,
//! `@monthly`, `@yearly`/`@annually`. As in standard cron, when both day fields are
//! restricted a day matches if *either* matches; otherwise both must.

use std::fmt;

use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

/// Why a text is not a cron schedule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a cron schedule: {reason}; use 5 fields \"minute hour day-of-month month day-of-week\" such as \"0 */1 * * *\""
)]
pub struct CronError {
    /// The rejected text.
    pub input: String,
    /// What exactly is wrong.
    pub reason: String,
}

/// A parsed schedule. Fields are bit sets: bit `n` set means value `n` matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronSchedule {
    source: String,
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// Day-of-month field was `*`/`?` (unrestricted).
    dom_star: bool,
    /// Day-of-week field was `*`/`?` (unrestricted).
    dow_star: bool,
}

struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// Value of the first name (`JAN` is 1, `SUN` is 0).
    first_name_value: u32,
    allow_question: bool,
}

const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    first_name_value: 0,
    allow_question: false,
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    first_name_value: 0,
    allow_question: false,
};
const DAY_OF_MONTH: FieldSpec = FieldSpec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
    first_name_value: 0,
    allow_question: true,
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    // Index + 1 is the month number.
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    first_name_value: 1,
    allow_question: false,
};
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    max: 7,
    // Index is the weekday number (0 = Sunday).
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    first_name_value: 0,
    allow_question: true,
};

/// How far ahead `next_after` looks before concluding a schedule never fires (covers
/// `29 2` schedules across a skipped leap year such as 2100).
const SEARCH_YEARS: i16 = 9;

impl CronSchedule {
    /// Parses a 5-field cron expression or one of the `@` shorthands.
    pub fn parse(input: &str) -> Result<CronSchedule, CronError> {
        let err = |reason: String| CronError {
            input: input.to_string(),
            reason,
        };
        let trimmed = input.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(err(format!(
                    "unknown shorthand {trimmed:?} (known: @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually)"
                )));
            }
            _ => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(err(format!("expected 5 fields, found {}", fields.len())));
        }
        let (minutes, _) = parse_field(fields[0], &MINUTE).map_err(err)?;
        let (hours, _) = parse_field(fields[1], &HOUR).map_err(err)?;
        let (days_of_month, dom_star) = parse_field(fields[2], &DAY_OF_MONTH).map_err(err)?;
        let (months, _) = parse_field(fields[3], &MONTH).map_err(err)?;
        let (mut days_of_week, dow_star) = parse_field(fields[4], &DAY_OF_WEEK).map_err(err)?;
        // 7 is another name for Sunday.
        if days_of_week & (1 << 7) != 0 {
            days_of_week = (days_of_week & !(1 << 7)) | 1;
        }
        Ok(CronSchedule {
            source: input.to_string(),
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
            dom_star,
            dow_star,
        })
    }

    /// The text this schedule was parsed from.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the schedule fires at the minute containing `at` (UTC).
    pub fn matches(&self, at: Timestamp) -> bool {
        let dt = at.to_zoned(TimeZone::UTC).datetime();
        self.months & bit(dt.month()) != 0
            && self.day_matches(dt.date())
            && self.hours & bit(dt.hour()) != 0
            && self.minutes & bit(dt.minute()) != 0
    }

    /// The first fire time strictly after `after` (UTC, whole minutes), or `None` if the
    /// schedule never fires (such as `0 0 31 2 *`).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = after.to_zoned(TimeZone::UTC).datetime();
        let mut year = start.year();
        let mut month = start.month();
        let mut day = start.day();
        let mut hour = start.hour();
        // Strictly after: the next whole minute.
        let mut minute = start.minute() + 1;
        let last_year = year.saturating_add(SEARCH_YEARS);

        loop {
            // Normalise carries.
            if minute > 59 {
                minute = 0;
                hour += 1;
            }
            if hour > 23 {
                hour = 0;
                day += 1;
            }
            if day > days_in_month(year, month) {
                day = 1;
                month += 1;
            }
            if month > 12 {
                month = 1;
                year = year.checked_add(1)?;
            }
            if year > last_year || year > 9998 {
                return None;
            }

            if self.months & bit(month) == 0 {
                month += 1;
                day = 1;
                hour = 0;
                minute = 0;
                continue;
            }
            let date = Date::new(year, month, day).ok()?;
            if !self.day_matches(date) {
                day += 1;
                hour = 0;
                minute = 0;
                continue;
            }
            if self.hours & bit(hour) == 0 {
                hour += 1;
                minute = 0;
                continue;
            }
            if self.minutes & bit(minute) == 0 {
                minute += 1;
                continue;
            }
            let dt = DateTime::new(year, month, day, hour, minute, 0, 0).ok()?;
            return dt.to_zoned(TimeZone::UTC).ok().map(|z| z.timestamp());
        }
    }

    fn day_matches(&self, date: Date) -> bool {
        let dom = self.days_of_month & bit(date.day()) != 0;
        let weekday = date.weekday().to_sunday_zero_offset();
        let dow = self.days_of_week & bit(weekday) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for CronSchedule {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronSchedule::parse(s)
    }
}

fn bit<T: Into<i32>>(value: T) -> u64 {
    let v: i32 = value.into();
    if (0..64).contains(&v) { 1u64 << v } else { 0 }
}

fn days_in_month(year: i16, month: i8) -> i8 {
    Date::new(year, month, 1)
        .map(|d| d.days_in_month())
        .unwrap_or(31)
}

/// Parses one field into a bit set, and whether it is unrestricted (`*`/`?` with step 1).
fn parse_field(text: &str, spec: &FieldSpec) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!(
                "{} field {text:?} has an empty list item",
                spec.name
            ));
        }
        let (range_part, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().map_err(|_| {
                    if !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit()) {
                        format!("{} field: step {step} is too large", spec.name)
                    } else {
                        format!("{} field: step {step:?} is not a number", spec.name)
                    }
                })?;
                if step == 0 {
                    return Err(format!("{} field: step must be at least 1", spec.name));
                }
                (range, Some(step))
            }
            None => (item, None),
        };
        let (start, end) = if range_part == "*" || (spec.allow_question && range_part == "?") {
            if step.unwrap_or(1) == 1 {
                star = true;
            }
            (spec.min, spec.max)
        } else if let Some((a, b)) = range_part.split_once('-') {
            (parse_value(a, spec)?, parse_value(b, spec)?)
        } else {
            let start = parse_value(range_part, spec)?;
            // "a/n" means "a-max/n".
            (start, if step.is_some() { spec.max } else { start })
        };
        if start > end {
            return Err(format!(
                "{} field: range {range_part:?} runs backwards",
                spec.name
            ));
        }
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1u64 << v;
            // A step beyond the range ends it (and must not wrap around).
            let Some(next) = v.checked_add(step) else {
                break;
            };
            v = next;
        }
    }
    Ok((bits, star))
}

fn parse_value(text: &str, spec: &FieldSpec) -> Result<u32, String> {
    if let Some(index) = spec.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(index as u32 + spec.first_name_value);
    }
    let value: u32 = text.parse().map_err(|_| {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            format!(
                "{} field: {text} is out of range {}-{}",
                spec.name, spec.min, spec.max
            )
        } else if spec.names.is_empty() {
            format!("{} field: {text:?} is not a number", spec.name)
        } else {
            format!(
                "{} field: {text:?} is neither a number nor a name ({})",
                spec.name,
                spec.names.join(", ")
            )
        }
    })?;
    if value < spec.min || value > spec.max {
        return Err(format!(
            "{} field: {value} is out of range {}-{}",
            spec.name, spec.min, spec.max
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(expr: &str, after: &str) -> Option<String> {
        CronSchedule::parse(expr)
            .unwrap()
            .next_after(ts(after))
            .map(|t| t.to_string())
    }

    #[test]
    fn hourly_full_snapshot_default() {
        assert_eq!(
            next("0 */1 * * *", "2024-03-10T10:15:30Z").as_deref(),
            Some("2024-03-10T11:00:00Z")
        );
        // Exactly on a fire time: the next one, not the same.
        assert_eq!(
            next("0 */1 * * *", "2024-03-10T11:00:00Z").as_deref(),
            Some("2024-03-10T12:00:00Z")
        );
        assert_eq!(
            next("0 */1 * * *", "2024-12-31T23:30:00Z").as_deref(),
            Some("2025-01-01T00:00:00Z")
        );
    }

    #[test]
    fn defragmentation_default_every_third_day() {
        // Days 1, 4, ..., 31 of every month.
        assert_eq!(
            next("0 0 */3 * *", "2024-01-31T00:00:00Z").as_deref(),
            Some("2024-02-01T00:00:00Z")
        );
        assert_eq!(
            next("0 0 */3 * *", "2024-02-01T00:00:01Z").as_deref(),
            Some("2024-02-04T00:00:00Z")
        );
        // February 2023 has no 31st: after the 28th comes March 1st.
        assert_eq!(
            next("0 0 */3 * *", "2023-02-26T00:00:00Z").as_deref(),
            Some("2023-02-28T00:00:00Z")
        );
        assert_eq!(
            next("0 0 */3 * *", "2023-02-28T00:00:00Z").as_deref(),
            Some("2023-03-01T00:00:00Z")
        );
    }

    #[test]
    fn weekday_names_and_ranges() {
        // 2024-02-28 is a Wednesday.
        assert_eq!(
            next("30 2 * * MON", "2024-02-28T12:00:00Z").as_deref(),
            Some("2024-03-04T02:30:00Z")
        );
        assert_eq!(
            next("*/15 9-17 * * mon-fri", "2024-03-08T17:50:00Z").as_deref(),
            Some("2024-03-11T09:00:00Z")
        );
        assert_eq!(
            next("0 0 * * 7", "2024-03-08T00:00:00Z").as_deref(),
            Some("2024-03-10T00:00:00Z")
        );
        assert_eq!(
            next("0 6 * JUN,dec *", "2024-07-01T00:00:00Z").as_deref(),
            Some("2024-12-01T06:00:00Z")
        );
    }

    #[test]
    fn both_day_fields_restricted_means_either() {
        // 2024-06-02 is a Sunday: next Sunday (June 9) comes before July 1.
        assert_eq!(
            next("0 12 1 * 0", "2024-06-02T13:00:00Z").as_deref(),
            Some("2024-06-09T12:00:00Z")
        );
        // With the weekday unrestricted only the 1st matches.
        assert_eq!(
            next("0 12 1 * *", "2024-06-02T13:00:00Z").as_deref(),
            Some("2024-07-01T12:00:00Z")
        );
    }

    #[test]
    fn leap_day_and_impossible_dates() {
        assert_eq!(
            next("0 0 29 2 *", "2024-03-01T00:00:00Z").as_deref(),
            Some("2028-02-29T00:00:00Z")
        );
        // 2100 is not a leap year.
        assert_eq!(
            next("0 0 29 2 *", "2096-03-01T00:00:00Z").as_deref(),
            Some("2104-02-29T00:00:00Z")
        );
        assert_eq!(next("0 0 31 2 *", "2024-01-01T00:00:00Z"), None);
        assert_eq!(next("0 0 31 4,6,9,11 *", "2024-01-01T00:00:00Z"), None);
    }

    #[test]
    fn shorthands_lists_and_single_value_steps() {
        assert_eq!(
            next("@daily", "2024-03-10T10:15:00Z").as_deref(),
            Some("2024-03-11T00:00:00Z")
        );
        assert_eq!(
            next("@hourly", "2024-03-10T10:15:00Z").as_deref(),
            Some("2024-03-10T11:00:00Z")
        );
        assert_eq!(
            next("5,10-12,50/5 * * * *", "2024-03-10T10:12:00Z").as_deref(),
            Some("2024-03-10T10:50:00Z")
        );
        assert_eq!(
            next("5,10-12,50/5 * * * *", "2024-03-10T10:55:00Z").as_deref(),
            Some("2024-03-10T11:05:00Z")
        );
    }

    #[test]
    fn rejects_bad_expressions_with_a_reason() {
        let cases = [
            ("", "expected 5 fields, found 0"),
            ("0 * * *", "expected 5 fields, found 4"),
            ("0 * * * * *", "expected 5 fields, found 6"),
            ("60 * * * *", "minute field: 60 is out of range 0-59"),
            ("0 24 * * *", "hour field: 24 is out of range 0-23"),
            ("0 0 0 * *", "day-of-month field: 0 is out of range 1-31"),
            ("0 0 * 13 *", "month field: 13 is out of range 1-12"),
            ("0 0 * * 8", "day-of-week field: 8 is out of range 0-7"),
            ("*/0 * * * *", "minute field: step must be at least 1"),
            (
                "10-5 * * * *",
                "minute field: range \"10-5\" runs backwards",
            ),
            ("a * * * *", "minute field: \"a\" is not a number"),
            (
                "1,,2 * * * *",
                "minute field \"1,,2\" has an empty list item",
            ),
            ("? * * * *", "minute field: \"?\" is not a number"),
            ("@every 5m", "unknown shorthand \"@every 5m\""),
        ];
        for (expr, reason) in cases {
            let err = CronSchedule::parse(expr).unwrap_err();
            assert!(
                err.reason.starts_with(reason),
                "{expr:?}: got {:?}",
                err.reason
            );
        }
        let msg = CronSchedule::parse("every hour").unwrap_err().to_string();
        assert!(
            msg.starts_with("\"every hour\" is not a cron schedule: expected 5 fields"),
            "{msg}"
        );
        assert!(msg.ends_with("such as \"0 */1 * * *\""), "{msg}");
    }

    #[test]
    fn question_mark_in_day_fields_means_any() {
        let s = CronSchedule::parse("0 0 ? * ?").unwrap();
        assert!(s.matches(ts("2024-05-05T00:00:30Z")));
        assert!(!s.matches(ts("2024-05-05T00:01:00Z")));
    }

    fn brute_force(s: &CronSchedule, after: Timestamp, horizon_minutes: i64) -> Option<Timestamp> {
        let start = after.as_second().div_euclid(60) * 60;
        (1..=horizon_minutes)
            .map(|i| Timestamp::from_second(start + i * 60).unwrap())
            .find(|t| s.matches(*t))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn next_after_agrees_with_brute_force(
            minute in proptest::sample::select(vec!["*", "0", "*/7", "5-20/5", "59", "1,30"]),
            hour in proptest::sample::select(vec!["*", "0", "*/5", "12-14", "23"]),
            dom in proptest::sample::select(vec!["*", "1", "*/3", "15-20", "31"]),
            dow in proptest::sample::select(vec!["*", "0", "1-5", "SAT"]),
            start_secs in 1_600_000_000i64..1_900_000_000i64,
        ) {
            let expr = format!("{minute} {hour} {dom} * {dow}");
            let s = CronSchedule::parse(&expr).unwrap();
            let after = Timestamp::from_second(start_secs).unwrap();
            // 40 days covers every combination above (the 31st recurs within 62 days, but
            // when it does not fall in the horizon, next_after must lie beyond it).
            let horizon = 40 * 24 * 60;
            let expected = brute_force(&s, after, horizon);
            let got = s.next_after(after);
            match expected {
                Some(e) => proptest::prop_assert_eq!(got, Some(e), "{}", expr),
                None => proptest::prop_assert!(
                    got.is_none_or(|g| g.as_second() > after.as_second() + horizon * 60),
                    "{} got {:?}", expr, got
                ),
            }
        }
    }
}
