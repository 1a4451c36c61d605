//! The status of a local cluster: this module fills the one observed-state input of
//! `quorate_core::status` from what the supervisor sees — its agent processes and their
//! `/healthz`, the lease files, etcd's alarms and member list — so local mode and the operator
//! compute status by the same rules. Without a running supervisor no member runs (agents and
//! etcd die with it), and [`stopped_status`] says so instead of repeating the last file.

use std::collections::BTreeMap;

use quorate_api::Etcd;
use quorate_api::status::EtcdStatus;
use quorate_core::backup_ready::BackupLeases;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::last_operation::ErrorCode;
use quorate_core::lease::MemberLease;
use quorate_core::rollout::config_hash;
use quorate_core::status::{
    MemberObservation, ObservedCluster, PassOutcome, Presence, Workload, rollout_from_config_hashes,
};

use crate::etcd_view::EtcdView;

/// What the supervisor knows of one member's agent process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberProcess {
    /// The agent process runs (a member not running is known stopped).
    pub running: bool,
    /// Its agent answers `/healthz` with 200 (etcd serves with a leader).
    pub ready: bool,
}

/// What the status of a supervised cluster is computed from.
pub struct StatusInputs<'a> {
    /// The applied object.
    pub etcd: &'a Etcd,
    /// The status computed last time (for transition times and the first-reconcile signal).
    pub previous: &'a EtcdStatus,
    /// Member leases as the agents last renewed them.
    pub leases: &'a [MemberLease],
    /// The configuration the supervisor wrote for the agents.
    pub config: &'a ClusterConfig,
    /// Per desired member name: its agent process.
    pub processes: &'a BTreeMap<String, MemberProcess>,
    /// etcd's own view (alarms, unstarted members).
    pub etcd_view: &'a EtcdView,
    /// The snapshot leases, when backups are configured.
    pub backup: Option<BackupLeases>,
    /// Agents that could not be started in this pass.
    pub start_errors: &'a [String],
    /// Identifier of this supervisor run, for `lastOperation.runID`.
    pub run_id: &'a str,
    /// Now.
    pub now: jiff::Timestamp,
}

/// The new status of a supervised cluster.
pub fn compute_status(i: StatusInputs<'_>) -> EtcdStatus {
    let outcome = if i.start_errors.is_empty() {
        PassOutcome::Succeeded
    } else {
        PassOutcome::Failed(
            i.start_errors
                .iter()
                .map(|e| (ErrorCode::StartMember, e.clone()))
                .collect(),
        )
    };
    let members: BTreeMap<String, MemberObservation> = i
        .processes
        .iter()
        .map(|(name, p)| (name.clone(), observation(*p)))
        .collect();
    let workload = workload(i.etcd, i.leases, Some(i.config), &members);
    quorate_core::status::compute_status(&ObservedCluster {
        etcd: i.etcd,
        previous: i.previous,
        leases: i.leases,
        members,
        workload,
        alarms: i.etcd_view.alarms.clone(),
        unstarted: i.etcd_view.unstarted.clone(),
        backup: i.backup,
        outcome: &outcome,
        pass_waits_for_members: false,
        run_id: i.run_id,
        now: i.now,
    })
}

/// The status of a cluster no supervisor runs: every member is stopped, whatever the leases
/// renewed moments before say; the last operation and errors stay as the last run left them.
pub fn stopped_status(
    etcd: &Etcd,
    previous: &EtcdStatus,
    leases: &[MemberLease],
    config: Option<&ClusterConfig>,
    backup: Option<BackupLeases>,
    now: jiff::Timestamp,
) -> EtcdStatus {
    let members: BTreeMap<String, MemberObservation> = quorate_api::names::member_lease_names(etcd)
        .into_iter()
        .map(|name| (name, observation(MemberProcess::default())))
        .collect();
    let run_id = previous
        .last_operation
        .as_ref()
        .map(|op| op.run_id.clone())
        .unwrap_or_default();
    let workload = workload(etcd, leases, config, &members);
    quorate_core::status::compute_status(&ObservedCluster {
        etcd,
        previous,
        leases,
        members,
        workload,
        alarms: Vec::new(),
        unstarted: Vec::new(),
        backup,
        outcome: &PassOutcome::NotRun,
        pass_waits_for_members: false,
        run_id: &run_id,
        now,
    })
}

fn observation(p: MemberProcess) -> MemberObservation {
    MemberObservation {
        presence: if p.running {
            Presence::Running
        } else {
            Presence::Stopped
        },
        ready: p.running && p.ready,
    }
}

/// Replica counts from the processes, rollout facts from the configuration hash each member
/// publishes on its lease.
fn workload(
    etcd: &Etcd,
    leases: &[MemberLease],
    config: Option<&ClusterConfig>,
    members: &BTreeMap<String, MemberObservation>,
) -> Workload {
    let count = |f: fn(&MemberObservation) -> bool| {
        i32::try_from(members.values().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
    };
    let desired_hash = config.map(config_hash).unwrap_or_default();
    Workload {
        current_replicas: count(|m| m.presence == Presence::Running),
        ready_replicas: count(|m| m.ready),
        rollout: Some(rollout_from_config_hashes(
            etcd,
            leases,
            members,
            &desired_hash,
        )),
        reference: None,
    }
}
