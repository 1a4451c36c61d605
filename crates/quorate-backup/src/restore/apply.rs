//! The replay's one seam: where the revisions [`super::replay`] groups go. Two appliers
//! implement [`Applier`]: [`super::direct::DirectApplier`] writes them into a new database file,
//! [`super::txn::TxnApplier`] sends one txn per revision through a temporary etcd. Each also
//! knows how its replayed data becomes the member's data directory ([`Applier::finish`]), so
//! the pipeline chooses the method once, when it creates the applier.

use std::future::Future;
use std::path::Path;

use super::tools::{EtcdTools, MemberIdentity};
use super::verify::Verification;
use super::{RestoreError, RestoreOptions};
use crate::delta::DeltaEvent;
use thiserror::Error;

/// One source revision's events, not applied yet.
#[derive(Debug)]
pub struct Pending {
    /// The source revision.
    pub revision: i64,
    /// The delta snapshot it came from (the one holding its first event).
    pub object: String,
    /// Its events, in their order in the delta snapshots.
    pub events: Vec<DeltaEvent>,
}

/// Where the finished replay is turned into the member's data directory.
#[derive(Debug)]
pub struct Landing<'a> {
    /// etcd binaries.
    pub tools: &'a EtcdTools,
    /// What the replayed data is, for messages (`<full> replayed to revision <n>`).
    pub label: &'a str,
    /// The member the data directory is restored as.
    pub member: &'a MemberIdentity,
    /// The directory the restored data directory is built in.
    pub part: &'a Path,
    /// Scratch space removed after the restore.
    pub work: &'a Path,
    /// Verification settings (the recorded hash, or that it is skipped).
    pub options: &'a RestoreOptions,
}

/// What [`Applier::finish`] left in place.
#[derive(Clone, Debug, PartialEq)]
pub struct Landed {
    /// The revision the restored data ends at (after a revision bump, the raised one).
    pub restored_revision: i64,
    /// Whether the restored key space is the one etcd recorded at backup time.
    pub verification: Verification,
}

/// Receives replayed revisions, one [`Pending`] at a time, in revision order.
pub trait Applier: Send + Sized {
    /// The revision the data is at.
    fn head(&self) -> i64;

    /// Applies one source revision; returns how many leases it had to grant. An applier that
    /// cannot reproduce the revision exactly (etcd assigns another, an event does not fit the
    /// key space) fails instead.
    fn apply(&mut self, pending: &Pending)
    -> impl Future<Output = Result<u64, ReplayError>> + Send;

    /// Leaves the data, replayed up to `replayed`, as the member's data directory in
    /// `landing.part`, verified against the hash etcd recorded there.
    fn finish(
        self,
        landing: &Landing<'_>,
        replayed: i64,
    ) -> impl Future<Output = Result<Landed, RestoreError>> + Send;
}

/// The replay could not continue.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The temporary etcd refused or failed a call.
    #[error(
        "{operation} failed while replaying delta snapshot {object} (revision {revision}): \
         {message}; the restore was abandoned, nothing was changed"
    )]
    Etcd {
        /// The call.
        operation: &'static str,
        /// The delta snapshot being applied ("" before the first).
        object: String,
        /// The source revision being applied.
        revision: i64,
        /// etcd's error.
        message: String,
    },
    /// The head revision after a txn is not the source revision.
    #[error(
        "after applying revision {expected} of delta snapshot {object} the restored etcd is at \
         revision {actual}; the restored data does not match the source (a lease expired during \
         the replay, or the delta snapshot does not belong to this full snapshot). Nothing was \
         changed; check that the full snapshot and the delta snapshots come from the same cluster"
    )]
    RevisionMismatch {
        /// The delta snapshot.
        object: String,
        /// The source revision.
        expected: i64,
        /// What the restored etcd reports.
        actual: i64,
    },
    /// An event does not fit the data it is applied to (written directly, every event is
    /// checked against the key space).
    #[error(
        "delta snapshot {object} does not belong to the restored data: at revision {revision}          key {key:?}: {problem}. Nothing was changed; check that the full snapshot and the          delta snapshots come from the same cluster"
    )]
    Diverged {
        /// The delta snapshot.
        object: String,
        /// The source revision.
        revision: i64,
        /// The key.
        key: String,
        /// What does not fit.
        problem: String,
    },
    /// Events are missing between the head and the next event.
    #[error(
        "revisions {missing_from}..={missing_to} are missing: the restored data ends at \
         {previous} and the next event in delta snapshot {object} is at revision {next}; \
         restore to revision {previous_revision} at most or recover the delta snapshot covering \
         the gap"
    )]
    Gap {
        /// The object the head came from (the full snapshot or a delta).
        previous: String,
        /// Its last applied revision.
        previous_revision: i64,
        /// The delta snapshot with the next event.
        object: String,
        /// The next event's revision.
        next: i64,
        /// First missing revision.
        missing_from: i64,
        /// Last missing revision.
        missing_to: i64,
    },
    /// An event that cannot be applied.
    #[error("delta snapshot {object} event #{index} cannot be applied: {reason}")]
    BadEvent {
        /// The delta snapshot.
        object: String,
        /// Index of the event in the object.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}
