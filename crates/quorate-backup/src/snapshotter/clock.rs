//! The time stamped on captured events, injectable so tests produce exact output.

use jiff::Timestamp;

use crate::delta::JsonTime;

/// Source of the current time for event time stamps.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Formats `ts` the way Go's `time.Time` marshals to JSON for a UTC time (RFC 3339 with
/// nanoseconds, trailing zeros of the fraction dropped, no fraction when it is zero, `Z`), as
/// etcd-backup-restore writes event times.
pub fn go_time_json(ts: Timestamp) -> String {
    let mut text = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = ts.subsec_nanosecond();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text.push('Z');
    text
}

/// Renders capture time stamps as [`go_time_json`] does, as JSON strings, formatting the date
/// and time of day only when the second changes (capture stamps every watch response).
#[derive(Debug, Default)]
pub(crate) struct JsonTimes {
    /// The second last formatted, and its `%Y-%m-%dT%H:%M:%S`.
    last: Option<(i64, String)>,
}

impl JsonTimes {
    pub(crate) fn render(&mut self, ts: Timestamp) -> JsonTime {
        let nanos = ts.subsec_nanosecond();
        if nanos < 0 {
            // Before 1970: not worth a fast path.
            return JsonTime::new(&go_time_json(ts));
        }
        let second = ts.as_second();
        let prefix = match &mut self.last {
            Some((cached, prefix)) if *cached == second => prefix,
            last => {
                let prefix = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
                &mut last.insert((second, prefix)).1
            }
        };
        let mut text = String::with_capacity(prefix.len() + 11);
        text.push_str(prefix);
        if nanos > 0 {
            let mut digits = [b'0'; 9];
            let mut rest = nanos as u32;
            for digit in digits.iter_mut().rev() {
                *digit = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
            let len = 9 - digits.iter().rev().take_while(|&&d| d == b'0').count();
            text.push('.');
            text.push_str(std::str::from_utf8(&digits[..len]).expect("ASCII digits"));
        }
        text.push('Z');
        JsonTime::new(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64, nanos: i32) -> Timestamp {
        Timestamp::new(seconds, nanos).unwrap()
    }

    #[test]
    fn formats_like_go_rfc3339nano_in_utc() {
        // 2026-11-22T05:00:00Z
        let base = 1_795_323_600;
        assert_eq!(go_time_json(at(base, 0)), "2026-11-22T05:00:00Z");
        assert_eq!(
            go_time_json(at(base, 123_456_789)),
            "2026-11-22T05:00:00.123456789Z"
        );
        assert_eq!(
            go_time_json(at(base, 100_000_000)),
            "2026-11-22T05:00:00.1Z"
        );
        assert_eq!(go_time_json(at(base, 1_000)), "2026-11-22T05:00:00.000001Z");
        assert_eq!(go_time_json(at(0, 5)), "1970-01-01T00:00:00.000000005Z");
    }

    #[test]
    fn output_parses_back_to_the_same_instant() {
        let ts = at(1_700_000_000, 987_654_321);
        let parsed: Timestamp = go_time_json(ts).parse().unwrap();
        assert_eq!(parsed, ts);
    }

    #[test]
    fn cached_rendering_matches_go_time_json() {
        let mut times = JsonTimes::default();
        let base = 1_795_323_600;
        for (seconds, nanos) in [
            (base, 0),
            (base, 500_000_000),
            (base, 123_456_789),
            (base, 1),
            (base + 1, 1_000),
            (base + 1, 0),
            (base, 999_999_999),
            (0, 5),
            (-1, -500_000_000),
            (-1, 0),
            (253_402_207_200, 999_999_999),
            (base + 86_400 * 366, 100),
        ] {
            let ts = at(seconds, nanos);
            assert_eq!(times.render(ts), JsonTime::new(&go_time_json(ts)), "{ts:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn cached_rendering_matches_go_time_json_anywhen(
            steps in proptest::collection::vec((-2i64..3, 0i32..1_000_000_000), 1..50),
            start in -100_000_000_000i64..200_000_000_000,
        ) {
            let mut times = JsonTimes::default();
            let mut seconds = start;
            for (step, nanos) in steps {
                seconds += step;
                let ts = at(seconds, if seconds < 0 { -nanos } else { nanos });
                proptest::prop_assert_eq!(times.render(ts), JsonTime::new(&go_time_json(ts)));
            }
        }
    }
}
