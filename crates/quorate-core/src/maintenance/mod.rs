//! Keeping a long-running cluster small and quick to restore without stalling anyone:
//! defragmentation rounds (`defrag`) and full snapshots that bound the deltas a restore
//! replays (`backup_compaction`).

pub mod backup_compaction;
pub mod defrag;
