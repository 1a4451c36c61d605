//! Whether the bucket still holds the chain a backup leader stored: a store can acknowledge an
//! upload and not keep it, or drop an object later. The leader must never continue a chain over
//! a missing object (every later restore to the newest revision would stop at the gap, and one
//! to a point before the gap would silently end early if the lost object was the newest), so it
//! audits the bucket's listing (positive evidence: the objects that are there) against what it
//! stored, and repairs with a full snapshot when they disagree.

use crate::gc::{SnapshotInfo, SnapshotKind};

/// How far a restore of the bucket's newest chain reaches, on the listing's evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainReach {
    /// The newest full snapshot's revision; `None` when the bucket holds none.
    pub full: Option<i64>,
    /// The last revision reachable from the newest full snapshot through deltas without a
    /// missing revision (overlaps are fine: a restore skips what it already holds).
    pub through: i64,
    /// The first missing revisions (`from..=to`) after `through`, when a later delta exists.
    pub gap: Option<(i64, i64)>,
}

/// What is wrong with the chain a leader stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainFault {
    /// Deltas exist beyond revisions no object holds.
    #[error(
        "the bucket holds no snapshot of revisions {from} to {to}, though later deltas exist \
         (an object the store acknowledged was lost); a full snapshot is taken so a restore \
         reaches the newest revision again"
    )]
    Gap {
        /// First missing revision.
        from: i64,
        /// Last missing revision.
        to: i64,
    },
    /// The chain ends before what this leader stored and verified.
    #[error(
        "the bucket's chain ends at revision {through}, but revisions up to {stored} were \
         stored (the store dropped an acknowledged object); a full snapshot is taken"
    )]
    Short {
        /// Where the listed chain ends.
        through: i64,
        /// What the leader stored.
        stored: i64,
    },
}

/// Follows the chain from the newest full snapshot (or revision 0 when there is none).
pub fn chain_reach(snapshots: &[SnapshotInfo]) -> ChainReach {
    let full = snapshots
        .iter()
        .filter(|s| s.kind == SnapshotKind::Full)
        .map(|s| s.last_revision)
        .max();
    let mut deltas: Vec<&SnapshotInfo> = snapshots
        .iter()
        .filter(|s| s.kind == SnapshotKind::Incr && s.last_revision > full.unwrap_or(0))
        .collect();
    deltas.sort_by_key(|s| (s.start_revision, s.last_revision));
    let mut through = full.unwrap_or(0);
    for d in deltas {
        if d.start_revision > through + 1 {
            return ChainReach {
                full,
                through,
                gap: Some((through + 1, d.start_revision - 1)),
            };
        }
        through = through.max(d.last_revision);
    }
    ChainReach {
        full,
        through,
        gap: None,
    }
}

/// Audits the listing against `stored_through`, the newest revision the leader stored and the
/// store confirmed (0: nothing yet). `None`: the chain is whole.
pub fn audit_chain(snapshots: &[SnapshotInfo], stored_through: i64) -> Option<ChainFault> {
    let reach = chain_reach(snapshots);
    if let Some((from, to)) = reach.gap {
        return Some(ChainFault::Gap { from, to });
    }
    (reach.through < stored_through).then_some(ChainFault::Short {
        through: reach.through,
        stored: stored_through,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use SnapshotKind::{Full, Incr};
    use jiff::Timestamp;

    fn s(kind: SnapshotKind, start: i64, last: i64) -> SnapshotInfo {
        SnapshotInfo {
            kind,
            start_revision: start,
            last_revision: last,
            created: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_whole_chain_reaches_its_newest_delta() {
        let chain = [s(Full, 0, 10), s(Incr, 11, 20), s(Incr, 21, 30)];
        assert_eq!(
            chain_reach(&chain),
            ChainReach {
                full: Some(10),
                through: 30,
                gap: None
            }
        );
        assert_eq!(audit_chain(&chain, 30), None);
        // Overlapping deltas (a new leader re-capturing) and old deltas before the newest full
        // snapshot do not count as gaps.
        let chain = [
            s(Incr, 1, 4),
            s(Full, 0, 10),
            s(Incr, 11, 20),
            s(Incr, 15, 25),
            s(Incr, 26, 26),
        ];
        assert_eq!(audit_chain(&chain, 26), None);
    }

    #[test]
    fn a_lost_middle_delta_is_a_gap() {
        let chain = [s(Full, 0, 10), s(Incr, 11, 20), s(Incr, 31, 40)];
        assert_eq!(chain_reach(&chain).through, 20);
        assert_eq!(
            audit_chain(&chain, 40),
            Some(ChainFault::Gap { from: 21, to: 30 })
        );
        // Right after the full snapshot too.
        assert_eq!(
            audit_chain(&[s(Full, 0, 10), s(Incr, 12, 20)], 0),
            Some(ChainFault::Gap { from: 11, to: 11 })
        );
    }

    #[test]
    fn a_lost_newest_object_is_a_short_chain() {
        let chain = [s(Full, 0, 10), s(Incr, 11, 20)];
        assert_eq!(
            audit_chain(&chain, 30),
            Some(ChainFault::Short {
                through: 20,
                stored: 30
            })
        );
        // The newest full snapshot itself lost: the older chain ends below what was stored.
        assert_eq!(
            audit_chain(&[s(Full, 0, 5)], 10),
            Some(ChainFault::Short {
                through: 5,
                stored: 10
            })
        );
        assert_eq!(
            audit_chain(&[], 10),
            Some(ChainFault::Short {
                through: 0,
                stored: 10
            })
        );
    }
}
