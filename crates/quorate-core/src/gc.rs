//! Which snapshots in the backup bucket garbage collection deletes, with etcd-backup-restore's
//! policies (reference notes §4.7), as a pure function of the listing and the time.
//!
//! Snapshots are ordered as a restore reads them: by last revision, a delta before a full
//! snapshot that reaches the same revision (the full covers it), then by creation time. The
//! *newest chain* is the last full snapshot in that order plus every delta after it; it is what
//! a restore uses, and it is never deleted, whatever the policy or clocks say.
//!
//! - **Full snapshots** other than the newest follow the policy: `LimitBased` keeps the newest
//!   `max_backups` (the newest one counts), `Exponential` thins them out by age.
//! - **Deltas** before the newest full snapshot are deleted once older than the delta retention
//!   period, like BR does, *whether or not the full snapshot they extend is kept*: an older
//!   full snapshot is then a restore point at its own revision only. That is BR's behaviour
//!   (its GC deletes older deltas regardless) and what the retention period means; quorate only
//!   adds the newest-chain guarantee on top.
//! - With no full snapshot at all nothing is deleted: deltas without a base are useless for a
//!   restore, but deleting them can never make anything better.
//!
//! Not modelled here (the caller handles them): orphaned upload chunks, immutable objects
//! still under retention lock, `.final` snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use quorate_api::{BackupSpec, GarbageCollectionPolicy};

/// Whether a snapshot is a full database snapshot or a delta of watch events (`Full-…`/`Incr-…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SnapshotKind {
    /// A delta: the events after the previous snapshot, applied on top of a full snapshot.
    /// Ordered before `Full` so a delta reaching the same revision as a full sorts first.
    Incr,
    /// A complete database snapshot; a restore starts from one.
    Full,
}

/// What garbage collection needs to know about one snapshot in the bucket (parsed from its
/// name `<Kind>-<startRev>-<lastRev>-<unixCreated>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Full or delta.
    pub kind: SnapshotKind,
    /// First revision the snapshot holds (0 for a full snapshot).
    pub start_revision: i64,
    /// Last revision the snapshot reaches.
    pub last_revision: i64,
    /// When the snapshot was taken.
    pub created: Timestamp,
}

/// Which older full snapshots survive; mirrors `spec.backup.garbageCollectionPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullRetention {
    /// Keep the newest `max_backups` full snapshots (at least one: the newest is always kept).
    LimitBased {
        /// `spec.backup.maxBackupsLimitBasedGC`.
        max_backups: u32,
    },
    /// Keep every full snapshot of the current hour, the latest per hour for the last 24 h,
    /// the latest per day for the 7 days before today, the latest per week for 4 weeks
    /// before that; delete older ones.
    Exponential,
}

/// The whole garbage-collection policy of one cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcPolicy {
    /// How older full snapshots are thinned out.
    pub full: FullRetention,
    /// Deltas before the newest full snapshot younger than this are kept
    /// (`spec.backup.deltaSnapshotRetentionPeriod`, default 0: none).
    pub delta_retention: Duration,
}

impl GcPolicy {
    /// The policy an `Etcd`'s `spec.backup` asks for, with druid/BR defaults filled in.
    pub fn from_backup_spec(backup: &BackupSpec) -> GcPolicy {
        let full = match backup.garbage_collection_policy() {
            GarbageCollectionPolicy::LimitBased => FullRetention::LimitBased {
                max_backups: backup.max_backups_limit_based_gc(),
            },
            GarbageCollectionPolicy::Exponential => FullRetention::Exponential,
        };
        GcPolicy {
            full,
            delta_retention: backup.delta_snapshot_retention_period(),
        }
    }
}

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;
/// Days before today covered by daily buckets.
const DAILY_DAYS: i64 = 7;
/// Weeks before the daily window covered by weekly buckets.
const WEEKLY_WEEKS: i64 = 4;

/// Where the `Exponential` policy puts a full snapshot, by age.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    /// Created in the current clock hour (or in the future): always kept.
    CurrentHour,
    /// Within the last 24 h: the latest per clock hour (UTC) is kept.
    Hour(i64),
    /// Today or the 7 days before: the latest per UTC day is kept.
    Day(i64),
    /// The 4 weeks before the daily window: the latest per 7-day bucket is kept.
    Week(i64),
    /// Older: deleted.
    Expired,
}

fn tier(created: Timestamp, now: Timestamp) -> Tier {
    let (c, n) = (created.as_second(), now.as_second());
    if c >= n.div_euclid(HOUR) * HOUR {
        return Tier::CurrentHour;
    }
    if c > n - DAY {
        return Tier::Hour(c.div_euclid(HOUR));
    }
    let daily_from = n.div_euclid(DAY) * DAY - DAILY_DAYS * DAY;
    if c >= daily_from {
        return Tier::Day(c.div_euclid(DAY));
    }
    if c >= daily_from - WEEKLY_WEEKS * WEEK {
        return Tier::Week((daily_from - 1 - c).div_euclid(WEEK));
    }
    Tier::Expired
}

/// Indices into `snapshots` (ascending, each once) that garbage collection deletes at `now`.
/// The input may be in any order. See the module docs for the rules and guarantees.
pub fn garbage(snapshots: &[SnapshotInfo], policy: GcPolicy, now: Timestamp) -> Vec<usize> {
    let mut order: Vec<usize> = (0..snapshots.len()).collect();
    order.sort_by_key(|&i| {
        let s = &snapshots[i];
        (s.last_revision, s.kind, s.created, i)
    });
    let is_full = |i: usize| snapshots[i].kind == SnapshotKind::Full;
    let Some(newest) = order.iter().rposition(|&i| is_full(i)) else {
        return Vec::new();
    };
    let older = &order[..newest];
    let mut doomed: Vec<usize> = Vec::new();

    // Deltas before the newest full snapshot, once past the retention period. A retention
    // reaching before the start of time keeps them all.
    let cutoff = SignedDuration::try_from(policy.delta_retention)
        .ok()
        .and_then(|r| now.checked_sub(r).ok());
    if let Some(cutoff) = cutoff {
        doomed.extend(
            older
                .iter()
                .copied()
                .filter(|&i| !is_full(i) && snapshots[i].created < cutoff),
        );
    }

    // Older full snapshots, oldest first.
    let older_fulls: Vec<usize> = older.iter().copied().filter(|&i| is_full(i)).collect();
    match policy.full {
        FullRetention::LimitBased { max_backups } => {
            let keep_older = usize::try_from(max_backups.max(1) - 1).unwrap_or(usize::MAX);
            let delete = older_fulls.len().saturating_sub(keep_older);
            doomed.extend(&older_fulls[..delete]);
        }
        FullRetention::Exponential => {
            // The newest full snapshot takes part in bucketing (so an older one in the same
            // bucket goes), but is kept regardless of its bucket.
            let newest_full = order[newest];
            let mut latest_in_bucket: BTreeMap<Tier, usize> = BTreeMap::new();
            for &i in older_fulls.iter().chain([&newest_full]) {
                latest_in_bucket.insert(tier(snapshots[i].created, now), i);
            }
            for &i in &older_fulls {
                let keep = match tier(snapshots[i].created, now) {
                    Tier::CurrentHour => true,
                    Tier::Expired => false,
                    t => latest_in_bucket.get(&t) == Some(&i),
                };
                if !keep {
                    doomed.push(i);
                }
            }
        }
    }
    doomed.sort_unstable();
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;
    use SnapshotKind::{Full, Incr};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn snap(kind: SnapshotKind, start: i64, last: i64, created: Timestamp) -> SnapshotInfo {
        SnapshotInfo {
            kind,
            start_revision: start,
            last_revision: last,
            created,
        }
    }

    fn limit(max_backups: u32, retention_secs: u64) -> GcPolicy {
        GcPolicy {
            full: FullRetention::LimitBased { max_backups },
            delta_retention: Duration::from_secs(retention_secs),
        }
    }

    fn exponential(retention_secs: u64) -> GcPolicy {
        GcPolicy {
            full: FullRetention::Exponential,
            delta_retention: Duration::from_secs(retention_secs),
        }
    }

    /// Full every `full_every` snapshots, one snapshot every `step` seconds, newest at `now`.
    fn history(n: usize, full_every: usize, step: i64, now: Timestamp) -> Vec<SnapshotInfo> {
        let mut rev = 0;
        (0..n)
            .map(|k| {
                let created = at(now.as_second() - (n - 1 - k) as i64 * step);
                if k % full_every == 0 {
                    rev += 10;
                    snap(Full, 0, rev, created)
                } else {
                    let s = snap(Incr, rev + 1, rev + 10, created);
                    rev += 10;
                    s
                }
            })
            .collect()
    }

    #[test]
    fn nothing_without_a_full_snapshot() {
        let now = ts("2024-06-01T00:00:00Z");
        let deltas = vec![snap(Incr, 1, 5, at(0)), snap(Incr, 6, 9, at(1))];
        assert!(garbage(&deltas, limit(1, 0), now).is_empty());
        assert!(garbage(&[], exponential(0), now).is_empty());
    }

    #[test]
    fn limit_based_keeps_newest_fulls_and_the_newest_chain() {
        let now = ts("2024-06-01T12:00:00Z");
        // F I I F I I F I I  (indices 0..9)
        let snaps = history(9, 3, 600, now);
        let deleted = garbage(&snaps, limit(2, 0), now);
        // Oldest full (0) goes; deltas of older chains (1,2,4,5) go; newest chain 6,7,8 stays.
        assert_eq!(deleted, vec![0, 1, 2, 4, 5]);
        let deleted = garbage(&snaps, limit(7, 0), now);
        assert_eq!(deleted, vec![1, 2, 4, 5]);
        // max_backups 0 is treated as 1: the newest full survives.
        let deleted = garbage(&snaps, limit(0, 0), now);
        assert_eq!(deleted, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn delta_retention_keeps_young_deltas_of_older_chains() {
        let now = ts("2024-06-01T12:00:00Z");
        let snaps = history(9, 3, 600, now);
        // Snapshot k is (8-k)*10 minutes old. Retention 35 min keeps deltas 5 (30 min old).
        let deleted = garbage(&snaps, limit(7, 35 * 60), now);
        assert_eq!(deleted, vec![1, 2, 4]);
        // Exactly at the cutoff is not older than it: kept.
        let deleted = garbage(&snaps, limit(7, 40 * 60), now);
        assert_eq!(deleted, vec![1, 2]);
        // A retention longer than all of time keeps every delta.
        let forever = GcPolicy {
            delta_retention: Duration::MAX,
            ..limit(7, 0)
        };
        assert!(garbage(&snaps, forever, now).is_empty());
    }

    #[test]
    fn input_order_does_not_matter_and_same_revision_delta_belongs_to_older_chain() {
        let now = ts("2024-06-01T12:00:00Z");
        let old = now - SignedDuration::from_hours(2);
        let snaps = vec![
            snap(Incr, 101, 150, old),                               // 0: newest chain
            snap(Full, 0, 100, old),                                 // 1: newest full
            snap(Incr, 51, 100, old - SignedDuration::from_secs(1)), // 2: covered by 1
            snap(Full, 0, 50, old - SignedDuration::from_hours(1)),  // 3
        ];
        assert_eq!(garbage(&snaps, limit(2, 0), now), vec![2]);
        assert_eq!(garbage(&snaps, limit(1, 0), now), vec![2, 3]);
    }

    #[test]
    fn old_delta_after_newest_full_is_kept() {
        let now = ts("2024-06-01T12:00:00Z");
        let snaps = vec![
            snap(Full, 0, 10, now - SignedDuration::from_hours(48)),
            snap(Incr, 11, 20, now - SignedDuration::from_hours(47)),
        ];
        assert!(garbage(&snaps, limit(1, 0), now).is_empty());
        assert!(garbage(&snaps, exponential(0), now).is_empty());
    }

    #[test]
    fn exponential_over_forty_days_of_hourly_fulls() {
        // 10:30 on 2024-06-12; a full snapshot at the top of every hour for 40 days.
        let now = ts("2024-06-12T10:30:00Z");
        let first = ts("2024-05-03T11:00:00Z").as_second();
        let snaps: Vec<SnapshotInfo> = (0..)
            .map(|h| first + h * HOUR)
            .take_while(|&c| c <= now.as_second())
            .enumerate()
            .map(|(k, c)| snap(Full, 0, 1000 + k as i64, at(c)))
            .collect();
        let deleted: BTreeSet<usize> = garbage(&snaps, exponential(0), now).into_iter().collect();
        let kept: Vec<String> = (0..snaps.len())
            .filter(|i| !deleted.contains(i))
            .map(|i| snaps[i].created.to_string())
            .collect();
        let mut expected: Vec<String> = Vec::new();
        // 4 weekly buckets before 2024-06-05: the latest of each 7-day bucket.
        for day in ["05-14", "05-21", "05-28", "06-04"] {
            expected.push(format!("2024-{day}T23:00:00Z"));
        }
        // Daily: 06-05 .. 06-11, latest of each day (06-11 up to 10:00, the rest is hourly).
        for d in 5..=10 {
            expected.push(format!("2024-06-{d:02}T23:00:00Z"));
        }
        expected.push("2024-06-11T10:00:00Z".into());
        // Hourly: 06-11 11:00 .. 06-12 09:00, then the current hour 10:00.
        for h in 11..=23 {
            expected.push(format!("2024-06-11T{h:02}:00:00Z"));
        }
        for h in 0..=10 {
            expected.push(format!("2024-06-12T{h:02}:00:00Z"));
        }
        assert_eq!(kept, expected);
    }

    #[test]
    fn exponential_keeps_all_of_the_current_hour_and_latest_per_hour() {
        let now = ts("2024-06-12T10:30:00Z");
        let snaps = vec![
            snap(Full, 0, 1, ts("2024-06-12T08:05:00Z")), // 0: not latest in 08
            snap(Full, 0, 2, ts("2024-06-12T08:55:00Z")), // 1: latest in 08
            snap(Full, 0, 3, ts("2024-06-12T10:01:00Z")), // 2: current hour
            snap(Full, 0, 4, ts("2024-06-12T10:20:00Z")), // 3: current hour
            snap(Full, 0, 5, ts("2024-06-12T10:29:00Z")), // 4: newest
            snap(Full, 0, 0, ts("2024-04-01T00:00:00Z")), // 5: expired
        ];
        assert_eq!(garbage(&snaps, exponential(0), now), vec![0, 5]);
    }

    #[test]
    fn exponential_older_full_in_the_newest_fulls_bucket_goes() {
        let now = ts("2024-06-12T10:30:00Z");
        let snaps = vec![
            snap(Full, 0, 1, ts("2024-06-12T08:05:00Z")),
            snap(Full, 0, 2, ts("2024-06-12T08:55:00Z")), // newest, same hour
        ];
        assert_eq!(garbage(&snaps, exponential(0), now), vec![0]);
        // An expired newest full is still kept.
        let snaps = vec![snap(Full, 0, 1, ts("2023-01-01T00:00:00Z"))];
        assert!(garbage(&snaps, exponential(0), now).is_empty());
    }

    #[test]
    fn policy_from_spec() {
        let mut b = BackupSpec::default();
        assert_eq!(
            GcPolicy::from_backup_spec(&b),
            GcPolicy {
                full: FullRetention::LimitBased { max_backups: 7 },
                delta_retention: Duration::ZERO
            }
        );
        b.garbage_collection_policy = Some("Exponential".into());
        assert_eq!(
            GcPolicy::from_backup_spec(&b).full,
            FullRetention::Exponential
        );
    }

    // ---- properties ----

    fn snapshots_strategy() -> impl Strategy<Value = (Vec<SnapshotInfo>, Timestamp)> {
        // Steps forward in revision and time; ~1/4 full snapshots. Time steps up to 2 days so
        // histories reach past the exponential windows.
        let now = 1_717_000_000i64;
        prop::collection::vec((prop::bool::weighted(0.25), 1i64..50, 0i64..2 * DAY), 0..60)
            .prop_flat_map(move |steps| {
                let mut rev = 0;
                let total: i64 = steps.iter().map(|(_, _, dt)| dt).sum();
                let mut t = now - total;
                let snaps: Vec<SnapshotInfo> = steps
                    .iter()
                    .map(|&(is_full, dr, dt)| {
                        t += dt;
                        let start = rev + 1;
                        rev += dr;
                        if is_full {
                            snap(Full, 0, rev, at(t))
                        } else {
                            snap(Incr, start, rev, at(t))
                        }
                    })
                    .collect();
                (Just(snaps).prop_shuffle(), 0i64..2 * HOUR)
            })
            .prop_map(move |(snaps, late)| (snaps, at(now + late)))
    }

    fn policy_strategy() -> impl Strategy<Value = GcPolicy> {
        (
            prop_oneof![
                Just(FullRetention::Exponential),
                (0u32..10).prop_map(|max_backups| FullRetention::LimitBased { max_backups }),
            ],
            prop_oneof![Just(0u64), 0u64..(3 * DAY as u64)],
        )
            .prop_map(|(full, r)| GcPolicy {
                full,
                delta_retention: Duration::from_secs(r),
            })
    }

    fn sorted(snaps: &[SnapshotInfo]) -> Vec<usize> {
        let mut o: Vec<usize> = (0..snaps.len()).collect();
        o.sort_by_key(|&i| (snaps[i].last_revision, snaps[i].kind, snaps[i].created, i));
        o
    }

    proptest! {
        #[test]
        fn newest_chain_survives_and_output_is_well_formed(
            (snaps, now) in snapshots_strategy(),
            policy in policy_strategy(),
        ) {
            let deleted = garbage(&snaps, policy, now);
            prop_assert!(deleted.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(deleted.iter().all(|&i| i < snaps.len()));
            let order = sorted(&snaps);
            match order.iter().rposition(|&i| snaps[i].kind == Full) {
                None => prop_assert!(deleted.is_empty()),
                Some(p) => {
                    for &i in &order[p..] {
                        prop_assert!(!deleted.contains(&i), "newest chain member {} deleted", i);
                    }
                    // Every delta before it goes exactly when older than the retention.
                    let cutoff = now - SignedDuration::try_from(policy.delta_retention).unwrap();
                    for &i in &order[..p] {
                        if snaps[i].kind == Incr {
                            prop_assert_eq!(deleted.contains(&i), snaps[i].created < cutoff);
                        }
                    }
                }
            }
        }

        #[test]
        fn limit_based_keeps_exactly_the_newest_fulls(
            (snaps, now) in snapshots_strategy(),
            max_backups in 0u32..10,
        ) {
            let deleted = garbage(&snaps, limit(max_backups, 0), now);
            let fulls: Vec<usize> =
                sorted(&snaps).into_iter().filter(|&i| snaps[i].kind == Full).collect();
            let keep = fulls.len().min(max_backups.max(1) as usize);
            for (k, i) in fulls.iter().enumerate() {
                prop_assert_eq!(deleted.contains(i), k < fulls.len() - keep);
            }
        }

        #[test]
        fn exponential_bounds(
            (snaps, now) in snapshots_strategy(),
        ) {
            let deleted = garbage(&snaps, exponential(0), now);
            let hour_start = now.as_second().div_euclid(HOUR) * HOUR;
            let newest = sorted(&snaps).into_iter().rfind(|&i| snaps[i].kind == Full);
            let mut kept_hours = BTreeSet::new();
            for (i, s) in snaps.iter().enumerate().filter(|(_, s)| s.kind == Full) {
                let c = s.created.as_second();
                if c >= hour_start {
                    prop_assert!(!deleted.contains(&i));
                }
                // Beyond today + 7 days + 4 weeks only the newest may survive.
                if c < hour_start - 37 * DAY && Some(i) != newest {
                    prop_assert!(deleted.contains(&i));
                }
                // At most one kept per clock hour within the last 24 h, outside the current hour.
                if !deleted.contains(&i) && c < hour_start && c > now.as_second() - DAY {
                    prop_assert!(kept_hours.insert(c.div_euclid(HOUR)), "two kept in one hour");
                }
            }
            // Never more than current hour + 24 + 8 + 4 buckets (+ the newest).
            let kept_fulls = snaps.iter().enumerate()
                .filter(|(i, s)| s.kind == Full && !deleted.contains(i)
                    && s.created.as_second() < hour_start)
                .count();
            prop_assert!(kept_fulls <= 24 + 8 + 4 + 1, "kept {}", kept_fulls);
        }

        #[test]
        fn running_again_at_the_same_time_deletes_nothing_more(
            (snaps, now) in snapshots_strategy(),
            policy in policy_strategy(),
        ) {
            let deleted: BTreeSet<usize> = garbage(&snaps, policy, now).into_iter().collect();
            let rest: Vec<SnapshotInfo> = snaps.iter().enumerate()
                .filter(|(i, _)| !deleted.contains(i))
                .map(|(_, s)| *s)
                .collect();
            prop_assert!(garbage(&rest, policy, now).is_empty());
        }
    }
}
