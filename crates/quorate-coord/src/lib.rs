//! Coordination between agents and their controller: member leases and the cluster
//! configuration. On Kubernetes these are `Lease` objects and the `<name>-config` ConfigMap; in
//! local mode they are files in the cluster's state directory. The agent is written against the
//! [`Coordination`] trait so it runs unchanged in both places.

pub mod agent_tls;
pub mod file;
pub mod json_file;
pub mod kube;

use quorate_core::cluster_config::ClusterConfig;
use quorate_core::lease::{MemberLease, SnapshotLease};
use std::future::Future;
use thiserror::Error;

pub use file::FileCoordination;
pub use kube::{ApiFailure, KubeCoordination};

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
    /// The cluster configuration has not been written yet; the agent waits for it.
    #[error("no cluster configuration at {path} yet; {hint}")]
    NoConfig {
        /// Where it was looked for.
        path: String,
        /// Who writes it, so the reader knows what to check.
        hint: &'static str,
    },
    /// A call to the Kubernetes API failed.
    #[error(transparent)]
    Api(Box<ApiFailure>),
    /// A lease the agent renews does not exist: only the operator creates leases (with the
    /// labels and owner reference that tie them to the `Etcd`), so the agent never does.
    #[error(
        "{kind} lease {namespace}/{name} does not exist; the operator creates it when it \
         reconciles the Etcd {cluster} (is `quorate operator` running and the Etcd reconciled?)"
    )]
    MissingLease {
        /// `member` or `snapshot`.
        kind: &'static str,
        /// Namespace of the lease.
        namespace: String,
        /// Name of the lease.
        name: String,
        /// Name of the `Etcd`.
        cluster: String,
    },
    /// The ConfigMap exists but lacks the key holding the cluster configuration.
    #[error(
        "ConfigMap {namespace}/{config_map} has no key {key}; the operator writes quorate's \
         cluster configuration there, so the ConfigMap was written by something else (an \
         etcd-druid?) or edited by hand; let `quorate operator` reconcile the Etcd"
    )]
    MissingConfigKey {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        config_map: String,
        /// The missing key.
        key: &'static str,
    },
    /// The ConfigMap's cluster configuration is not valid JSON of the expected shape.
    #[error(
        "key {key} of ConfigMap {namespace}/{config_map} is not a valid cluster configuration: \
         {message}; it was edited by hand or written by a different quorate version; let \
         `quorate operator` reconcile the Etcd to rewrite it"
    )]
    InvalidConfig {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        config_map: String,
        /// The key.
        key: &'static str,
        /// The parse error.
        message: String,
    },
}

impl From<ApiFailure> for CoordError {
    fn from(failure: ApiFailure) -> Self {
        CoordError::Api(Box::new(failure))
    }
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
    /// The keys of a Secret the configuration names in `secretFiles`, `None` when it does not
    /// exist (the agent writes them as files; locally the files exist and nothing is named).
    fn secret_data(
        &self,
        name: &str,
    ) -> impl Future<
        Output = Result<Option<std::collections::BTreeMap<String, Vec<u8>>>, CoordError>,
    > + Send;
}
