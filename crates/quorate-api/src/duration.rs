//! Go-style durations (`20s`, `1h30m`, `1.5h`, `500ms`) as etcd-druid's CRD accepts them.
//!
//! The accepted language is exactly druid's pattern [`GO_DURATION_PATTERN`]: one or more
//! `<number><unit>` groups, no sign, no spaces, no bare `0`.

use std::time::Duration;

/// The pattern druid's CRD puts on every duration field; also emitted into our CRD.
pub const GO_DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// Why a text is not a Go duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text does not match the Go duration syntax.
    #[error("{input:?} is not a duration; use Go duration syntax such as \"20s\" or \"1m30s\"")]
    Syntax {
        /// The rejected text.
        input: String,
    },
    /// The value does not fit (more than about 292 years).
    #[error("{input:?} is too long a duration; the maximum is about 292 years (\"2562047h\")")]
    Overflow {
        /// The rejected text.
        input: String,
    },
}

/// Parses a Go duration such as `1h30m` or `0.5s`. Fractions below a nanosecond are dropped,
/// as Go does.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let syntax = || DurationError::Syntax {
        input: input.to_string(),
    };
    let overflow = || DurationError::Overflow {
        input: input.to_string(),
    };
    if input.is_empty() {
        return Err(syntax());
    }
    let mut rest = input;
    let mut total_ns: Option<u128> = Some(0);
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        if int_len == 0 {
            return Err(syntax());
        }
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                if frac_len == 0 {
                    return Err(syntax());
                }
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        let (unit_ns, unit_len) = unit_of(after_number).ok_or_else(syntax)?;
        rest = &after_number[unit_len..];

        // An overflow is reported once the whole text is known to be a duration.
        total_ns = total_ns.and_then(|total| {
            let int_value: u128 = parse_digits(int_part)?;
            let mut group_ns = int_value.checked_mul(unit_ns)?;
            // Go keeps at most the precision that still matters; 25 digits cover every unit
            // (below a nanosecond of an hour) and times an hour in ns still fit in u128.
            let frac_digits = &frac_part[..frac_part.len().min(25)];
            if !frac_digits.is_empty() {
                let scale = 10u128.pow(frac_digits.len() as u32);
                let frac_value = parse_digits(frac_digits)?;
                group_ns = group_ns.checked_add(frac_value.checked_mul(unit_ns)? / scale)?;
            }
            total.checked_add(group_ns)
        });
    }
    // Go durations are int64 nanoseconds.
    let total_ns = total_ns
        .filter(|ns| *ns <= i64::MAX as u128)
        .ok_or_else(overflow)?;
    let secs = (total_ns / 1_000_000_000) as u64;
    let nanos = (total_ns % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Renders a duration the way Go's `time.Duration.String()` does (`1h30m0s`, `500ms`, `0s`),
/// for flags and config files read by Go programs.
pub fn format_go_duration(duration: Duration) -> String {
    let total_ns = duration.as_nanos();
    if total_ns == 0 {
        return "0s".to_string();
    }
    if total_ns < 1_000_000_000 {
        // Sub-second: the largest unit that keeps an integer part, with a fraction if needed.
        let (unit, div) = if total_ns < 1_000 {
            ("ns", 1u128)
        } else if total_ns < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{}", fraction(total_ns, div), unit);
    }
    let hours = total_ns / 3_600_000_000_000;
    let minutes = (total_ns / 60_000_000_000) % 60;
    let sec_ns = total_ns % 60_000_000_000;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{}s", fraction(sec_ns, 1_000_000_000)));
    out
}

/// `value / div` as a decimal without trailing zeros.
fn fraction(value: u128, div: u128) -> String {
    let int = value / div;
    let rem = value % div;
    if rem == 0 {
        return int.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{rem:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

fn parse_digits(digits: &str) -> Option<u128> {
    digits.bytes().try_fold(0u128, |acc, b| {
        acc.checked_mul(10)?.checked_add(u128::from(b - b'0'))
    })
}

/// The unit at the start of `text`: its length in nanoseconds and its byte length.
fn unit_of(text: &str) -> Option<(u128, usize)> {
    // Longest match first: "ms" before "m", "ns"/"us"/"µs" before anything else.
    const UNITS: [(&str, u128); 7] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    UNITS
        .iter()
        .find(|(name, _)| text.starts_with(name))
        .map(|(name, ns)| (*ns, name.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_compound_units() {
        assert_eq!(parse_go_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_go_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_go_duration("7us"), Ok(Duration::from_micros(7)));
        assert_eq!(parse_go_duration("7µs"), Ok(Duration::from_micros(7)));
        assert_eq!(parse_go_duration("3ns"), Ok(Duration::from_nanos(3)));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_go_duration("1h1m1s1ms"),
            Ok(Duration::from_millis(3_661_001))
        );
    }

    #[test]
    fn parses_fractions() {
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.25m"), Ok(Duration::from_secs(75)));
    }

    #[test]
    fn rejects_what_druids_pattern_rejects() {
        for bad in [
            "",
            "20",
            "0",
            "20 seconds",
            "-5s",
            "+5s",
            "1d",
            "s",
            "1.s",
            ".5s",
            "1h 30m",
            "20S",
            " 20s",
            "20s ",
        ] {
            let err = parse_go_duration(bad).unwrap_err();
            assert_eq!(
                err,
                DurationError::Syntax {
                    input: bad.to_string()
                },
                "{bad:?}"
            );
        }
    }

    #[test]
    fn error_message_says_what_is_allowed() {
        let msg = parse_go_duration("20 seconds").unwrap_err().to_string();
        assert_eq!(
            msg,
            "\"20 seconds\" is not a duration; use Go duration syntax such as \"20s\" or \"1m30s\""
        );
    }

    #[test]
    fn rejects_overflow() {
        assert!(matches!(
            parse_go_duration("3000000h"),
            Err(DurationError::Overflow { .. })
        ));
        assert!(matches!(
            parse_go_duration("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow { .. })
        ));
        assert!(parse_go_duration("2562047h").is_ok());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
        assert_eq!(format_go_duration(Duration::from_secs(20)), "20s");
        assert_eq!(format_go_duration(Duration::from_secs(5400)), "1h30m0s");
        assert_eq!(format_go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(format_go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::from_micros(7)), "7µs");
        assert_eq!(format_go_duration(Duration::from_nanos(1)), "1ns");
    }

    proptest::proptest! {
        #[test]
        fn format_then_parse_is_identity(ns in 0u64..(i64::MAX as u64)) {
            let d = Duration::from_nanos(ns);
            let text = format_go_duration(d);
            proptest::prop_assert_eq!(parse_go_duration(&text), Ok(d), "{}", text);
        }
    }
}
