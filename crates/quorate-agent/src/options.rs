//! The settings of one agent, read by every module of the crate; kept apart from the member
//! loop so that the modules it calls do not import from it.

use quorate_etcd::binaries::EtcdBinaries;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of one agent.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// The member this agent runs (etcd member name).
    pub member: String,
    /// etcd's data directory.
    pub data_dir: PathBuf,
    /// File etcd's output is appended to.
    pub etcd_log: PathBuf,
    /// Where each etcd version's binary is; the cluster configuration says which version runs.
    pub etcd_binaries: EtcdBinaries,
    /// How often the agent checks its configuration for changes.
    pub poll_interval: Duration,
    /// How often the agent probes etcd and retries a refused step ("unhealthy cluster",
    /// "learner not in sync"): short, because etcd lifts these refusals at a moment it does not
    /// announce, and every retry is one cheap RPC.
    pub retry_interval: Duration,
}
