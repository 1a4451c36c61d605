//! The replay's one seam: where the revisions [`super::replay`] groups go. Two appliers
//! implement [`Applier`]: [`super::direct::DirectApplier`] writes them into a new database file,
//! [`super::txn::TxnApplier`] sends one txn per revision through a temporary etcd. Each also
//! knows how its replayed data becomes the member's data directory ([`Applier::finish`]), so
//! the pipeline chooses the method once, when it creates the applier.

use std::future::Future;
use std::path::Path;

use super::replay::ReplayError;
use super::tools::{EtcdTools, MemberIdentity};
use super::verify::Verification;
use super::{RestoreError, RestoreOptions};
use crate::delta::DeltaEvent;

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
