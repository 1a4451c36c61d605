//! The `Etcd` status, computed once for both controllers. The operator fills an
//! [`ObservedCluster`] from the StatefulSet, pods and leases, the local supervisor from its
//! processes and lease files; [`compute_status`] applies the same rules to either, so both show
//! the same conditions and error codes.
//!
//! Status tells the truth: what the observer knows for certain (a member process or pod known
//! stopped, an alarm etcd reports, a member etcd lists that never started) wins over lease
//! freshness, which only says what an agent said a little while ago.

mod config_rollout;
mod members;
mod observed;
mod outcome;
pub mod refresh;
pub mod triggers;

pub use config_rollout::rollout_from_config_hashes;
pub use members::{REASON_MEMBER_NEVER_STARTED, REASON_MEMBER_STOPPED, observed_members};
pub use observed::{
    AlarmKind, EtcdAlarm, MemberObservation, ObservedCluster, PassOutcome, Presence,
    UnstartedMember, Workload,
};

use quorate_api::status::EtcdStatus;

use crate::backup_ready::backup_ready_from_leases;
use crate::conditions::{
    SKIP_MERGE, check_all_members_ready, check_all_members_updated, check_certificates,
    check_cluster_id_mismatch, check_last_quorum_recovery, check_members_waiting,
    check_ready_under_alarms, merge_conditions,
};

/// The new status of the cluster `o` describes. Conditions keep their transition times when
/// unchanged, and `lastOperation` keeps its time when its state and description are unchanged,
/// so an unchanged cluster yields an equal status and no write.
///
/// `status.ready` is druid's rule — every member runs the latest configuration and enough are
/// ready ("enough" is the spec's count once the pass applied the spec, else the workload's) —
/// and is false besides whenever a desired member is known stopped or etcd reports an alarm.
pub fn compute_status(o: &ObservedCluster<'_>) -> EtcdStatus {
    let etcd = o.etcd;
    let replicas = etcd.spec.replicas;
    let members = observed_members(o);
    let alarms = members::describe_alarms(o, &members);
    let mut checks = vec![
        check_ready_under_alarms(&members, &alarms),
        check_all_members_ready(&members, replicas),
        check_cluster_id_mismatch(&members, o.leases),
        check_all_members_updated(o.workload.rollout.as_ref()),
        check_members_waiting(&desired_leases(o)),
        check_last_quorum_recovery(&desired_leases(o)),
        check_certificates(&desired_leases(o), o.now),
    ];
    if let Some(decision) = &o.etcd_version {
        checks.push(crate::conditions::check_etcd_version(decision));
    }
    if let Some(backup) = &o.backup {
        checks.push(backup_ready_from_leases(etcd, backup, o.previous, o.now));
    }
    let mut conditions =
        merge_conditions(&o.previous.conditions, &checks, replicas, SKIP_MERGE, o.now);
    conditions.extend(scale_condition(o));
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));

    let workload = &o.workload;
    let expected = match o.outcome {
        PassOutcome::Succeeded => replicas,
        _ => workload.rollout.as_ref().map_or(replicas, |r| r.replicas),
    };
    let known_stopped = quorate_api::names::member_lease_names(etcd)
        .iter()
        .any(|m| o.member(m).presence == Presence::Stopped);
    let ready = !known_stopped
        && o.alarms.is_empty()
        && workload
            .rollout
            .as_ref()
            .is_some_and(|r| r.is_complete() && workload.ready_replicas >= expected);
    let operation = outcome::operation(o, ready, workload.ready_replicas);
    EtcdStatus {
        observed_generation: operation.observed_generation,
        conditions,
        members,
        // druid copies currentReplicas into both (the scale subresource reads `replicas`).
        current_replicas: workload.current_replicas,
        replicas: workload.current_replicas,
        ready_replicas: workload.ready_replicas,
        ready: Some(ready),
        etcd: workload.reference.clone(),
        last_operation: operation.last_operation,
        last_errors: operation.last_errors,
        selector: Some(quorate_api::names::selector_string(
            etcd.metadata.name.as_deref().unwrap_or_default(),
        )),
        ..o.previous.clone()
    }
}

#[cfg(test)]
mod tests;

/// `ScaleOperationComplete`, which (unlike the member checks) is computed while hibernated too:
/// it is what says whether the hibernation finished.
fn scale_condition(o: &ObservedCluster<'_>) -> Vec<quorate_api::status::Condition> {
    let desired = quorate_api::names::member_lease_names(o.etcd);
    let check = crate::conditions::check_scale_operation(&crate::conditions::ScaleObservation {
        replicas: o.etcd.spec.replicas,
        desired: &desired,
        voters: o.voters.as_deref(),
        hibernation: o.hibernation.as_ref(),
    });
    let previous: Vec<_> = o
        .previous
        .conditions
        .iter()
        .filter(|c| c.type_ == check.type_)
        .cloned()
        .collect();
    // Computed as if running: replicas 0 would turn it into "not checked".
    merge_conditions(&previous, &[check], 1, &[], o.now)
}

/// The leases of the desired members (a lease left from a member scaled away says nothing).
fn desired_leases<'a>(o: &ObservedCluster<'a>) -> Vec<&'a crate::lease::MemberLease> {
    let names = quorate_api::names::member_lease_names(o.etcd);
    o.leases
        .iter()
        .filter(|l| names.contains(&l.name))
        .collect()
}
