//! Which snapshots a copy of backups takes (druid's `EtcdCopyBackupsTask`, `quorate backups
//! copy`), as a pure function of the source's listing and the time.
//!
//! A *backup* is a full snapshot with the deltas after it up to the next full snapshot: the
//! unit a restore needs. `maxBackups` keeps the newest that many backups, `maxBackupAge` (in
//! days) those whose full snapshot is younger; both unset copies everything, deltas without a
//! full snapshot before them included. Snapshots the target already has are not copied again.

use jiff::{SignedDuration, Timestamp};

use crate::gc::{SnapshotInfo, SnapshotKind};

/// Limits of a copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyLimits {
    /// Copy at most this many backups, the newest first.
    pub max_backups: Option<u32>,
    /// Copy only backups whose full snapshot is at most this many days old.
    pub max_backup_age_days: Option<u32>,
}

/// The indices into `source` (ordered as a restore reads them) of the snapshots to copy, in
/// that order; `present(i)` says whether the target already holds snapshot `i`.
pub fn snapshots_to_copy(
    source: &[SnapshotInfo],
    limits: CopyLimits,
    now: Timestamp,
    present: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let limited = limits.max_backups.is_some() || limits.max_backup_age_days.is_some();
    // Backups: (index of the full snapshot, indices of its deltas).
    let mut backups: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut loose = Vec::new();
    for (i, s) in source.iter().enumerate() {
        match (s.kind, backups.last_mut()) {
            (SnapshotKind::Full, _) => backups.push((i, Vec::new())),
            (SnapshotKind::Incr, Some((_, deltas))) => deltas.push(i),
            (SnapshotKind::Incr, None) => loose.push(i),
        }
    }
    let young = |i: usize| {
        limits.max_backup_age_days.is_none_or(|days| {
            let age = now.duration_since(source[i].created);
            age <= SignedDuration::from_hours(24 * i64::from(days))
        })
    };
    let mut chosen: Vec<usize> = if limited { Vec::new() } else { loose };
    let keep = limits.max_backups.map_or(usize::MAX, |n| n as usize);
    let picked: Vec<&(usize, Vec<usize>)> = backups
        .iter()
        .rev()
        .filter(|(full, _)| young(*full))
        .take(keep)
        .collect();
    for (full, deltas) in picked.into_iter().rev() {
        chosen.push(*full);
        chosen.extend(deltas);
    }
    chosen.sort_unstable();
    chosen.retain(|i| !present(*i));
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(days_ago: i64) -> Timestamp {
        let now: Timestamp = "2026-11-26T12:00:00Z".parse().unwrap();
        now - SignedDuration::from_hours(24 * days_ago)
    }

    fn snap(kind: SnapshotKind, start: i64, last: i64, days_ago: i64) -> SnapshotInfo {
        SnapshotInfo {
            kind,
            start_revision: start,
            last_revision: last,
            created: at(days_ago),
        }
    }

    /// An orphan delta, then three backups: full@10 (5 days old) + 1 delta, full@20 (2 days)
    /// + 2 deltas, full@30 (today) + 1 delta.
    fn listing() -> Vec<SnapshotInfo> {
        use SnapshotKind::*;
        vec![
            snap(Incr, 1, 5, 6),
            snap(Full, 0, 10, 5),
            snap(Incr, 11, 15, 5),
            snap(Full, 0, 20, 2),
            snap(Incr, 21, 22, 2),
            snap(Incr, 23, 25, 1),
            snap(Full, 0, 30, 0),
            snap(Incr, 31, 33, 0),
        ]
    }

    #[test]
    fn without_limits_everything_is_copied_that_the_target_lacks() {
        let all = snapshots_to_copy(&listing(), CopyLimits::default(), at(0), |_| false);
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        let rest = snapshots_to_copy(&listing(), CopyLimits::default(), at(0), |i| i < 4);
        assert_eq!(rest, vec![4, 5, 6, 7]);
    }

    #[test]
    fn max_backups_keeps_the_newest_full_snapshots_with_their_deltas() {
        let limits = CopyLimits {
            max_backups: Some(2),
            ..CopyLimits::default()
        };
        assert_eq!(
            snapshots_to_copy(&listing(), limits, at(0), |_| false),
            vec![3, 4, 5, 6, 7]
        );
    }

    #[test]
    fn max_backup_age_goes_by_the_full_snapshots_age() {
        let limits = CopyLimits {
            max_backup_age_days: Some(3),
            ..CopyLimits::default()
        };
        assert_eq!(
            snapshots_to_copy(&listing(), limits, at(0), |_| false),
            vec![3, 4, 5, 6, 7]
        );
        let both = CopyLimits {
            max_backups: Some(1),
            max_backup_age_days: Some(3),
        };
        assert_eq!(
            snapshots_to_copy(&listing(), both, at(0), |_| false),
            vec![6, 7]
        );
    }
}
