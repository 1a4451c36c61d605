//! Coordination between agents and their controller: member leases and the cluster
//! configuration. On Kubernetes these are `Lease` objects and the `<name>-config` ConfigMap; in
//! local mode they are files in the cluster's state directory. The agent is written against the
//! [`Coordination`] trait so it runs unchanged in both places.

pub mod file;
pub mod json_file;

use quorate_core::cluster_config::ClusterConfig;
use quorate_core::lease::{MemberLease, SnapshotLease};
use std::future::Future;
use thiserror::Error;

pub use file::FileCoordination;

/// A failure to read or write coordination state.
#[derive(Debug, Error)]
pub enum CoordError {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A file holds something that is not what it should be.
    #[error("{path} is not valid {what}: {message}; fix or delete the file")]
    Corrupt {
        /// The file.
        path: String,
        /// What it should hold.
        what: &'static str,
        /// The parse error.
        message: String,
    },
    /// The cluster configuration has not been written yet.
    #[error("no cluster configuration at {path} yet; is the cluster created (`quorate up`)?")]
    NoConfig {
        /// Where it was looked for.
        path: String,
    },
}

/// Where an agent finds its configuration and publishes its liveness.
pub trait Coordination: Send + Sync + 'static {
    /// The current cluster configuration.
    fn cluster_config(&self) -> impl Future<Output = Result<ClusterConfig, CoordError>> + Send;
    /// One member lease, `None` if it does not exist.
    fn member_lease(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<MemberLease>, CoordError>> + Send;
    /// All member leases of the cluster.
    fn member_leases(&self) -> impl Future<Output = Result<Vec<MemberLease>, CoordError>> + Send;
    /// Creates or replaces a member lease (a renewal).
    fn put_member_lease(
        &self,
        lease: &MemberLease,
    ) -> impl Future<Output = Result<(), CoordError>> + Send;
    /// One snapshot lease (`<name>-full-snap` / `<name>-delta-snap`), `None` if absent.
    fn snapshot_lease(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<SnapshotLease>, CoordError>> + Send;
    /// Creates or replaces a snapshot lease.
    fn put_snapshot_lease(
        &self,
        lease: &SnapshotLease,
    ) -> impl Future<Output = Result<(), CoordError>> + Send;
}
