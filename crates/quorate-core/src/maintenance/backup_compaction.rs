//! Keeping restores short: when the deltas since the newest full snapshot grow past a bound, the
//! backup leader takes a full snapshot, so a restore never replays more than that.
//!
//! druid runs a compaction Job for this (restore latest full + deltas in a temporary etcd,
//! upload a full snapshot). quorate takes the full snapshot from the running leader instead: a
//! snapshot is a read-only stream of the backend that etcd serves without blocking writes
//! (measured in `docs/benchmarks/backup.md`), and it needs no second etcd, no Job and no second
//! copy of the data. The bound is druid's `spec.backup.snapshotCompaction.eventsThreshold`
//! (default 1,000,000 events) and, quorate's own, [`DELTA_BYTES_BOUND`] of delta objects.

/// druid's default `eventsThreshold`.
pub const DEFAULT_EVENTS_THRESHOLD: u64 = 1_000_000;
/// Stored delta bytes since the newest full snapshot that make a full snapshot due.
pub const DELTA_BYTES_BOUND: u64 = 1 << 30;

/// What a restore would replay right now on top of the newest full snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaBacklog {
    /// Events in the deltas since the newest full snapshot (at leader start, the revisions
    /// they span: at least one event each).
    pub events: u64,
    /// Their stored size in bytes.
    pub bytes: u64,
    /// How many delta snapshots they are.
    pub deltas: u64,
}

impl DeltaBacklog {
    /// The backlog after one more delta.
    pub fn add(self, events: u64, bytes: u64) -> DeltaBacklog {
        DeltaBacklog {
            events: self.events + events,
            bytes: self.bytes + bytes,
            deltas: self.deltas + 1,
        }
    }
}

/// The events threshold `spec.backup.snapshotCompaction.eventsThreshold` sets (validated
/// positive), else druid's default.
pub fn events_threshold(spec: &quorate_api::BackupSpec) -> u64 {
    spec.snapshot_compaction
        .as_ref()
        .and_then(|c| c.events_threshold)
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(DEFAULT_EVENTS_THRESHOLD)
}

/// Why a full snapshot is due because of the backlog, or `None`.
pub fn full_snapshot_for_backlog(backlog: DeltaBacklog, events_threshold: u64) -> Option<String> {
    if backlog.events >= events_threshold {
        return Some(format!(
            "{} delta events since the newest full snapshot reach the threshold of {events_threshold}",
            backlog.events
        ));
    }
    (backlog.bytes >= DELTA_BYTES_BOUND).then(|| {
        format!(
            "{} bytes of deltas since the newest full snapshot reach the bound of {DELTA_BYTES_BOUND}",
            backlog.bytes
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_snapshot_is_due_at_the_events_threshold_or_the_size_bound() {
        let small = DeltaBacklog {
            events: 999,
            bytes: 10,
            deltas: 3,
        };
        assert_eq!(full_snapshot_for_backlog(small, 1000), None);
        assert!(full_snapshot_for_backlog(small.add(1, 0), 1000).is_some());
        assert_eq!(small.add(1, 0).deltas, 4);
        let big = DeltaBacklog {
            events: 1,
            bytes: DELTA_BYTES_BOUND,
            deltas: 1,
        };
        assert!(full_snapshot_for_backlog(big, 1000).is_some());
    }

    #[test]
    fn the_threshold_is_druids_field_or_its_default() {
        let mut spec = quorate_api::BackupSpec::default();
        assert_eq!(events_threshold(&spec), DEFAULT_EVENTS_THRESHOLD);
        spec.snapshot_compaction = Some(quorate_api::SnapshotCompactionSpec {
            events_threshold: Some(500),
            ..Default::default()
        });
        assert_eq!(events_threshold(&spec), 500);
    }
}
