//! The `BackupReady` condition, judged as etcd-druid judges it: from the two snapshot leases
//! (`<etcd>-full-snap`, `<etcd>-delta-snap`) the backup leader renews after every snapshot.
//!
//! The rules (druid's `check_backup_ready`, see the reference notes §3.6), with `p` the delta
//! snapshot period and `I` the full-snapshot interval:
//!
//! | leases | result |
//! |---|---|
//! | either lease missing, or neither renewed | Unknown |
//! | only delta renewed | True if delta age < 2p **and** the full lease was *created* < I ago |
//! | only full renewed | Unknown ("Periodic delta snapshots not started yet" once older than 5p) |
//! | both renewed | True if delta age < 2p **and** full age < I |
//! | anything not True above | False only if the previous `BackupReady` was Unknown or False **and** the delta lease is older than 3p; otherwise Unknown |
//!
//! So a True never becomes False in one step: it goes through Unknown first, which keeps a
//! single late renewal from paging anyone. Ages are `now - renewTime`; a renew time in the
//! future (clock skew) counts as fresh.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use quorate_api::BackupSpec;
use quorate_api::CronSchedule;
use quorate_api::status::{Condition, ConditionStatus};

use crate::conditions::{BACKUP_READY, CheckResult};
use crate::lease::{BACKUP_ERROR_ANNOTATION, SnapshotLease};

/// Reason when the leases prove recent full and delta snapshots.
pub const REASON_BACKUP_SUCCEEDED: &str = "BackupSucceeded";
/// Reason when backups are known to be failing (stale leases, or a failing store).
pub const REASON_BACKUP_FAILED: &str = "BackupFailed";
/// Reason when the leases neither prove nor disprove that backups work.
pub const REASON_UNKNOWN: &str = "Unknown";

/// Message druid gives when only the full lease has been renewed, for more than 5 delta periods.
pub const MESSAGE_DELTA_NOT_STARTED: &str = "Periodic delta snapshots not started yet";
/// Message druid gives when the delta lease has gone stale (quorate appends the details).
pub const MESSAGE_STALE_LEASES: &str = "Stale snapshot leases. Not renewed in a long time";

/// Full-snapshot interval druid assumes when `fullSnapshotSchedule` is not set, and the
/// fallback for a schedule that never fires.
pub const DEFAULT_FULL_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// How many consecutive gaps between runs [`full_snapshot_interval`] looks at: enough to see
/// the long gap of uneven schedules (weekends of `1-5`, 31-day months of `0 0 1 * *`).
const INTERVAL_SAMPLE_GAPS: usize = 12;

fn result(
    status: ConditionStatus,
    reason: &'static str,
    message: impl Into<String>,
) -> CheckResult {
    CheckResult {
        type_: BACKUP_READY,
        status,
        reason,
        message: message.into(),
    }
}

fn unknown(message: impl Into<String>) -> CheckResult {
    result(ConditionStatus::Unknown, REASON_UNKNOWN, message)
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

fn times(d: Duration, k: u32) -> SignedDuration {
    signed(d.saturating_mul(k))
}

fn age(now: Timestamp, at: Timestamp) -> SignedDuration {
    now.duration_since(at)
}

fn human(d: SignedDuration) -> String {
    // Whole seconds read better than nanoseconds in a status message.
    format!("{:#}", SignedDuration::from_secs(d.as_secs()))
}

/// A moment in a status message, to the second. Absolute, not "N s ago": a message that
/// changed with every pass would make every pass write the status.
fn at(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// `BackupReady` from the snapshot leases, exactly as druid decides it (see the module docs).
///
/// - `full`/`delta`: the snapshot leases, `None` when the lease does not exist;
/// - `full_created`: when the full-snapshot lease object was *created* (Kubernetes
///   `metadata.creationTimestamp`; in local mode the lease file's creation). [`SnapshotLease`]
///   does not carry it, so the caller passes it. It matters only when the delta lease has been
///   renewed but the full lease never was (fresh leases on an existing cluster); `None` there
///   means "not known to be recent", so that case cannot be True;
/// - `previous`: the current `BackupReady` condition, if any; only its status is read. With no
///   previous condition the result is never False (druid: no conditions yet);
/// - `delta_period`: `spec.backup.deltaSnapshotPeriod`;
/// - `full_interval`: see [`full_snapshot_interval`] / [`backup_ready_full_interval`].
pub fn check_backup_ready(
    full: Option<&SnapshotLease>,
    full_created: Option<Timestamp>,
    delta: Option<&SnapshotLease>,
    previous: Option<&Condition>,
    delta_period: Duration,
    full_interval: Duration,
    now: Timestamp,
) -> CheckResult {
    let (full, delta) = match (full, delta) {
        (Some(f), Some(d)) => (f, d),
        (f, d) => {
            let missing: Vec<&str> = [(f.is_none(), "full"), (d.is_none(), "delta")]
                .iter()
                .filter(|(m, _)| *m)
                .map(|(_, what)| *what)
                .collect();
            return unknown(format!(
                "the {} snapshot lease does not exist yet; backup status cannot be determined",
                missing.join(" and ")
            ));
        }
    };
    let delta_fresh_limit = times(delta_period, 2);
    let interval = signed(full_interval);
    let not_proven = match (full.renew_time, delta.renew_time) {
        (None, None) => {
            return unknown(
                "neither snapshot lease has been renewed yet: the snapshotter has not started",
            );
        }
        (None, Some(d)) => {
            let delta_age = age(now, d);
            let full_recent = full_created.map(|c| age(now, c) < interval);
            if delta_age < delta_fresh_limit && full_recent == Some(true) {
                return result(
                    ConditionStatus::True,
                    REASON_BACKUP_SUCCEEDED,
                    "Delta snapshot backup succeeded",
                );
            }
            format!(
                "delta snapshot lease {} last renewed at {} (must be within {}); full snapshot \
                 lease {} never renewed and {}",
                delta.name,
                at(d),
                human(delta_fresh_limit),
                full.name,
                match full_created {
                    Some(c) => format!("created at {} (must be within {})", at(c), human(interval)),
                    None => "its creation time is not known".to_string(),
                }
            )
        }
        (Some(f), None) => {
            let full_age = age(now, f);
            if full_age > times(delta_period, 5) {
                return unknown(MESSAGE_DELTA_NOT_STARTED);
            }
            // Druid falls through to the staleness check, which needs a renewed delta lease:
            // the result is Unknown either way.
            return unknown(format!(
                "full snapshot taken at {}; waiting for periodic delta snapshots to begin",
                at(f)
            ));
        }
        (Some(f), Some(d)) => {
            let (full_age, delta_age) = (age(now, f), age(now, d));
            if delta_age < delta_fresh_limit && full_age < interval {
                return result(
                    ConditionStatus::True,
                    REASON_BACKUP_SUCCEEDED,
                    "Snapshot backup succeeded",
                );
            }
            format!(
                "delta snapshot lease {} last renewed at {} (must be within {}); full snapshot \
                 lease {} last renewed at {} (must be within {})",
                delta.name,
                at(d),
                human(delta_fresh_limit),
                full.name,
                at(f),
                human(interval)
            )
        }
    };
    // Not proven True. Only a delta lease stale for more than 3 periods, seen twice in a row
    // (the previous result was already Unknown or False), makes it False.
    let previous_not_true = previous
        .is_some_and(|c| matches!(c.status, ConditionStatus::Unknown | ConditionStatus::False));
    if let Some(d) = delta.renew_time
        && previous_not_true
        && age(now, d) > times(delta_period, 3)
    {
        return result(
            ConditionStatus::False,
            REASON_BACKUP_FAILED,
            format!("{MESSAGE_STALE_LEASES}: {not_proven}"),
        );
    }
    unknown(format!("backups are not proven current: {not_proven}"))
}

/// `BackupReady` False when the backup store itself reports an error (e.g. listing or
/// uploading fails): the leases may still look fresh for a while, but the person reading
/// status should see the store's error text right away.
pub fn check_backup_ready_with_store_error(store_error: &str) -> CheckResult {
    result(
        ConditionStatus::False,
        REASON_BACKUP_FAILED,
        format!(
            "the backup store is failing: {store_error}; check the bucket, its credentials and \
             the network path to it"
        ),
    )
}

/// The backup error the leader recorded on either snapshot lease ([`BACKUP_ERROR_ANNOTATION`]),
/// full lease first; an empty value counts as none. When this is `Some`, report it with
/// [`check_backup_ready_with_store_error`] instead of judging lease ages.
pub fn lease_backup_error<'a>(
    full: Option<&'a SnapshotLease>,
    delta: Option<&'a SnapshotLease>,
) -> Option<&'a str> {
    [full, delta]
        .into_iter()
        .flatten()
        .filter_map(|l| l.annotations.get(BACKUP_ERROR_ANNOTATION))
        .map(String::as_str)
        .find(|e| !e.trim().is_empty())
}

/// The full-snapshot interval `I` of the `BackupReady` rules: the gap between consecutive runs
/// of `schedule` after `now`, or [`DEFAULT_FULL_SNAPSHOT_INTERVAL`] when it never fires twice.
///
/// Druid takes the gap between the next two runs, assuming evenly spaced runs. quorate takes
/// the longest of the next [`INTERVAL_SAMPLE_GAPS`] gaps: the same for even schedules, and for
/// uneven ones (`0 0 * * 1-5`, `0 0,6 * * *`) it does not call a correct backup stale just
/// because the next gap happens to be the short one.
pub fn full_snapshot_interval(schedule: &CronSchedule, now: Timestamp) -> Duration {
    let mut longest: Option<SignedDuration> = None;
    let mut prev = match schedule.next_after(now) {
        Some(t) => t,
        None => return DEFAULT_FULL_SNAPSHOT_INTERVAL,
    };
    for _ in 0..INTERVAL_SAMPLE_GAPS {
        let Some(next) = schedule.next_after(prev) else {
            break;
        };
        let gap = next.duration_since(prev);
        longest = Some(longest.map_or(gap, |l| l.max(gap)));
        prev = next;
    }
    longest
        .and_then(|g| Duration::try_from(g).ok())
        .unwrap_or(DEFAULT_FULL_SNAPSHOT_INTERVAL)
}

/// The full-snapshot interval for `BackupReady` of an `Etcd`: druid's 24 h when
/// `fullSnapshotSchedule` is not set (or does not parse), else [`full_snapshot_interval`] of it.
pub fn backup_ready_full_interval(backup: &BackupSpec, now: Timestamp) -> Duration {
    match backup
        .full_snapshot_schedule
        .as_deref()
        .map(CronSchedule::parse)
    {
        Some(Ok(schedule)) => full_snapshot_interval(&schedule, now),
        _ => DEFAULT_FULL_SNAPSHOT_INTERVAL,
    }
}

/// The snapshot leases `BackupReady` is judged from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupLeases {
    /// `<name>-full-snap`.
    pub full: Option<SnapshotLease>,
    /// `<name>-delta-snap`.
    pub delta: Option<SnapshotLease>,
    /// When the full-snapshot lease was created.
    pub full_created: Option<jiff::Timestamp>,
}

/// The `BackupReady` check of `etcd`: the leader's store error if it recorded one on a
/// snapshot lease, else druid's rules.
pub fn backup_ready_from_leases(
    etcd: &quorate_api::Etcd,
    leases: &BackupLeases,
    previous: &quorate_api::status::EtcdStatus,
    now: jiff::Timestamp,
) -> CheckResult {
    if let Some(error) = lease_backup_error(leases.full.as_ref(), leases.delta.as_ref()) {
        return check_backup_ready_with_store_error(error);
    }
    let backup = &etcd.spec.backup;
    let mut check = check_backup_ready(
        leases.full.as_ref(),
        leases.full_created,
        leases.delta.as_ref(),
        previous.conditions.iter().find(|c| c.type_ == BACKUP_READY),
        backup.delta_snapshot_period(),
        backup_ready_full_interval(backup, now),
        now,
    );
    if check.status == ConditionStatus::True
        && let Some(replay) = restore_replay(leases.full.as_ref(), leases.delta.as_ref())
    {
        check.message = format!("{}; {replay}", check.message);
    }
    check
}

/// What a restore would replay now, from the snapshot leases: the revisions of deltas after
/// the newest full snapshot (bounded by `snapshotCompaction.eventsThreshold`, see
/// `maintenance::backup_compaction`).
fn restore_replay(full: Option<&SnapshotLease>, delta: Option<&SnapshotLease>) -> Option<String> {
    let full = full?.revision()?.ok()?;
    let delta = delta?.revision()?.ok()?;
    Some(format!(
        "a restore now replays {} revision(s) of deltas after the full snapshot at revision {full}",
        (delta - full).max(0)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    const P: Duration = Duration::from_secs(20);
    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn the_message_says_how_much_a_restore_would_replay() {
        let mut full = SnapshotLease::new("e-full-snap");
        full.record(100, now());
        let mut delta = SnapshotLease::new("e-delta-snap");
        delta.record(250, now());
        assert_eq!(
            restore_replay(Some(&full), Some(&delta)).as_deref(),
            Some(
                "a restore now replays 150 revision(s) of deltas after the full snapshot at revision 100"
            )
        );
        assert_eq!(restore_replay(None, Some(&delta)), None);
    }

    fn now() -> Timestamp {
        "2024-06-01T10:00:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> Timestamp {
        now() - SignedDuration::from_secs(secs)
    }

    fn lease(name: &str, renewed: Option<Timestamp>) -> SnapshotLease {
        SnapshotLease {
            name: name.into(),
            holder_identity: renewed.map(|_| "100".into()),
            renew_time: renewed,
            ..SnapshotLease::default()
        }
    }

    fn full(renewed_secs_ago: Option<i64>) -> SnapshotLease {
        lease("etcd-full-snap", renewed_secs_ago.map(ago))
    }

    fn delta(renewed_secs_ago: Option<i64>) -> SnapshotLease {
        lease("etcd-delta-snap", renewed_secs_ago.map(ago))
    }

    fn prev(status: ConditionStatus) -> Condition {
        Condition {
            type_: BACKUP_READY.into(),
            status,
            last_transition_time: Time(ago(3600)),
            last_update_time: Time(ago(60)),
            reason: "x".into(),
            message: "x".into(),
        }
    }

    fn check(
        f: Option<i64>,
        d: Option<i64>,
        previous: Option<ConditionStatus>,
    ) -> (ConditionStatus, &'static str, String) {
        let prev = previous.map(prev);
        let r = check_backup_ready(
            Some(&full(f)),
            Some(ago(7200)),
            Some(&delta(d)),
            prev.as_ref(),
            P,
            DAY,
            now(),
        );
        assert_eq!(r.type_, BACKUP_READY);
        (r.status, r.reason, r.message)
    }

    use ConditionStatus::{False, True, Unknown};

    #[test]
    fn missing_lease_is_unknown_and_named() {
        let f = full(Some(10));
        let d = delta(Some(10));
        let r = check_backup_ready(None, None, Some(&d), None, P, DAY, now());
        assert_eq!((r.status, r.reason), (Unknown, REASON_UNKNOWN));
        assert!(r.message.contains("full snapshot lease"), "{}", r.message);
        let r = check_backup_ready(Some(&f), None, None, None, P, DAY, now());
        assert!(r.message.contains("delta snapshot lease"), "{}", r.message);
        let r = check_backup_ready(None, None, None, Some(&prev(False)), P, DAY, now());
        assert_eq!(r.status, Unknown);
        assert!(r.message.contains("full and delta"), "{}", r.message);
    }

    #[test]
    fn neither_renewed_is_unknown_even_after_false() {
        let (s, reason, msg) = check(None, None, Some(False));
        assert_eq!((s, reason), (Unknown, REASON_UNKNOWN));
        assert!(msg.contains("not started"), "{msg}");
    }

    #[test]
    fn both_fresh_is_true() {
        let (s, reason, msg) = check(Some(3600), Some(39), None);
        assert_eq!((s, reason), (True, REASON_BACKUP_SUCCEEDED));
        assert_eq!(msg, "Snapshot backup succeeded");
    }

    #[test]
    fn freshness_limits_are_strict() {
        // Delta exactly 2p old is no longer fresh.
        assert_eq!(check(Some(60), Some(40), None).0, Unknown);
        // Full exactly one interval old is no longer fresh.
        assert_eq!(check(Some(86_400), Some(1), None).0, Unknown);
        assert_eq!(check(Some(86_399), Some(1), None).0, True);
    }

    #[test]
    fn stale_full_with_fresh_delta_stays_unknown() {
        // Druid's rule: False needs a stale *delta* lease.
        let (s, _, msg) = check(Some(2 * 86_400), Some(5), Some(False));
        assert_eq!(s, Unknown);
        let renewed = format!("etcd-full-snap last renewed at {}", at(ago(2 * 86_400)));
        assert!(msg.contains(&renewed), "{msg}");
    }

    #[test]
    fn a_message_does_not_change_while_nothing_but_the_clock_does() {
        // Every status pass would otherwise write the status (each 15 s per cluster).
        let (f, d) = (full(Some(7200)), delta(Some(600)));
        let later = now() + SignedDuration::from_secs(15);
        let first = check_backup_ready(Some(&f), None, Some(&d), None, P, DAY, now());
        let second = check_backup_ready(Some(&f), None, Some(&d), None, P, DAY, later);
        assert_eq!(first.status, Unknown);
        assert_eq!(first.message, second.message);
    }

    #[test]
    fn true_never_jumps_to_false() {
        let (s, _, _) = check(Some(100), Some(3600), Some(True));
        assert_eq!(s, Unknown);
        let (s, reason, msg) = check(Some(100), Some(3600), Some(Unknown));
        assert_eq!((s, reason), (False, REASON_BACKUP_FAILED));
        assert!(msg.starts_with(MESSAGE_STALE_LEASES), "{msg}");
        let renewed = format!("etcd-delta-snap last renewed at {}", at(ago(3600)));
        assert!(msg.contains(&renewed), "{msg}");
        let (s, _, _) = check(Some(100), Some(3600), Some(False));
        assert_eq!(s, False);
        // No previous condition: never False.
        assert_eq!(check(Some(100), Some(3600), None).0, Unknown);
    }

    #[test]
    fn false_needs_more_than_three_periods() {
        assert_eq!(check(Some(100), Some(60), Some(Unknown)).0, Unknown);
        assert_eq!(check(Some(100), Some(61), Some(Unknown)).0, False);
        // Between 2p and 3p: not True, not yet False.
        assert_eq!(check(Some(100), Some(50), Some(False)).0, Unknown);
    }

    #[test]
    fn only_delta_renewed_uses_full_lease_creation_time() {
        let f = full(None);
        let d = delta(Some(10));
        let r = check_backup_ready(Some(&f), Some(ago(3600)), Some(&d), None, P, DAY, now());
        assert_eq!((r.status, r.reason), (True, REASON_BACKUP_SUCCEEDED));
        assert_eq!(r.message, "Delta snapshot backup succeeded");
        // Created too long ago.
        let r = check_backup_ready(Some(&f), Some(ago(90_000)), Some(&d), None, P, DAY, now());
        assert_eq!(r.status, Unknown);
        let created = format!("created at {}", at(ago(90_000)));
        assert!(r.message.contains(&created), "{}", r.message);
        // Creation time unknown: cannot be proven.
        let r = check_backup_ready(Some(&f), None, Some(&d), None, P, DAY, now());
        assert_eq!(r.status, Unknown);
        assert!(
            r.message.contains("creation time is not known"),
            "{}",
            r.message
        );
        // Stale delta and previously Unknown: False.
        let d = delta(Some(61));
        let p = prev(Unknown);
        let r = check_backup_ready(Some(&f), Some(ago(60)), Some(&d), Some(&p), P, DAY, now());
        assert_eq!((r.status, r.reason), (False, REASON_BACKUP_FAILED));
    }

    #[test]
    fn only_full_renewed_is_always_unknown() {
        let (s, _, msg) = check(Some(3600), None, Some(False));
        assert_eq!(s, Unknown);
        assert_eq!(msg, MESSAGE_DELTA_NOT_STARTED);
        let (s, _, msg) = check(Some(3600), None, Some(Unknown));
        assert_eq!((s, msg.as_str()), (Unknown, MESSAGE_DELTA_NOT_STARTED));
        // Up to 5 periods: still waiting, different message.
        let (s, _, msg) = check(Some(100), None, None);
        assert_eq!(s, Unknown);
        assert!(msg.contains("waiting for periodic delta"), "{msg}");
        let (_, _, msg) = check(Some(101), None, None);
        assert_eq!(msg, MESSAGE_DELTA_NOT_STARTED);
    }

    #[test]
    fn future_renew_time_counts_as_fresh() {
        let r = check_backup_ready(
            Some(&lease("f", Some(ago(-30)))),
            None,
            Some(&lease("d", Some(ago(-30)))),
            None,
            P,
            DAY,
            now(),
        );
        assert_eq!(r.status, True);
    }

    #[test]
    fn store_error_is_false_with_the_text() {
        let r = check_backup_ready_with_store_error("listing s3://bkp/etcd: access denied");
        assert_eq!(r.type_, BACKUP_READY);
        assert_eq!((r.status, r.reason), (False, REASON_BACKUP_FAILED));
        assert!(r.message.contains("access denied"), "{}", r.message);
    }

    #[test]
    fn backup_error_annotation_is_found_on_either_lease() {
        let mut f = full(Some(10));
        let mut d = delta(Some(10));
        assert_eq!(lease_backup_error(Some(&f), Some(&d)), None);
        d.annotations
            .insert(BACKUP_ERROR_ANNOTATION.into(), "bucket gone".into());
        assert_eq!(lease_backup_error(Some(&f), Some(&d)), Some("bucket gone"));
        assert_eq!(lease_backup_error(None, Some(&d)), Some("bucket gone"));
        f.annotations
            .insert(BACKUP_ERROR_ANNOTATION.into(), " ".into());
        assert_eq!(lease_backup_error(Some(&f), Some(&d)), Some("bucket gone"));
        f.annotations
            .insert(BACKUP_ERROR_ANNOTATION.into(), "denied".into());
        assert_eq!(lease_backup_error(Some(&f), Some(&d)), Some("denied"));
        assert_eq!(lease_backup_error(None, None), None);
    }

    fn sched(expr: &str) -> CronSchedule {
        CronSchedule::parse(expr).unwrap()
    }

    #[test]
    fn interval_of_even_schedules() {
        let h = Duration::from_secs(3600);
        assert_eq!(full_snapshot_interval(&sched("0 */1 * * *"), now()), h);
        assert_eq!(full_snapshot_interval(&sched("0 */4 * * *"), now()), 4 * h);
        assert_eq!(full_snapshot_interval(&sched("30 15 * * *"), now()), 24 * h);
        assert_eq!(
            full_snapshot_interval(&sched("0 0 * * 1"), now()),
            7 * 24 * h
        );
        assert_eq!(
            full_snapshot_interval(&sched("*/1 * * * *"), now()),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn interval_of_uneven_schedules_is_the_longest_gap() {
        let h = Duration::from_secs(3600);
        // 2024-06-01 is a Saturday: the next gap is Mon->Tue, but Fri->Mon is 72 h.
        assert_eq!(full_snapshot_interval(&sched("0 0 * * 1-5"), now()), 72 * h);
        assert_eq!(full_snapshot_interval(&sched("0 0,6 * * *"), now()), 18 * h);
        assert_eq!(
            full_snapshot_interval(&sched("0 0 1 * *"), now()),
            31 * 24 * h
        );
    }

    #[test]
    fn interval_of_a_schedule_that_never_fires_is_a_day() {
        assert_eq!(full_snapshot_interval(&sched("0 0 31 2 *"), now()), DAY);
    }

    #[test]
    fn interval_from_spec_defaults_to_a_day_like_druid() {
        let mut b = BackupSpec::default();
        assert_eq!(backup_ready_full_interval(&b, now()), DAY);
        b.full_snapshot_schedule = Some("0 */6 * * *".into());
        assert_eq!(
            backup_ready_full_interval(&b, now()),
            Duration::from_secs(6 * 3600)
        );
        b.full_snapshot_schedule = Some("garbage".into());
        assert_eq!(backup_ready_full_interval(&b, now()), DAY);
    }

    fn status_strategy() -> impl Strategy<Value = Option<ConditionStatus>> {
        prop::option::of(prop::sample::select(vec![True, False, Unknown]))
    }

    proptest! {
        #[test]
        fn never_true_to_false_and_false_needs_stale_delta(
            full_age in prop::option::of(-100i64..200_000),
            delta_age in prop::option::of(-100i64..2_000),
            created_age in prop::option::of(0i64..200_000),
            previous in status_strategy(),
            period in 1u64..120,
        ) {
            let f = full(full_age);
            let d = delta(delta_age);
            let p = previous.map(prev);
            let period = Duration::from_secs(period);
            let r = check_backup_ready(
                Some(&f), created_age.map(ago), Some(&d), p.as_ref(), period, DAY, now(),
            );
            prop_assert_eq!(r.type_, BACKUP_READY);
            if previous == Some(True) || previous.is_none() {
                prop_assert_ne!(r.status, False);
            }
            if r.status == False {
                let age = delta_age.unwrap();
                prop_assert!(age > 3 * period.as_secs() as i64);
                prop_assert_eq!(r.reason, REASON_BACKUP_FAILED);
            }
            if r.status == True {
                prop_assert!(delta_age.unwrap() < 2 * period.as_secs() as i64);
                prop_assert_eq!(r.reason, REASON_BACKUP_SUCCEEDED);
                match full_age {
                    Some(a) => prop_assert!(a < 86_400),
                    None => prop_assert!(created_age.unwrap() < 86_400),
                }
            }
            if r.status == Unknown {
                prop_assert_eq!(r.reason, REASON_UNKNOWN);
            }
            // Result does not depend on previous unless it is about going False.
            let without = check_backup_ready(
                Some(&f), created_age.map(ago), Some(&d), None, period, DAY, now(),
            );
            if r.status != False {
                prop_assert_eq!(&r, &without);
            }
        }

        #[test]
        fn interval_is_at_least_the_next_gap(
            expr in prop::sample::select(vec![
                "0 */1 * * *", "*/15 * * * *", "0 0 * * *", "0 0,6 * * *", "0 0 * * 1-5",
                "0 0 1 * *", "30 2 * * MON",
            ]),
            start in 1_600_000_000i64..1_900_000_000,
        ) {
            let s = sched(expr);
            let at = Timestamp::from_second(start).unwrap();
            let a = s.next_after(at).unwrap();
            let b = s.next_after(a).unwrap();
            let gap = Duration::try_from(b.duration_since(a)).unwrap();
            let i = full_snapshot_interval(&s, at);
            prop_assert!(i >= gap);
            prop_assert!(i <= Duration::from_secs(31 * 86_400));
        }
    }
}
