//! What the agent knows about its member right now, shared between the member loop (which
//! writes it) and the HTTP server (which reports it).

use crate::metrics::AgentMetrics;
use quorate_core::hibernation::FinalSnapshotReport;
use quorate_core::maintenance::defrag::DefragRecord;
use quorate_core::membership::data_state::DataState;
use quorate_core::membership::published::PublishedMembership;
use quorate_core::membership::recovery::RecoveryRecord;
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// Where the member is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// Deciding how to start (validating data, reading the member list).
    #[default]
    Initializing,
    /// Waiting for the cluster (its turn to join, a reachable member, quorum).
    Waiting,
    /// etcd runs.
    Running,
    /// The member was removed from the cluster; it stays down.
    Removed,
}

/// Snapshot of the member's state.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberState {
    /// Lifecycle phase.
    pub phase: Phase,
    /// etcd member ID once known.
    pub member_id: Option<u64>,
    /// Cluster ID once known.
    pub cluster_id: Option<u64>,
    /// Whether the member is a learner.
    pub is_learner: bool,
    /// Whether the member is the raft leader.
    pub is_leader: bool,
    /// Whether etcd answered its last health probe with a leader present.
    pub healthy: bool,
    /// Whether a linearizable read through this member completed at its last health probe
    /// (never for a learner): with `healthy` and `is_learner`, what `/healthz` reports.
    pub linearizable_read: bool,
    /// Why the member is waiting or what last went wrong.
    pub message: String,
    /// The etcd command line in use.
    pub etcd_args: Vec<String>,
    /// This member's peer URLs as the cluster's member list has them (empty until read).
    pub registered_peer_urls: Vec<String>,
    /// What its data directory holds, as published on its lease.
    pub data_state: Option<DataState>,
    /// The recovery from quorum loss this member carried out, if any.
    pub recovery: Option<RecoveryRecord>,
    /// Recovery records that existed when this member's data was last restored from the
    /// bucket: they do not speak of the data it holds now.
    #[serde(skip)]
    pub superseded_recoveries: Vec<RecoveryRecord>,
    /// `message` says why quorum is not recovered; cleared once etcd has a leader again.
    #[serde(skip)]
    pub message_is_quorum_wait: bool,
    /// etcd's member list as this member last read it while leading (published on its lease);
    /// `None` while it does not lead.
    #[serde(skip)]
    pub membership: Option<PublishedMembership>,
    /// The hibernation the cluster configuration asks for (`hibernationRequest`), if any.
    #[serde(skip)]
    pub hibernation_request: Option<String>,
    /// The full snapshot an etcd version upgrade waits for (core `upgrade::snapshot_request`),
    /// while some member does not run the configured version yet.
    #[serde(skip)]
    pub upgrade_snapshot_request: Option<String>,
    /// The etcd server version the member runs (etcd's status answer), e.g. `3.5.30`.
    pub etcd_version: Option<String>,
    /// The cluster version its etcd reports (its metrics), e.g. `3.6`.
    pub cluster_version: Option<String>,
    /// The cluster version recorded in its etcd's newest raft snapshot file, `none` without
    /// one; unset while the file cannot be read (no evidence).
    pub snapshot_cluster_version: Option<String>,
    /// What this member, as backup leader, achieved for the final snapshot of a hibernation.
    pub final_snapshot: Option<FinalSnapshotReport>,
    /// `message` says why a scale-in this leader carries out waits; cleared once it moves on.
    #[serde(skip)]
    pub message_is_scale_wait: bool,
    /// `message` says why etcd's NOSPACE alarm stays (the leader's verdict); cleared once it is
    /// disarmed.
    #[serde(skip)]
    pub message_is_no_space: bool,
    /// The newest defragmentation round this member knows and its own last defragmentation
    /// (published on its lease).
    pub defrag: DefragRecord,
    /// The agents' TLS files from the newest configuration read (`spec.backup.tls`): the
    /// listener serves TLS while set.
    #[serde(skip)]
    pub agent_tls: Option<quorate_core::cluster_config::TlsFiles>,
    /// The soonest-expiring certificate this member serves or uses (published on its lease).
    pub certificate_expiry: Option<quorate_core::conditions::CertificateExpiry>,
}

impl MemberState {
    /// Whether every peer URL the cluster knows this member by uses TLS: what the member
    /// lease's `member.etcd.gardener.cloud/tls-enabled` reports (etcd-backup-restore's rule).
    /// False until the member list has been read.
    pub fn peer_tls_enabled(&self) -> bool {
        !self.registered_peer_urls.is_empty()
            && self
                .registered_peer_urls
                .iter()
                .all(|u| u.starts_with("https://"))
    }
}

impl MemberState {
    /// Whether the member is ready for client traffic (core `readiness`): a voter with a
    /// leader whose linearizable read completed. What `/healthz` and the pod's readiness report.
    pub fn ready(&self) -> bool {
        quorate_core::membership::readiness::is_ready(
            quorate_core::membership::readiness::ReadinessEvidence {
                has_leader: self.healthy,
                is_learner: self.is_learner,
                linearizable_read: self.linearizable_read,
            },
        )
    }
}

impl MemberState {
    /// The request a full snapshot is asked for: a hibernation's, else an upgrade's.
    pub fn snapshot_request(&self) -> Option<String> {
        self.hibernation_request
            .clone()
            .or_else(|| self.upgrade_snapshot_request.clone())
    }

    /// Whether the due snapshot is a hibernation's, the last of its chain (named `.final`); an
    /// upgrade's is an ordinary full snapshot.
    pub fn marks_final(&self) -> bool {
        self.hibernation_request.is_some() && self.final_snapshot_due().is_some()
    }

    /// The request (a hibernation's, else an upgrade's) whose full snapshot is still to be
    /// taken, if any.
    pub fn final_snapshot_due(&self) -> Option<String> {
        let request = self.snapshot_request()?;
        let taken = self
            .final_snapshot
            .as_ref()
            .is_some_and(|r| r.request == request && r.revision.is_some());
        (!taken).then_some(request)
    }
}

/// Shared handle on [`MemberState`], and the metrics that count what the member did.
#[derive(Clone, Debug, Default)]
pub struct SharedState(Arc<Mutex<MemberState>>, AgentMetrics);

impl SharedState {
    /// A fresh state counting into `metrics`.
    pub fn with_metrics(metrics: AgentMetrics) -> SharedState {
        SharedState(Arc::default(), metrics)
    }

    /// The agent's metrics.
    pub fn metrics(&self) -> &AgentMetrics {
        &self.1
    }

    /// A copy of the current state.
    pub fn get(&self) -> MemberState {
        self.0.lock().expect("state lock").clone()
    }

    /// Changes the state in place.
    pub fn update(&self, f: impl FnOnce(&mut MemberState)) {
        f(&mut self.0.lock().expect("state lock"));
    }
}
