//! Fuzzing Go durations (`parse_go_duration`, `format_go_duration`): arbitrary text and text
//! built from the grammar's pieces. Every input is answered (no panic), a refusal names the
//! input, `Syntax` exactly when druid's pattern rejects the text, `Overflow` only beyond
//! int64 nanoseconds, and what parses formats back to the same duration.

use std::time::Duration;

use proptest::prelude::*;
use quorate_api::duration::{DurationError, format_go_duration, parse_go_duration};

const UNITS: [(&str, f64); 7] = [
    ("ns", 1.0),
    ("us", 1e3),
    ("µs", 1e3),
    ("ms", 1e6),
    ("s", 1e9),
    ("m", 6e10),
    ("h", 3.6e12),
];

/// `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$` by hand, with the value in nanoseconds
/// (as a float) when it matches.
fn in_pattern(input: &str) -> Option<f64> {
    if input.is_empty() {
        return None;
    }
    let mut rest = input;
    let mut total = 0.0;
    while !rest.is_empty() {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let mut number_len = n;
        if rest[n..].starts_with('.') {
            let f = rest[n + 1..].bytes().take_while(u8::is_ascii_digit).count();
            if f == 0 {
                return None;
            }
            number_len = n + 1 + f;
        }
        let number: f64 = rest[..number_len].parse().ok()?;
        let after = &rest[number_len..];
        let (unit, ns) = UNITS.iter().find(|(u, _)| after.starts_with(u))?;
        total += number * ns;
        rest = &after[unit.len()..];
    }
    Some(total)
}

const MAX_NS: f64 = i64::MAX as f64;

fn check(input: &str) {
    match parse_go_duration(input) {
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(&format!("{input:?}")),
                "{input:?}: the message does not name the input: {text}"
            );
            match e {
                DurationError::Syntax { .. } => {
                    assert!(
                        in_pattern(input).is_none(),
                        "{input:?} matches, yet: {text}"
                    )
                }
                DurationError::Overflow { .. } => {
                    let ns = in_pattern(input).expect("overflow of a non-duration");
                    assert!(ns >= MAX_NS * (1.0 - 1e-9), "{input:?} ({ns} ns): {text}");
                }
            }
        }
        Ok(d) => {
            let ns = in_pattern(input).unwrap_or_else(|| panic!("{input:?} parsed as {d:?}"));
            let got = d.as_nanos() as f64;
            // Fractions below a nanosecond are dropped per group.
            let groups = input.matches(|c: char| c.is_ascii_alphabetic()).count() as f64;
            assert!(
                (got - ns).abs() <= groups + ns * 1e-9,
                "{input:?}: {got} ns, about {ns} expected"
            );
            let text = format_go_duration(d);
            assert_eq!(
                parse_go_duration(&text),
                Ok(d),
                "{input:?} formats as {text:?}"
            );
        }
    }
}

fn duration_like() -> impl Strategy<Value = String> {
    let group = (
        prop_oneof![
            "[0-9]{1,3}",
            "[0-9]{15,22}",
            "0{10,40}[1-9]",
            "[0-9]{35,45}",
            Just(String::new())
        ],
        prop_oneof![
            Just(String::new()),
            "\\.[0-9]{1,9}",
            "\\.[0-9]{25,60}",
            Just(".".to_string())
        ],
        prop_oneof![
            proptest::sample::select(vec!["ns", "us", "µs", "ms", "s", "m", "h"])
                .prop_map(str::to_string),
            "(d|S|H|sec|µ| s|-|\\+|\u{3bc}s|\u{b5})",
        ],
    )
        .prop_map(|(i, f, u)| format!("{i}{f}{u}"));
    proptest::collection::vec(group, 1..6).prop_map(|g| g.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_text_is_answered_clearly(input in any::<String>()) {
        check(&input);
    }

    #[test]
    fn duration_like_text_is_parsed_or_refused_for_what_it_is(input in duration_like()) {
        check(&input);
    }

    #[test]
    fn every_duration_formats_and_parses_back(secs in 0u64..=(i64::MAX as u64 / 1_000_000_000), nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        prop_assume!(d.as_nanos() <= i64::MAX as u128);
        let text = format_go_duration(d);
        prop_assert_eq!(parse_go_duration(&text), Ok(d), "{}", text);
    }
}

#[test]
fn edge_cases() {
    for input in [
        "2562047h47m16.854775807s",
        "2562047h47m16.854775808s",
        "9223372036854775807ns",
        "9223372036854775808ns",
        "340282366920938463463374607431768211455ns",
        "340282366920938463463374607431768211456ns",
        "0.000000000000000000000000000000000000000001h",
        "1.999999999999999999999999999999999999999999999ns",
        "1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h",
        "µs",
        "1µ",
        "1\u{3bc}s",
    ] {
        check(input);
    }
    let many = "1ns".repeat(100_000);
    check(&many);
}

/// Found by fuzzing: a text whose first group overflowed was called "too long a duration"
/// even when the rest of it is no duration at all.
#[test]
fn duration_that_overflows_and_is_malformed_is_refused_as_malformed() {
    let input = "340282400000000000000000000000000000000ns0d";
    assert_eq!(
        parse_go_duration(input),
        Err(DurationError::Syntax {
            input: input.to_string()
        })
    );
    assert!(matches!(
        parse_go_duration("340282400000000000000000000000000000000ns1s"),
        Err(DurationError::Overflow { .. })
    ));
}

/// Found by fuzzing: a fraction with 30 digits or more overflowed the arithmetic, and a
/// sub-second duration was refused as "too long".
#[test]
fn duration_with_a_long_fraction_is_read_not_refused_as_too_long() {
    assert_eq!(
        parse_go_duration("0.8643333335680003471229877734746253715836302034s"),
        Ok(Duration::from_nanos(864_333_333))
    );
    assert_eq!(
        parse_go_duration(&format!("1.{}h", "9".repeat(60))),
        Ok(Duration::from_secs(7200) - Duration::from_nanos(1))
    );
}
