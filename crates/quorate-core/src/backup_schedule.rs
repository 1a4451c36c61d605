//! When the backup leader takes full snapshots: on the `fullSnapshotSchedule` cron, and at
//! leader start either a catch-up delta or a full snapshot (reference notes §4.4).
//!
//! Time is always an argument; the agent sleeps until [`next_full_snapshot`] and asks
//! [`full_snapshot_due`] when it wakes, so a missed run (agent down, leader change) is made up
//! as soon as possible instead of waiting for the next cron tick.

use std::time::Duration;

use jiff::Timestamp;
use quorate_api::CronSchedule;

use crate::backup_ready::full_snapshot_interval;

/// True when a full snapshot should be taken now: there is none yet, or the schedule had a run
/// after the last one and at or before `now`. A schedule that never fires is never due (apart
/// from the first full snapshot).
pub fn full_snapshot_due(
    last_full: Option<Timestamp>,
    schedule: &CronSchedule,
    now: Timestamp,
) -> bool {
    match last_full {
        None => true,
        Some(last) => schedule.next_after(last).is_some_and(|run| run <= now),
    }
}

/// When the next full snapshot should be taken: `now` when one is due (see
/// [`full_snapshot_due`]), else the schedule's first run after the last full snapshot.
/// `None` when the schedule never fires again (e.g. `0 0 31 2 *`): no scheduled full snapshots.
pub fn next_full_snapshot(
    last_full: Option<Timestamp>,
    schedule: &CronSchedule,
    now: Timestamp,
) -> Option<Timestamp> {
    match last_full {
        None => Some(now),
        Some(last) => schedule.next_after(last).map(|run| run.max(now)),
    }
}

/// The longest time a healthy backup leader goes between full snapshots under `schedule`
/// (BR's "full snapshot max time window"): the longest gap between its runs, 24 h for a
/// schedule that never fires twice.
pub fn full_snapshot_window(schedule: &CronSchedule, now: Timestamp) -> Duration {
    full_snapshot_interval(schedule, now)
}

/// What a new backup leader does first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupAction {
    /// Take a full snapshot now, then watch from its revision + 1.
    TakeFullSnapshot,
    /// The last full snapshot is recent enough: collect the events since the newest stored
    /// snapshot into a delta, starting at this revision. If etcd has already compacted it
    /// away, the agent falls back to a full snapshot (BR PR #600).
    CatchUpDelta {
        /// The last stored revision + 1.
        from_revision: i64,
    },
}

/// BR's decision at leader start (`IsFullSnapshotRequiredAtStartup`).
///
/// `last_full` is `(when the newest full snapshot was taken, the last revision of the newest
/// snapshot of any kind in the store)`: the delta continues right after what is already
/// stored, not after the full snapshot, so no events are stored twice.
///
/// A full snapshot is taken when there is none, when the schedule had a run since the last one
/// (it was missed while no leader ran), or when the last one is older than
/// [`full_snapshot_window`]. Otherwise the leader catches up with a delta. For evenly spaced
/// schedules this equals BR's rule "full when `next run - last full` or `now - last full`
/// exceeds the window".
pub fn startup_action(
    last_full: Option<(Timestamp, i64)>,
    schedule: &CronSchedule,
    now: Timestamp,
) -> StartupAction {
    let Some((created, last_revision)) = last_full else {
        return StartupAction::TakeFullSnapshot;
    };
    let window = jiff::SignedDuration::try_from(full_snapshot_window(schedule, now))
        .unwrap_or(jiff::SignedDuration::MAX);
    if full_snapshot_due(Some(created), schedule, now) || now.duration_since(created) > window {
        return StartupAction::TakeFullSnapshot;
    }
    StartupAction::CatchUpDelta {
        from_revision: last_revision.saturating_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn sched(expr: &str) -> CronSchedule {
        CronSchedule::parse(expr).unwrap()
    }

    fn mins(m: i64) -> SignedDuration {
        SignedDuration::from_mins(m)
    }

    #[test]
    fn first_full_snapshot_is_due_at_once() {
        let s = sched("0 */1 * * *");
        let now = ts("2024-06-01T10:15:00Z");
        assert!(full_snapshot_due(None, &s, now));
        assert_eq!(next_full_snapshot(None, &s, now), Some(now));
        assert_eq!(
            startup_action(None, &s, now),
            StartupAction::TakeFullSnapshot
        );
    }

    #[test]
    fn hourly_schedule_is_due_after_the_next_run() {
        let s = sched("0 */1 * * *");
        let last = ts("2024-06-01T10:00:02Z");
        assert!(!full_snapshot_due(
            Some(last),
            &s,
            ts("2024-06-01T10:59:59Z")
        ));
        assert!(full_snapshot_due(
            Some(last),
            &s,
            ts("2024-06-01T11:00:00Z")
        ));
        assert_eq!(
            next_full_snapshot(Some(last), &s, ts("2024-06-01T10:30:00Z")),
            Some(ts("2024-06-01T11:00:00Z"))
        );
        // Missed runs are made up right away, once.
        let now = ts("2024-06-01T13:42:00Z");
        assert_eq!(next_full_snapshot(Some(last), &s, now), Some(now));
        // Taken exactly on the run time: the next run is the following one.
        let on_time = ts("2024-06-01T11:00:00Z");
        assert!(!full_snapshot_due(Some(on_time), &s, on_time));
        assert_eq!(
            next_full_snapshot(Some(on_time), &s, on_time),
            Some(ts("2024-06-01T12:00:00Z"))
        );
    }

    #[test]
    fn schedule_that_never_fires() {
        let s = sched("0 0 31 2 *");
        let now = ts("2024-06-01T10:00:00Z");
        let last = now - mins(60);
        assert!(!full_snapshot_due(Some(last), &s, now));
        assert_eq!(next_full_snapshot(Some(last), &s, now), None);
        assert_eq!(full_snapshot_window(&s, now), Duration::from_secs(86_400));
        assert_eq!(
            startup_action(Some((last, 41)), &s, now),
            StartupAction::CatchUpDelta { from_revision: 42 }
        );
        assert_eq!(
            startup_action(Some((now - mins(24 * 60 + 1), 41)), &s, now),
            StartupAction::TakeFullSnapshot
        );
    }

    #[test]
    fn startup_catches_up_within_the_window() {
        let s = sched("0 */1 * * *");
        let last = ts("2024-06-01T10:50:00Z");
        assert_eq!(
            startup_action(Some((last, 500)), &s, ts("2024-06-01T10:55:00Z")),
            StartupAction::CatchUpDelta { from_revision: 501 }
        );
        // The 11:00 run was missed.
        assert_eq!(
            startup_action(Some((last, 500)), &s, ts("2024-06-01T11:10:00Z")),
            StartupAction::TakeFullSnapshot
        );
    }

    #[test]
    fn startup_cases_of_br() {
        // Daily at 14:05; now 10:05.
        let now = ts("2024-06-01T10:05:00Z");
        let s = sched("5 14 * * *");
        // Last full 4h10m ago, next run in 4 h: within 24 h.
        assert_eq!(
            startup_action(Some((now - mins(250), 7)), &s, now),
            StartupAction::CatchUpDelta { from_revision: 8 }
        );
        // Two days ago: full.
        assert_eq!(
            startup_action(Some((now - mins(2 * 24 * 60), 7)), &s, now),
            StartupAction::TakeFullSnapshot
        );
        // Daily at 18:05; last full 18 h ago, next run in 8 h: 26 h > 24 h, full.
        let s = sched("5 18 * * *");
        assert_eq!(
            startup_action(Some((now - mins(18 * 60), 7)), &s, now),
            StartupAction::TakeFullSnapshot
        );
        // Last full exactly at yesterday's run time: next run is exactly 24 h later, no full.
        let s = sched("5 12 * * *");
        assert_eq!(
            startup_action(Some((ts("2024-05-31T12:05:00Z"), 7)), &s, now),
            StartupAction::CatchUpDelta { from_revision: 8 }
        );
    }

    #[test]
    fn window_is_the_schedule_gap() {
        let now = ts("2024-06-01T10:05:00Z");
        let h = Duration::from_secs(3600);
        assert_eq!(full_snapshot_window(&sched("5 10 * * *"), now), 24 * h);
        assert_eq!(full_snapshot_window(&sched("5 10 * * 4"), now), 7 * 24 * h);
        assert_eq!(full_snapshot_window(&sched("0 */4 * * *"), now), 4 * h);
    }

    fn even_schedules() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "0 */1 * * *",
            "*/10 * * * *",
            "0 */4 * * *",
            "30 2 * * *",
            "0 0 * * 3",
        ])
    }

    proptest! {
        #[test]
        fn due_and_next_agree(
            expr in prop::sample::select(vec![
                "0 */1 * * *", "*/10 * * * *", "0 0,6 * * *", "0 0 * * 1-5", "0 0 1 * *",
            ]),
            last in 1_700_000_000i64..1_800_000_000,
            later in 0i64..40 * 86_400,
        ) {
            let s = sched(expr);
            let last = Timestamp::from_second(last).unwrap();
            let now = last + SignedDuration::from_secs(later);
            let due = full_snapshot_due(Some(last), &s, now);
            let next = next_full_snapshot(Some(last), &s, now).unwrap();
            prop_assert!(next >= now);
            prop_assert_eq!(due, next == now);
            if !due {
                // No run was skipped: the next one is still ahead.
                prop_assert_eq!(Some(next), s.next_after(last));
                prop_assert!(s.next_after(now) == Some(next));
            }
        }

        #[test]
        fn startup_matches_brs_formula_for_even_schedules(
            expr in even_schedules(),
            last in 1_700_000_000i64..1_800_000_000,
            later in 0i64..20 * 86_400,
            rev in 0i64..1_000_000,
        ) {
            let s = sched(expr);
            let last = Timestamp::from_second(last).unwrap();
            let now = last + SignedDuration::from_secs(later);
            let window = SignedDuration::try_from(full_snapshot_window(&s, now)).unwrap();
            let next = s.next_after(now).unwrap();
            let br_full = now.duration_since(last) > window || next.duration_since(last) > window;
            let got = startup_action(Some((last, rev)), &s, now);
            if br_full {
                prop_assert_eq!(got, StartupAction::TakeFullSnapshot);
            } else {
                prop_assert_eq!(got, StartupAction::CatchUpDelta { from_revision: rev + 1 });
            }
        }
    }
}
