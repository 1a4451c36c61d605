//! Capturing backups from a running etcd member, for the agent whose etcd is the raft leader.
//!
//! - [`full_snapshot`] / [`save_to_file`]: the member's whole database as etcd's
//!   `Maintenance.Snapshot` streams it, labelled with the head revision read just before the
//!   call (the snapshot may be slightly ahead of it; deltas start at `revision + 1` and restore
//!   skips what the snapshot already holds).
//! - [`DeltaWatcher`]: the watch events after that revision, read by periodic catch-ups (a
//!   watch from the first revision not captured yet to etcd's current one, then dropped),
//!   cut into [`DeltaBatch`]es in etcd-backup-restore's delta format, with no gap and no
//!   overlap between batches, even when a catch-up fails and the next one resumes.
//!
//! Uploading, scheduling and leadership belong to the caller: this module only captures.

mod buffer;
#[cfg(test)]
mod capture_cost;
mod clock;
mod delta_watch;
mod error;
mod full;
mod hash;
mod lease_ttl;

pub use buffer::{CutReason, DeltaBatch, DeltaBatchInfo, DeltaEvents, EncodedDelta};
pub use clock::{Clock, SystemClock, go_time_json};
pub use delta_watch::{
    CaptureEnd, CutOutcome, CutSchedule, DEFAULT_CATCH_UP_EVERY, DEFAULT_DELTA_MEMORY_LIMIT,
    DEFAULT_DELTA_PERIOD, DeltaConfig, DeltaHandle, DeltaWatcher,
};
pub use error::CaptureError;
pub use full::{FullSnapshot, SavedSnapshot, SnapshotBytes, full_snapshot, save_to_file};
