//! The `status.conditions` of an `Etcd`, computed as etcd-druid computes them: each check is a
//! pure function returning a [`CheckResult`], one module per check as druid keeps one file per
//! check; [`merge_conditions`] (here) then turns the results into conditions, keeping
//! transition times and the conditions other controllers own.
//!
//! A new condition is one more module whose result is passed to [`merge_conditions`] with the
//! others (`BackupReady` lives in [`crate::backup_ready`], beside the backup rules it reads).

mod all_members_ready;
mod all_members_updated;
mod certificates;
mod cluster_id_mismatch;
mod etcd_version;
mod last_quorum_recovery;
mod members_waiting;
mod ready;
mod scale_operation;
#[cfg(test)]
mod test_support;

pub use all_members_ready::check_all_members_ready;
pub use all_members_updated::{StatefulSetRollout, check_all_members_updated};
pub use certificates::{
    CERTIFICATE_EXPIRY_ANNOTATION, CertificateExpiry, WARN_BEFORE, check_certificates,
};
pub use cluster_id_mismatch::check_cluster_id_mismatch;
pub use etcd_version::check_etcd_version;
pub use last_quorum_recovery::check_last_quorum_recovery;
pub use members_waiting::check_members_waiting;
pub use ready::{REASON_ALARM_RAISED, check_ready, check_ready_under_alarms};
pub use scale_operation::{ScaleObservation, check_scale_operation};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use quorate_api::status::{Condition, ConditionStatus, EtcdMemberStatus};

use crate::lease::MemberLease;

/// Condition type: a quorum of members is ready (the `READY`/`QUORATE` printer columns).
pub const READY: &str = "Ready";
/// Condition type: every expected member is present and ready.
pub const ALL_MEMBERS_READY: &str = "AllMembersReady";
/// Condition type: members report more than one etcd cluster ID.
pub const CLUSTER_ID_MISMATCH: &str = "ClusterIDMismatch";
/// Condition type: every pod runs the StatefulSet's current revision.
pub const ALL_MEMBERS_UPDATED: &str = "AllMembersUpdated";
/// Condition type (quorate's own): members wait for evidence before a decision about data.
pub const MEMBERS_WAITING: &str = "MembersWaiting";
/// Condition type (quorate's own): the members run the etcd version the `Etcd` asks for; while
/// a version change runs, which step runs and what it waits for.
pub const ETCD_VERSION_CURRENT: &str = "EtcdVersionCurrent";
/// Condition type (quorate's own): the quorum-loss recovery a member recorded.
pub const LAST_QUORUM_RECOVERY: &str = "LastQuorumRecovery";
/// Condition type (quorate's own): no certificate the members use expires within 30 days.
pub const CERTIFICATES_VALID: &str = "CertificatesValid";
/// Condition type (DEP-08): etcd's voting members are the ones `spec.replicas` asks for.
pub const SCALE_OPERATION_COMPLETE: &str = "ScaleOperationComplete";
/// Condition type: backups are current (computed elsewhere, from the snapshot leases).
pub const BACKUP_READY: &str = "BackupReady";
/// Condition type owned by the compaction controller; never recomputed by the status checks.
pub const LAST_SNAPSHOT_COMPACTION_SUCCEEDED: &str = "LastSnapshotCompactionSucceeded";

/// Conditions kept as they are when not computed in a run, because another controller owns them.
pub const SKIP_MERGE: &[&str] = &[LAST_SNAPSHOT_COMPACTION_SUCCEEDED];

/// Reason given to every computed condition while the cluster is scaled to zero.
pub const REASON_NOT_CHECKED: &str = "NotChecked";
/// Message given to every computed condition while the cluster is scaled to zero.
pub const MESSAGE_SCALED_DOWN: &str = "etcd cluster has been scaled down";

/// The outcome of one check, before times are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// Condition type, e.g. [`READY`].
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: &'static str,
    /// What a person should know.
    pub message: String,
}

fn result(
    type_: &'static str,
    status: ConditionStatus,
    reason: &'static str,
    message: impl Into<String>,
) -> CheckResult {
    CheckResult {
        type_,
        status,
        reason,
        message: message.into(),
    }
}

/// The checks that read only member status and member leases, in one call.
pub fn member_checks(
    members: &[EtcdMemberStatus],
    leases: &[MemberLease],
    replicas: i32,
) -> Vec<CheckResult> {
    vec![
        check_ready(members),
        check_all_members_ready(members, replicas),
        check_cluster_id_mismatch(members, leases),
    ]
}

/// Turns check results into the new `status.conditions`, sorted by type.
///
/// - `replicas == 0`: each computed condition keeps its previous status (Unknown if new),
///   with reason `NotChecked` and message "etcd cluster has been scaled down";
/// - `lastTransitionTime` moves to `now` only when the status changes; `lastUpdateTime` is `now`;
/// - a previous condition that was not computed now survives, untouched, only if its type is
///   in `skip_merge` (see [`SKIP_MERGE`]).
pub fn merge_conditions(
    previous: &[Condition],
    results: &[CheckResult],
    replicas: i32,
    skip_merge: &[&str],
    now: Timestamp,
) -> Vec<Condition> {
    let prev = |t: &str| previous.iter().find(|c| c.type_ == t);
    let mut out: Vec<Condition> = Vec::with_capacity(results.len());
    for r in results {
        if out.iter().any(|c| c.type_ == r.type_) {
            continue;
        }
        let old = prev(r.type_);
        let (status, reason, message) = if replicas == 0 {
            (
                old.map_or(ConditionStatus::Unknown, |c| c.status),
                REASON_NOT_CHECKED.to_string(),
                MESSAGE_SCALED_DOWN.to_string(),
            )
        } else {
            (r.status, r.reason.to_string(), r.message.clone())
        };
        let last_transition_time = match old {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Time(now),
        };
        out.push(Condition {
            type_: r.type_.to_string(),
            status,
            last_transition_time,
            last_update_time: Time(now),
            reason,
            message,
        });
    }
    for c in previous {
        let computed = results.iter().any(|r| r.type_ == c.type_);
        let kept = out.iter().any(|o| o.type_ == c.type_);
        if !computed && !kept && skip_merge.contains(&c.type_.as_str()) {
            out.push(c.clone());
        }
    }
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

#[cfg(test)]
mod tests {
    use super::test_support::{condition, earlier, members, now};
    use super::*;
    use EtcdMemberConditionStatus::*;
    use quorate_api::status::EtcdMemberConditionStatus;

    #[test]
    fn merge_keeps_transition_time_while_status_holds() {
        let previous = [
            condition(READY, ConditionStatus::True, earlier()),
            condition(ALL_MEMBERS_READY, ConditionStatus::True, earlier()),
        ];
        let results = [
            check_ready(&members(&[Ready, Ready, Ready])),
            check_all_members_ready(&members(&[Ready, Ready, NotReady]), 3),
        ];
        let out = merge_conditions(&previous, &results, 3, SKIP_MERGE, now());
        let ready = &out[1];
        assert_eq!(ready.type_, READY);
        assert_eq!(ready.last_transition_time, Time(earlier()));
        assert_eq!(ready.last_update_time, Time(now()));
        assert_eq!(ready.reason, "Quorate");
        let all = &out[0];
        assert_eq!(all.type_, ALL_MEMBERS_READY);
        assert_eq!(all.status, ConditionStatus::False);
        assert_eq!(all.last_transition_time, Time(now()));
    }

    #[test]
    fn merge_sorts_by_type_and_drops_stale_conditions_not_in_skip_merge() {
        let previous = [
            condition("Zeta", ConditionStatus::True, earlier()),
            condition(
                LAST_SNAPSHOT_COMPACTION_SUCCEEDED,
                ConditionStatus::False,
                earlier(),
            ),
        ];
        let ms = members(&[Ready]);
        let out = merge_conditions(&previous, &member_checks(&ms, &[], 1), 1, SKIP_MERGE, now());
        let types: Vec<&str> = out.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            vec![
                ALL_MEMBERS_READY,
                CLUSTER_ID_MISMATCH,
                LAST_SNAPSHOT_COMPACTION_SUCCEEDED,
                READY
            ]
        );
        let kept = &out[2];
        assert_eq!(
            kept, &previous[1],
            "a skip-merge condition is left untouched"
        );
    }

    #[test]
    fn scaled_to_zero_keeps_status_and_says_not_checked() {
        let previous = [condition(READY, ConditionStatus::True, earlier())];
        let results = member_checks(&[], &[], 0);
        let out = merge_conditions(&previous, &results, 0, SKIP_MERGE, now());
        for c in &out {
            assert_eq!(c.reason, REASON_NOT_CHECKED);
            assert_eq!(c.message, MESSAGE_SCALED_DOWN);
            assert_eq!(c.last_update_time, Time(now()));
        }
        let ready = out.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::True);
        assert_eq!(ready.last_transition_time, Time(earlier()));
        let all = out.iter().find(|c| c.type_ == ALL_MEMBERS_READY).unwrap();
        assert_eq!(all.status, ConditionStatus::Unknown);
        assert_eq!(all.last_transition_time, Time(now()));
    }

    #[test]
    fn a_repeated_result_type_is_merged_once() {
        let r = check_ready(&members(&[Ready]));
        let out = merge_conditions(&[], &[r.clone(), r], 1, SKIP_MERGE, now());
        assert_eq!(out.len(), 1);
    }
}
