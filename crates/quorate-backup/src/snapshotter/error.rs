//! What can go wrong while capturing, worded so the caller (or a person) knows what to do.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use quorate_etcd::EtcdError;
use thiserror::Error;

/// A failed full snapshot or delta capture.
#[derive(Debug, Error)]
pub enum CaptureError {
    /// An etcd call failed (the message names the call, the endpoint and what to do).
    #[error(transparent)]
    Etcd(#[from] EtcdError),

    /// The revision the delta capture must continue from is no longer in etcd's history, so
    /// the events in between are lost for deltas: only a new full snapshot can cover them.
    #[error(
        "delta capture from {endpoint} must continue at revision {revision}, but etcd has \
         compacted its history up to revision {compact_revision}; take a full snapshot and \
         capture deltas from its revision + 1"
    )]
    Compacted {
        /// The first revision not captured yet.
        revision: i64,
        /// etcd's compaction revision: the oldest one still watchable.
        compact_revision: i64,
        /// The member watched.
        endpoint: String,
    },

    /// The watch could not be (re-)established for too long.
    #[error(
        "delta capture from {endpoint} has had no working watch for {waited:?} (last error: \
         {last_error}); check that the member runs and has a leader, then resume capture from \
         revision {next_revision} on the current leader"
    )]
    Unavailable {
        /// The member watched.
        endpoint: String,
        /// How long the capture tried.
        waited: Duration,
        /// The last failure seen.
        last_error: String,
        /// Where a new capture must start so nothing is missed.
        next_revision: i64,
    },

    /// etcd broke its own ordering guarantee (a revision arrived again after it was cut into
    /// a batch). Continuing could produce overlapping deltas.
    #[error(
        "etcd member {endpoint} sent an event for revision {revision} after revisions up to \
         {captured_through} were already captured; stop delta capture and take a full snapshot"
    )]
    OutOfOrder {
        /// The member watched.
        endpoint: String,
        /// The offending event's revision.
        revision: i64,
        /// The last revision already captured.
        captured_through: i64,
    },

    /// The receiver of delta batches was dropped; batches from `next_revision` on were not
    /// delivered.
    #[error(
        "the receiver of delta batches was dropped; events from revision {next_revision} on \
         were not delivered; resume capture from that revision"
    )]
    ConsumerGone {
        /// The first revision not delivered.
        next_revision: i64,
    },

    /// The capture task has ended (stopped or failed), so it cannot answer.
    #[error("delta capture is not running any more; await its task for the reason")]
    NotRunning,

    /// A start revision below 1.
    #[error("delta capture cannot start at revision {revision}; revisions start at 1")]
    InvalidStart {
        /// The revision given.
        revision: i64,
    },

    /// The snapshot data does not match the SHA-256 etcd sent with it.
    #[error("the snapshot from {endpoint} is damaged: {detail}; take the snapshot again")]
    SnapshotCorrupt {
        /// The member that sent it.
        endpoint: String,
        /// What does not match.
        detail: String,
    },

    /// Writing the snapshot file failed.
    #[error(
        "cannot write the snapshot to {path}: {source}; check that the directory exists, is \
         writable and has space"
    )]
    File {
        /// The file being written.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}
