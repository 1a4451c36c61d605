//! The etcd adapter used by the agent, the local runtime and the operator.
//!
//! - [`MemberClient`]: calls answered by one specific member (status, health, alarms,
//!   defragment, move-leader, snapshot).
//! - [`ClusterClient`]: cluster-wide calls (membership, reads, writes) with failover between
//!   endpoints.
//! - [`EtcdError`] with [`ErrorKind`]: etcd's refusals classified, so "unhealthy cluster",
//!   "too many learners" and "learner not in sync" are waited out ([`retry_while_retryable`])
//!   instead of treated as failures.
//! - [`client_tls`]: a cluster configuration's client TLS files as [`EtcdTls`].
//! - [`binaries`] and [`data_dir`]: etcd's programs on this machine and a member's data
//!   directory on disk (inspection, wrong-volume guard, moving it aside); [`snap_file`] and
//!   [`wal_file`]: what its raft snapshot and write-ahead log record.
//!
//! Every call is time-bounded ([`EtcdTimeouts`]); etcd-client connects lazily and would
//! otherwise hang on an unreachable member.

pub mod binaries;
mod cluster;
mod cluster_tls;
mod config;
pub mod data_dir;
mod error;
mod member;
mod retry;
pub mod snap_file;
mod snapshot;
mod types;
pub mod wal_file;

pub use cluster::ClusterClient;
pub use cluster_tls::{client_tls, tls_from_files};
pub use config::{ClientIdentity, EtcdEndpoints, EtcdTimeouts, EtcdTls, PemSource};
pub use error::{ErrorKind, EtcdError, classify, classify_status};
pub use member::MemberClient;
pub use retry::{RetryPolicy, retry_while_retryable, retry_with};
pub use snapshot::SnapshotStream;
pub use types::{
    Alarm, AlarmKind, DowngradeCall, KeySpaceHash, Member, MemberList, MemberStatus, format_id,
    parse_id,
};
