//! The status of a local cluster, computed the way the operator computes it: members and
//! conditions from the member leases, replica counts from the member processes.

use quorate_api::Etcd;
use quorate_api::status::{EtcdStatus, LastOperationState};
use quorate_core::backup_ready::{BackupLeases, backup_ready_from_leases};
use quorate_core::conditions::{SKIP_MERGE, member_checks, merge_conditions};
use quorate_core::last_operation::{ErrorCode, last_error, outcome_state, reconcile_operation};
use quorate_core::lease::MemberLease;
use quorate_core::member_health::{HealthThresholds, member_statuses};
use std::collections::BTreeMap;

/// What the status is computed from.
pub struct StatusInputs<'a> {
    /// The applied object.
    pub etcd: &'a Etcd,
    /// The status computed last time (for transition times and the first-reconcile signal).
    pub previous: &'a EtcdStatus,
    /// Member leases as the agents last renewed them.
    pub leases: &'a [MemberLease],
    /// Desired members whose agent process runs.
    pub running: i32,
    /// Per member name: whether its agent reports etcd ready.
    pub ready: &'a BTreeMap<String, bool>,
    /// The snapshot leases, when backups are configured.
    pub backup: Option<BackupLeases>,
    /// Problems of this reconcile pass (an agent that cannot be started, ...).
    pub errors: &'a [String],
    /// Identifier of this supervisor run, for `lastOperation.runID`.
    pub run_id: &'a str,
    /// Now.
    pub now: jiff::Timestamp,
}

/// The new status.
pub fn compute_status(i: StatusInputs<'_>) -> EtcdStatus {
    let etcd = i.etcd;
    let replicas = etcd.spec.replicas;
    // Member leases are named like their members, so readiness is looked up by lease name.
    let lease_names = quorate_api::names::member_lease_names(etcd);
    let process_ready = |member: &str| i.ready.get(member).copied().unwrap_or(false);
    let members = member_statuses(
        &lease_names,
        i.leases,
        process_ready,
        &i.previous.members,
        &HealthThresholds::default(),
        i.now,
    );
    let mut checks = member_checks(&members, i.leases, replicas);
    if let Some(backup) = &i.backup {
        checks.push(backup_ready_from_leases(etcd, backup, i.previous, i.now));
    }
    let conditions = merge_conditions(&i.previous.conditions, &checks, replicas, SKIP_MERGE, i.now);
    let ready_replicas = i.ready.values().filter(|r| **r).count() as i32;
    let last_errors: Vec<_> = i
        .errors
        .iter()
        .map(|e| last_error(ErrorCode::SyncStatefulSet, e.clone(), i.now))
        .collect();
    let generation = etcd.metadata.generation;
    let state = outcome_state(&last_errors);
    let ready = ready_replicas >= replicas && i.running == replicas;
    let (state, description) = match state {
        LastOperationState::Succeeded if !ready => (
            LastOperationState::Processing,
            format!("{ready_replicas} of {replicas} members ready"),
        ),
        LastOperationState::Succeeded => (
            state,
            "all members run the desired configuration".to_string(),
        ),
        _ => (state, i.errors.join("; ")),
    };
    let observed_generation = if last_errors.is_empty() {
        generation
    } else {
        i.previous.observed_generation
    };
    let last_operation = match &i.previous.last_operation {
        // Keep the time of an unchanged operation, so the file only changes when something does.
        Some(op) if op.state == state && op.description == description && op.run_id == i.run_id => {
            op.clone()
        }
        _ => reconcile_operation(
            i.previous.observed_generation,
            state,
            description,
            i.run_id,
            i.now,
        ),
    };
    EtcdStatus {
        observed_generation,
        conditions,
        current_replicas: i.running,
        replicas: i.running,
        ready_replicas,
        ready: Some(ready),
        last_errors,
        last_operation: Some(last_operation),
        members,
        selector: Some(quorate_api::names::selector_string(
            &etcd.metadata.name.clone().unwrap_or_default(),
        )),
        ..EtcdStatus::default()
    }
}
