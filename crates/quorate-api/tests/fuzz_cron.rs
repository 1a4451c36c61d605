//! Fuzzing cron schedules (`CronSchedule::parse`, `next_after`): arbitrary text and text built
//! from fields of numbers, names, ranges, steps and lists. Every input is answered (no panic),
//! a refusal quotes the input and says why, and on what parses `next_after` returns promptly
//! a later whole minute the schedule matches, with no matching minute in between.

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use quorate_api::cron::CronSchedule;

fn check(input: &str, after: Timestamp) {
    let schedule = match CronSchedule::parse(input) {
        Ok(s) => s,
        Err(e) => {
            let text = e.to_string();
            assert!(!e.reason.is_empty(), "{input:?}: no reason");
            assert!(text.contains(&format!("{input:?}")), "{input:?}: {text}");
            return;
        }
    };
    assert_eq!(schedule.as_str(), input);
    let started = Instant::now();
    let next = schedule.next_after(after);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{input:?} after {after}: next_after took {:?}",
        started.elapsed()
    );
    let Some(next) = next else {
        return;
    };
    assert!(next > after, "{input:?}: {next} is not after {after}");
    assert_eq!(next.as_second() % 60, 0, "{input:?}: {next}");
    assert_eq!(next.subsec_nanosecond(), 0, "{input:?}: {next}");
    assert!(schedule.matches(next), "{input:?}: {next} does not match");
    // No earlier fire time: every minute in between (when there are few) does not match.
    let gap = next.duration_since(after);
    if gap < SignedDuration::from_hours(6) {
        let mut t = after;
        loop {
            t = Timestamp::from_second(t.as_second() - t.as_second().rem_euclid(60) + 60).unwrap();
            if t >= next {
                break;
            }
            assert!(!schedule.matches(t), "{input:?}: {t} matches before {next}");
        }
    }
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u32..70).prop_map(|v| v.to_string()),
        1 => any::<u32>().prop_map(|v| v.to_string()),
        1 => "[0-9]{10,25}",
        1 => proptest::sample::select(vec![
            "JAN", "feb", "Dec", "SUN", "sat", "Mon", "XYZ", "", "-1", "\u{661}", "٣",
        ])
        .prop_map(str::to_string),
    ]
}

fn item() -> impl Strategy<Value = String> {
    let base = prop_oneof![
        Just("*".to_string()),
        Just("?".to_string()),
        value(),
        (value(), value()).prop_map(|(a, b)| format!("{a}-{b}")),
    ];
    let step = prop_oneof![
        3 => Just(String::new()),
        2 => (1u32..70).prop_map(|s| format!("/{s}")),
        1 => any::<u32>().prop_map(|s| format!("/{s}")),
        1 => Just("/4294967295".to_string()),
        1 => Just("/0".to_string()),
        1 => Just("/".to_string()),
        1 => "/[0-9]{11,20}",
    ];
    (base, step).prop_map(|(b, s)| format!("{b}{s}"))
}

fn field() -> impl Strategy<Value = String> {
    proptest::collection::vec(item(), 1..4).prop_map(|items| items.join(","))
}

fn cron_like() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::collection::vec(field(), 5).prop_map(|f| f.join(" ")),
        1 => proptest::collection::vec(field(), 0..8).prop_map(|f| f.join(" ")),
        1 => proptest::sample::select(vec![
            "@hourly", "@DAILY", "@midnight", "@weekly", "@monthly", "@yearly", "@annually",
            "@reboot", "@", " @hourly ",
        ])
        .prop_map(str::to_string),
    ]
}

fn instant() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        4 => (1_500_000_000i64..4_500_000_000).prop_map(|s| Timestamp::from_second(s).unwrap()),
        1 => (Timestamp::MIN.as_second()..=Timestamp::MAX.as_second())
            .prop_map(|s| Timestamp::from_second(s).unwrap()),
        1 => (0i64..4).prop_map(|d| Timestamp::from_second(Timestamp::MAX.as_second() - d * 86_400 * 200).unwrap()),
        1 => (0i64..3).prop_map(|d| Timestamp::from_second(Timestamp::MIN.as_second() + d * 86_400 * 200).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_text_is_answered_clearly(input in any::<String>(), after in instant()) {
        check(&input, after);
    }

    #[test]
    fn cron_like_text_parses_or_is_refused_and_next_after_terminates(input in cron_like(), after in instant()) {
        check(&input, after);
    }
}

#[test]
fn schedules_that_never_or_rarely_fire_end_promptly() {
    let after: Timestamp = "2024-03-01T00:00:00Z".parse().unwrap();
    for input in [
        "0 0 31 2 *",
        "0 0 30 2 *",
        "0 0 29 2 *",
        "59 23 31 12 *",
        "0 0 31 4,6,9,11 *",
        "* * 31 2 1",
    ] {
        check(input, after);
        check(input, Timestamp::MAX);
        check(input, Timestamp::MIN);
    }
}

/// Found by fuzzing: a step near `u32::MAX` after a non-zero start overflowed (a panic in
/// debug builds, an endless loop when the addition wraps around in release builds).
#[test]
fn cron_step_near_u32_max_is_a_single_value_not_a_panic_or_hang() {
    let schedule = CronSchedule::parse("5/4294967295 * * * *").unwrap();
    let after: Timestamp = "2024-03-01T00:00:00Z".parse().unwrap();
    assert_eq!(
        schedule.next_after(after),
        Some("2024-03-01T00:05:00Z".parse().unwrap())
    );
    assert!(CronSchedule::parse("0 1-23/4294967295 * * *").is_ok());
}

/// Found by fuzzing: a number too large for 32 bits was called "not a number".
#[test]
fn cron_value_beyond_u32_is_out_of_range_not_a_non_number() {
    let e = CronSchedule::parse("99999999999 * * * *").unwrap_err();
    assert_eq!(e.reason, "minute field: 99999999999 is out of range 0-59");
    let e = CronSchedule::parse("*/99999999999 * * * *").unwrap_err();
    assert_eq!(e.reason, "minute field: step 99999999999 is too large");
}
