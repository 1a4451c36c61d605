//! The time stamped on captured events, injectable so tests produce exact output.

use jiff::Timestamp;

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
}
