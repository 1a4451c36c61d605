//! Which snapshots a restore needs: the newest full snapshot at or before the target and the
//! chain of delta snapshots after it, in the order they must be applied.
//!
//! Pure: the listing and the target go in, the plan comes out. The rules, and why:
//!
//! - Deltas may overlap. Two backup leaders can both have written deltas for the same
//!   revisions after a leader change (etcd-backup-restore issue #1043), and the first delta may
//!   begin exactly at the full snapshot's revision (#844). etcd's history is linear, so
//!   overlapping objects hold the same events; the replay simply applies only revisions above
//!   the current head. The plan therefore accepts any delta that starts at or before
//!   `head + 1` and reaches beyond `head`, and among those always takes the one reaching
//!   furthest, so the fewest objects are downloaded.
//! - A real gap (no delta covers `head + 1`) cannot be bridged: the restore would silently miss
//!   writes. It is an error naming the objects on both sides.
//! - Times are compared at the second precision of the object names; the replay cuts the last
//!   delta exactly at the events' own timestamps.

use std::fmt;

use jiff::Timestamp;
use thiserror::Error;

use crate::layout::{SnapshotKind, SnapshotName};

/// How far a restore goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreTarget {
    /// Everything the backups hold.
    Latest,
    /// The state right after this revision, exactly.
    ToRevision(i64),
    /// The state after the last event captured at or before this instant.
    ToTime(Timestamp),
}

impl fmt::Display for RestoreTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreTarget::Latest => f.write_str("the latest backed-up revision"),
            RestoreTarget::ToRevision(rev) => write!(f, "revision {rev}"),
            RestoreTarget::ToTime(t) => write!(f, "time {t}"),
        }
    }
}

/// Anything in a snapshot listing that carries a [`SnapshotName`] (the bare name, or a stored
/// object with its path and size).
pub trait Listed {
    /// The snapshot's name.
    fn snapshot_name(&self) -> &SnapshotName;
}

impl Listed for SnapshotName {
    fn snapshot_name(&self) -> &SnapshotName {
        self
    }
}

impl Listed for crate::store::StoredSnapshot {
    fn snapshot_name(&self) -> &SnapshotName {
        &self.name
    }
}

impl<T: Listed + ?Sized> Listed for &T {
    fn snapshot_name(&self) -> &SnapshotName {
        (**self).snapshot_name()
    }
}

/// One delta snapshot to apply.
#[derive(Debug, PartialEq, Eq)]
pub struct PlannedDelta<'a, T> {
    /// The object.
    pub snapshot: &'a T,
    /// The head revision before this delta: its events at or below it are already applied
    /// (overlap) and must be skipped.
    pub skip_through: i64,
}

/// What to restore, in order.
#[derive(Debug, PartialEq, Eq)]
pub struct RestorePlan<'a, T> {
    /// The full snapshot to start from.
    pub full: &'a T,
    /// The deltas to apply after it, in order.
    pub deltas: Vec<PlannedDelta<'a, T>>,
    /// The target the plan was made for.
    pub target: RestoreTarget,
    /// The last revision the chosen objects reach (the restore may stop earlier at the target).
    pub reaches_revision: i64,
    /// Full snapshots left out because a restore found them past the target
    /// ([`replan_past_full`]); the plan treats them as not listed.
    pub passed_over: Vec<String>,
}

impl<T> RestorePlan<'_, T> {
    /// The revision the restore will end at when the target is a revision, else the revision
    /// the chosen objects reach.
    pub fn expected_revision(&self) -> i64 {
        match self.target {
            RestoreTarget::ToRevision(rev) => rev.min(self.reaches_revision),
            _ => self.reaches_revision,
        }
    }
}

/// Added to a revision bump beyond the newest revision the bucket records: room for writes
/// the source acknowledged that never reached the bucket (the figure etcd's and Kubernetes'
/// restore guides use).
pub const BUMP_MARGIN: u64 = 1_000_000_000;

/// The largest revision bump a restore makes (2⁴⁰, about 10¹²: a year and more of 10,000
/// revisions a second beyond the full snapshot, plus [`BUMP_MARGIN`]). A larger one comes from a
/// name no etcd wrote and is refused rather than pushing the restored revision towards the end
/// of etcd's range.
pub const MAX_BUMP: u64 = 1 << 40;

/// How far to raise the restored revision (and mark it compacted) for `plan`: `None` when the
/// restore ends at the newest state the bucket holds, else past every revision the bucket has
/// seen plus [`BUMP_MARGIN`], so no revision a client of the source saw is handed out again
/// with other content. A time target counts as older unless the plan reaches the newest
/// revision and the newest object was written by then (its events are all before that time).
/// Checked arithmetic: a bump above [`MAX_BUMP`] (a hostile or damaged name) is an error.
pub fn revision_bump<T: Listed>(
    plan: &RestorePlan<'_, T>,
    listed: &[T],
) -> Result<Option<u64>, PlanError> {
    let Some(newest_name) = listed
        .iter()
        .map(|s| s.snapshot_name())
        .filter(|n| !plan.passed_over.contains(&n.file_name()))
        .max_by_key(|n| n.last_revision)
    else {
        return Ok(None);
    };
    let newest = newest_name.last_revision;
    let planned_last = plan
        .deltas
        .last()
        .map_or(plan.full, |d| d.snapshot)
        .snapshot_name();
    let older = match plan.target {
        RestoreTarget::Latest => false,
        RestoreTarget::ToRevision(rev) => rev < newest,
        RestoreTarget::ToTime(t) => {
            planned_last.last_revision < newest || planned_last.created_unix > t.as_second()
        }
    };
    if !older {
        return Ok(None);
    }
    let full_revision = plan.full.snapshot_name().last_revision;
    let bump = u64::try_from(newest.saturating_sub(full_revision).max(0))
        .ok()
        .and_then(|ahead| ahead.checked_add(BUMP_MARGIN))
        .filter(|bump| *bump <= MAX_BUMP)
        .and_then(|bump| {
            // The restored head must stay a revision too.
            full_revision
                .checked_add(i64::try_from(bump).ok()?)
                .map(|_| bump)
        });
    bump.map(Some).ok_or_else(|| PlanError::BumpTooLarge {
        newest: newest_name.file_name(),
        newest_revision: newest,
        full_revision,
    })
}

/// Why no restore plan exists.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlanError {
    /// No full snapshot old enough.
    #[error(
        "no full snapshot at or before {target} among the {listed} listed snapshots{oldest}; \
         choose a later target or check the backup bucket and prefix"
    )]
    NoFullSnapshot {
        /// The target.
        target: RestoreTarget,
        /// How many snapshots were listed.
        listed: usize,
        /// ", the oldest full snapshot is <name>", or that there is none.
        oldest: String,
    },
    /// Revisions no listed delta covers.
    #[error(
        "revisions {missing_from}..={missing_to} are missing from the backups: no delta snapshot \
         covers them between {before} and {after}; restore to revision {reachable} at most \
         (ToRevision) or recover the missing delta snapshot"
    )]
    Gap {
        /// The object that ends right before the gap (a full or a delta snapshot).
        before: String,
        /// The first object after the gap.
        after: String,
        /// First missing revision.
        missing_from: i64,
        /// Last missing revision.
        missing_to: i64,
        /// The last revision that can be restored exactly.
        reachable: i64,
    },
    /// The target revision is newer than anything backed up.
    #[error(
        "target revision {target} is beyond the backups: they end at revision {reachable} \
         ({last}); restore to revision {reachable} or to the latest state instead"
    )]
    TargetBeyondBackups {
        /// The requested revision.
        target: i64,
        /// The last revision the backups reach.
        reachable: i64,
        /// The object reaching it.
        last: String,
    },
    /// The revision bump the newest name asks for is beyond [`MAX_BUMP`].
    #[error(
        "object {newest} says the bucket reached revision {newest_revision}, so this restore \
         (from revision {full_revision}) would raise the revision by more than {MAX_BUMP}; no \
         etcd writes that far: delete or move the object if it is not a real backup, or restore \
         the latest state"
    )]
    BumpTooLarge {
        /// The object with the newest revision.
        newest: String,
        /// Its last revision.
        newest_revision: i64,
        /// The full snapshot's revision.
        full_revision: i64,
    },
    /// A negative revision as target.
    #[error("target revision {0} is not a revision; etcd revisions start at 1")]
    InvalidTarget(i64),
}

/// Plans a restore of `target` from `listing` (in any order; other kinds of objects are
/// ignored by kind).
pub fn plan_restore<T: Listed>(
    listing: &[T],
    target: RestoreTarget,
) -> Result<RestorePlan<'_, T>, PlanError> {
    plan_among(&listing.iter().collect::<Vec<_>>(), target, Vec::new())
}

/// Whether a full snapshot that, once read, holds revision `revision` can start a restore to
/// `target`. Its name records the revision read just before it was taken, and it may hold a
/// little more, so a plan's full snapshot can turn out to be past a revision target; the
/// restore then stops before changing anything and [`replan_past_full`] says what comes next.
pub fn full_fits(target: RestoreTarget, revision: i64) -> bool {
    !matches!(target, RestoreTarget::ToRevision(rev) if revision > rev)
}

/// The plan after a restore of `plan` found its full snapshot past the target ([`full_fits`]):
/// the same target planned without that full snapshot (nor those passed over before), i.e.
/// from an older full snapshot and more deltas, so every target the bucket covers can be
/// restored. Fails like [`plan_restore`] when no older full snapshot serves.
pub fn replan_past_full<'a, T: Listed>(
    listing: &'a [T],
    plan: &RestorePlan<'a, T>,
) -> Result<RestorePlan<'a, T>, PlanError> {
    let mut passed_over = plan.passed_over.clone();
    passed_over.push(plan.full.snapshot_name().file_name());
    let kept: Vec<&T> = listing
        .iter()
        .filter(|s| !passed_over.contains(&s.snapshot_name().file_name()))
        .collect();
    plan_among(&kept, plan.target, passed_over)
}

/// [`plan_restore`] over the snapshots still in play.
fn plan_among<'a, T: Listed>(
    listing: &[&'a T],
    target: RestoreTarget,
    passed_over: Vec<String>,
) -> Result<RestorePlan<'a, T>, PlanError> {
    if let RestoreTarget::ToRevision(rev) = target
        && rev < 1
    {
        return Err(PlanError::InvalidTarget(rev));
    }
    let full = choose_full(listing, target)?;
    let full_name = full.snapshot_name();
    let mut head = full_name.last_revision;
    let mut head_object = full_name.file_name();
    let mut deltas = Vec::new();
    let mut remaining: Vec<&T> = listing
        .iter()
        .copied()
        .filter(|s| {
            let n = s.snapshot_name();
            n.kind == SnapshotKind::Incr && n.last_revision > head
        })
        .collect();
    loop {
        if reached(target, head) {
            break;
        }
        remaining.retain(|s| s.snapshot_name().last_revision > head);
        // The delta continuing the chain that reaches furthest (ties: the older object).
        let next = remaining
            .iter()
            .copied()
            .filter(|s| s.snapshot_name().start_revision <= head.saturating_add(1))
            .max_by(|a, b| {
                let (a, b) = (a.snapshot_name(), b.snapshot_name());
                a.last_revision
                    .cmp(&b.last_revision)
                    .then(b.created_unix.cmp(&a.created_unix))
            });
        let Some(next) = next else {
            if let Some(after) = remaining
                .iter()
                .map(|s| s.snapshot_name())
                .min_by_key(|n| (n.start_revision, n.created_unix))
            {
                return Err(PlanError::Gap {
                    before: head_object,
                    after: after.file_name(),
                    missing_from: head.saturating_add(1),
                    missing_to: after.start_revision - 1,
                    reachable: head,
                });
            }
            break;
        };
        let name = next.snapshot_name();
        deltas.push(PlannedDelta {
            snapshot: next,
            skip_through: head,
        });
        head = name.last_revision;
        head_object = name.file_name();
        if let RestoreTarget::ToTime(t) = target
            && name.created_unix > t.as_second()
        {
            // Written after the target time: it holds the last events at or before the target
            // (the replay cuts it at the events' times); later deltas hold only later events.
            break;
        }
    }
    if let RestoreTarget::ToRevision(rev) = target
        && head < rev
    {
        return Err(PlanError::TargetBeyondBackups {
            target: rev,
            reachable: head,
            last: head_object,
        });
    }
    Ok(RestorePlan {
        full,
        deltas,
        target,
        reaches_revision: head,
        passed_over,
    })
}

/// The newest full snapshot at or before the target.
fn choose_full<'a, T: Listed>(
    listing: &[&'a T],
    target: RestoreTarget,
) -> Result<&'a T, PlanError> {
    let fulls = listing
        .iter()
        .copied()
        .filter(|s| s.snapshot_name().kind == SnapshotKind::Full);
    let eligible = |n: &SnapshotName| match target {
        RestoreTarget::Latest => true,
        RestoreTarget::ToRevision(rev) => n.last_revision <= rev,
        RestoreTarget::ToTime(t) => n.created_unix <= t.as_second(),
    };
    fulls
        .clone()
        .filter(|s| eligible(s.snapshot_name()))
        .max_by_key(|s| {
            let n = s.snapshot_name();
            (n.last_revision, n.created_unix)
        })
        .ok_or_else(|| PlanError::NoFullSnapshot {
            target,
            listed: listing.len(),
            oldest: fulls
                .min_by_key(|s| {
                    let n = s.snapshot_name();
                    (n.last_revision, n.created_unix)
                })
                .map(|s| {
                    format!(
                        ", the oldest full snapshot is {}",
                        s.snapshot_name().file_name()
                    )
                })
                .unwrap_or_else(|| ", and none of them is a full snapshot".to_string()),
        })
}

fn reached(target: RestoreTarget, head: i64) -> bool {
    matches!(target, RestoreTarget::ToRevision(rev) if head >= rev)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(last: i64, created: i64) -> SnapshotName {
        SnapshotName::full(last, created, None)
    }

    fn incr(start: i64, last: i64, created: i64) -> SnapshotName {
        SnapshotName::incr(start, last, created, None)
    }

    /// The plan as (full name, [(delta name, skip_through)]).
    fn summary(plan: &RestorePlan<'_, SnapshotName>) -> (String, Vec<(String, i64)>) {
        (
            plan.full.file_name(),
            plan.deltas
                .iter()
                .map(|d| (d.snapshot.file_name(), d.skip_through))
                .collect(),
        )
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn a_huge_revision_in_a_name_is_refused_not_wrapped() {
        // Names as a hostile writer could list them (parsing refuses them; the plan must not
        // rely on it).
        let listing = vec![full(10, 1000), incr(11, 20, 1020), incr(21, i64::MAX, 1030)];
        let plan = plan_restore(&listing, RestoreTarget::ToRevision(15)).unwrap();
        let err = revision_bump(&plan, &listing).unwrap_err();
        assert!(
            err.to_string()
                .contains("Incr-00000021-9223372036854775807-1030")
                && err.to_string().contains("delete or move the object"),
            "{err}"
        );
        // The chain continues past i64::MAX - 1 without overflow and ends there.
        let top = vec![full(i64::MAX, 1000), incr(i64::MAX, i64::MAX, 1001)];
        let plan = plan_restore(&top, RestoreTarget::Latest).unwrap();
        assert_eq!(plan.reaches_revision, i64::MAX);
        assert_eq!(revision_bump(&plan, &top).unwrap(), None);
        // A bump just within the bound is made, one beyond is refused.
        let within = MAX_BUMP - BUMP_MARGIN;
        let edge = vec![full(10, 1000), incr(11, 10 + within as i64, 1020)];
        let plan = plan_restore(&edge, RestoreTarget::ToRevision(10)).unwrap();
        assert_eq!(revision_bump(&plan, &edge).unwrap(), Some(MAX_BUMP));
        let beyond = vec![full(10, 1000), incr(11, 11 + within as i64, 1020)];
        let plan = plan_restore(&beyond, RestoreTarget::ToRevision(10)).unwrap();
        assert!(revision_bump(&plan, &beyond).is_err());
    }

    #[test]
    fn only_a_restore_older_than_the_bucket_raises_the_revision() {
        let listing = vec![full(10, 1000), incr(11, 20, 1020), incr(21, 30, 1030)];
        let bump =
            |target| revision_bump(&plan_restore(&listing, target).unwrap(), &listing).unwrap();
        assert_eq!(bump(RestoreTarget::Latest), None);
        assert_eq!(bump(RestoreTarget::ToRevision(30)), None);
        assert_eq!(bump(RestoreTarget::ToRevision(25)), Some(20 + BUMP_MARGIN));
        assert_eq!(bump(RestoreTarget::ToRevision(10)), Some(20 + BUMP_MARGIN));
        // A time after the newest object was written holds everything; one before it cuts.
        assert_eq!(bump(RestoreTarget::ToTime(at(1030))), None);
        assert_eq!(
            bump(RestoreTarget::ToTime(at(1029))),
            Some(20 + BUMP_MARGIN)
        );
        assert_eq!(
            bump(RestoreTarget::ToTime(at(1021))),
            Some(20 + BUMP_MARGIN)
        );
    }

    #[test]
    fn latest_takes_the_newest_full_and_every_later_delta_in_order() {
        let listing = vec![
            incr(31, 40, 1040),
            full(10, 1000),
            incr(11, 20, 1020),
            full(20, 1021),
            incr(21, 30, 1030),
        ];
        let plan = plan_restore(&listing, RestoreTarget::Latest).unwrap();
        assert_eq!(
            summary(&plan),
            (
                full(20, 1021).file_name(),
                vec![
                    (incr(21, 30, 1030).file_name(), 20),
                    (incr(31, 40, 1040).file_name(), 30),
                ]
            )
        );
        assert_eq!(plan.reaches_revision, 40);
        assert_eq!(plan.expected_revision(), 40);
    }

    #[test]
    fn a_full_snapshot_alone_is_a_plan() {
        let listing = vec![incr(5, 9, 900), full(12, 1000)];
        let plan = plan_restore(&listing, RestoreTarget::Latest).unwrap();
        assert_eq!(summary(&plan), (full(12, 1000).file_name(), vec![]));
        assert_eq!(plan.reaches_revision, 12);
    }

    #[test]
    fn to_revision_takes_the_newest_full_at_or_below_and_stops_at_the_delta_holding_it() {
        let listing = vec![
            full(10, 1000),
            incr(11, 20, 1020),
            incr(21, 30, 1030),
            full(30, 1031),
            incr(31, 40, 1040),
        ];
        let plan = plan_restore(&listing, RestoreTarget::ToRevision(25)).unwrap();
        assert_eq!(
            summary(&plan),
            (
                full(10, 1000).file_name(),
                vec![
                    (incr(11, 20, 1020).file_name(), 10),
                    (incr(21, 30, 1030).file_name(), 20)
                ]
            )
        );
        assert_eq!(plan.expected_revision(), 25);

        // Exactly at a full snapshot's revision: that full, nothing else.
        let plan = plan_restore(&listing, RestoreTarget::ToRevision(30)).unwrap();
        assert_eq!(summary(&plan), (full(30, 1031).file_name(), vec![]));
        // Exactly at a delta's last revision: no further delta.
        let plan = plan_restore(&listing, RestoreTarget::ToRevision(20)).unwrap();
        assert_eq!(plan.deltas.len(), 1);
    }

    #[test]
    fn to_revision_beyond_the_backups_is_an_error() {
        let listing = vec![full(10, 1000), incr(11, 20, 1020)];
        assert_eq!(
            plan_restore(&listing, RestoreTarget::ToRevision(21)),
            Err(PlanError::TargetBeyondBackups {
                target: 21,
                reachable: 20,
                last: incr(11, 20, 1020).file_name(),
            })
        );
        assert_eq!(
            plan_restore(&listing, RestoreTarget::ToRevision(0)),
            Err(PlanError::InvalidTarget(0))
        );
    }

    #[test]
    fn to_revision_before_every_full_is_an_error_naming_the_oldest() {
        let listing = vec![full(10, 1000), incr(11, 20, 1020)];
        let err = plan_restore(&listing, RestoreTarget::ToRevision(9)).unwrap_err();
        assert!(matches!(err, PlanError::NoFullSnapshot { listed: 2, .. }));
        assert!(
            err.to_string().contains(&full(10, 1000).file_name()),
            "{err}"
        );
        let only_deltas = vec![incr(11, 20, 1020)];
        let err = plan_restore(&only_deltas, RestoreTarget::Latest).unwrap_err();
        assert!(err.to_string().contains("none of them is a full"), "{err}");
    }

    #[test]
    fn to_time_takes_the_newest_full_created_by_then_and_the_first_delta_written_after() {
        let listing = vec![
            full(10, 1000),
            incr(11, 20, 1020),
            incr(21, 30, 1030),
            incr(31, 40, 1040),
            full(40, 1041),
        ];
        // 1025 lies inside the third delta's span: its events up to 1025 are wanted.
        let plan = plan_restore(&listing, RestoreTarget::ToTime(at(1025))).unwrap();
        assert_eq!(
            summary(&plan),
            (
                full(10, 1000).file_name(),
                vec![
                    (incr(11, 20, 1020).file_name(), 10),
                    (incr(21, 30, 1030).file_name(), 20),
                ]
            )
        );
        // Exactly a delta's creation second: it may still be followed by events in that
        // second, so the next delta is included too.
        let plan = plan_restore(&listing, RestoreTarget::ToTime(at(1030))).unwrap();
        assert_eq!(plan.deltas.len(), 3);
        // After the last full snapshot was taken: that full.
        let plan = plan_restore(&listing, RestoreTarget::ToTime(at(2000))).unwrap();
        assert_eq!(summary(&plan), (full(40, 1041).file_name(), vec![]));
        // Before every full snapshot.
        assert!(matches!(
            plan_restore(&listing, RestoreTarget::ToTime(at(999))),
            Err(PlanError::NoFullSnapshot { .. })
        ));
    }

    #[test]
    fn delta_starting_at_the_full_revision_is_applied_above_it_br844() {
        // The full snapshot was taken at 20, the delta's first event is revision 20 too.
        let listing = vec![full(20, 1000), incr(20, 30, 1010), incr(31, 35, 1020)];
        let plan = plan_restore(&listing, RestoreTarget::Latest).unwrap();
        assert_eq!(
            summary(&plan),
            (
                full(20, 1000).file_name(),
                vec![
                    (incr(20, 30, 1010).file_name(), 20),
                    (incr(31, 35, 1020).file_name(), 30),
                ]
            )
        );
    }

    #[test]
    fn overlapping_deltas_of_two_leaders_are_chained_by_furthest_reach_br1043() {
        // Old and new backup leader both wrote deltas from revision 11; the new leader's reach
        // further. Each object is applied only above the head it finds.
        let listing = vec![
            full(10, 1000),
            incr(11, 15, 1005), // old leader
            incr(11, 18, 1008), // new leader, same start
            incr(16, 25, 1010), // old leader, overlaps 16..=18
            incr(19, 22, 1011), // new leader, inside the previous one
            incr(26, 30, 1020), // new leader
            incr(5, 9, 990),    // older than the full: ignored
        ];
        let plan = plan_restore(&listing, RestoreTarget::Latest).unwrap();
        assert_eq!(
            summary(&plan),
            (
                full(10, 1000).file_name(),
                vec![
                    (incr(11, 18, 1008).file_name(), 10),
                    (incr(16, 25, 1010).file_name(), 18),
                    (incr(26, 30, 1020).file_name(), 25),
                ]
            )
        );
        assert_eq!(plan.reaches_revision, 30);
    }

    #[test]
    fn identical_duplicate_deltas_are_applied_once() {
        let listing = vec![full(10, 1000), incr(11, 20, 1021), incr(11, 20, 1020)];
        let plan = plan_restore(&listing, RestoreTarget::Latest).unwrap();
        assert_eq!(
            summary(&plan).1,
            vec![(incr(11, 20, 1020).file_name(), 10)],
            "ties go to the older object"
        );
    }

    #[test]
    fn a_gap_names_the_objects_on_both_sides() {
        let listing = vec![
            full(10, 1000),
            incr(11, 20, 1020),
            incr(24, 30, 1030),
            incr(31, 40, 1040),
        ];
        let err = plan_restore(&listing, RestoreTarget::Latest).unwrap_err();
        assert_eq!(
            err,
            PlanError::Gap {
                before: incr(11, 20, 1020).file_name(),
                after: incr(24, 30, 1030).file_name(),
                missing_from: 21,
                missing_to: 23,
                reachable: 20,
            }
        );
        let text = err.to_string();
        assert!(text.contains("21..=23"), "{text}");
        assert!(text.contains("Incr-00000011-00000020-1020"), "{text}");
        assert!(text.contains("Incr-00000024-00000030-1030"), "{text}");
        // The same gap right after the full snapshot names the full snapshot.
        let listing = vec![full(10, 1000), incr(12, 20, 1020)];
        assert!(matches!(
            plan_restore(&listing, RestoreTarget::Latest),
            Err(PlanError::Gap { before, missing_from: 11, missing_to: 11, .. })
                if before == full(10, 1000).file_name()
        ));
    }

    #[test]
    fn a_gap_after_the_target_revision_does_not_matter() {
        let listing = vec![full(10, 1000), incr(11, 20, 1020), incr(24, 30, 1030)];
        let plan = plan_restore(&listing, RestoreTarget::ToRevision(18)).unwrap();
        assert_eq!(plan.deltas.len(), 1);
        assert!(matches!(
            plan_restore(&listing, RestoreTarget::ToRevision(25)),
            Err(PlanError::Gap { .. })
        ));
    }

    #[test]
    fn a_gap_before_the_target_time_is_an_error() {
        let listing = vec![full(10, 1000), incr(11, 20, 1020), incr(24, 30, 1030)];
        assert!(matches!(
            plan_restore(&listing, RestoreTarget::ToTime(at(1025))),
            Err(PlanError::Gap { .. })
        ));
        // ...but not when the target time falls inside the chain before it.
        let plan = plan_restore(&listing, RestoreTarget::ToTime(at(1010))).unwrap();
        assert_eq!(plan.deltas.len(), 1);
    }

    #[test]
    fn the_newest_of_two_fulls_at_the_same_revision_is_taken() {
        let mut fin = full(20, 1030);
        fin.is_final = true;
        let listing = vec![full(20, 1000), fin.clone(), incr(21, 22, 1040)];
        let plan = plan_restore(&listing, RestoreTarget::Latest).unwrap();
        assert_eq!(plan.full, &fin);
        assert_eq!(plan.deltas.len(), 1);
    }

    #[test]
    fn plans_over_stored_snapshots() {
        let stored = |name: SnapshotName| crate::store::StoredSnapshot {
            path: format!("prefix/v2/{name}"),
            name,
            size: 1,
        };
        let listing = vec![stored(full(10, 1000)), stored(incr(11, 12, 1001))];
        let plan = plan_restore(&listing, RestoreTarget::Latest).unwrap();
        assert_eq!(plan.full.path, "prefix/v2/Full-00000000-00000010-1000");
        assert_eq!(
            plan.deltas[0].snapshot.path,
            "prefix/v2/Incr-00000011-00000012-1001"
        );
    }

    #[test]
    fn plans_over_references_too() {
        let names = [full(10, 1000), incr(11, 12, 1001)];
        let refs: Vec<&SnapshotName> = names.iter().collect();
        let plan = plan_restore(&refs, RestoreTarget::Latest).unwrap();
        assert_eq!(plan.deltas[0].snapshot.snapshot_name(), &names[1]);
    }
}
