//! The `status.conditions` of an `Etcd`, computed as etcd-druid computes them: each check is a
//! pure function returning a [`CheckResult`]; [`merge_conditions`] then turns the results into
//! conditions, keeping transition times and the conditions other controllers own.
//!
//! A new condition (e.g. `BackupReady`) is one more check function whose result is passed to
//! [`merge_conditions`] with the others.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use quorate_api::status::{
    Condition, ConditionStatus, EtcdMemberConditionStatus, EtcdMemberStatus,
};

use crate::lease::MemberLease;
use crate::membership::planner::quorum;

/// Condition type: a quorum of members is ready (the `READY`/`QUORATE` printer columns).
pub const READY: &str = "Ready";
/// Condition type: every expected member is present and ready.
pub const ALL_MEMBERS_READY: &str = "AllMembersReady";
/// Condition type: members report more than one etcd cluster ID.
pub const CLUSTER_ID_MISMATCH: &str = "ClusterIDMismatch";
/// Condition type: every pod runs the StatefulSet's current revision.
pub const ALL_MEMBERS_UPDATED: &str = "AllMembersUpdated";
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

/// What `AllMembersUpdated` is judged from: the StatefulSet's generation and revisions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatefulSetRollout {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.updatedReplicas`.
    pub updated_replicas: i32,
    /// `status.currentRevision`.
    pub current_revision: Option<String>,
    /// `status.updateRevision`.
    pub update_revision: Option<String>,
}

impl StatefulSetRollout {
    /// Whether every pod runs the latest template (druid's rule, also behind `status.ready`).
    pub fn is_complete(&self) -> bool {
        self.observed_generation.is_some()
            && self.observed_generation == self.generation
            && self.updated_replicas == self.replicas
            && self.current_revision == self.update_revision
    }
}

/// `AllMembersUpdated` (druid): True when the StatefulSet controller has seen the latest
/// generation, every replica is updated and the current revision is the update revision;
/// False while a rollout runs; False with `StatefulSetNotFound` without a StatefulSet.
pub fn check_all_members_updated(statefulset: Option<&StatefulSetRollout>) -> CheckResult {
    match statefulset {
        None => result(
            ALL_MEMBERS_UPDATED,
            ConditionStatus::False,
            "StatefulSetNotFound",
            "the StatefulSet does not exist",
        ),
        Some(s) if s.is_complete() => result(
            ALL_MEMBERS_UPDATED,
            ConditionStatus::True,
            "AllMembersUpdated",
            "all members run the latest pod template",
        ),
        Some(s) => result(
            ALL_MEMBERS_UPDATED,
            ConditionStatus::False,
            "NotAllMembersUpdated",
            format!(
                "{} of {} members run the latest pod template",
                s.updated_replicas, s.replicas
            ),
        ),
    }
}

/// `Ready`: True when members that are not NotReady (Unknown counts as ready) reach a quorum
/// of the members in status; Unknown when status lists no members.
pub fn check_ready(members: &[EtcdMemberStatus]) -> CheckResult {
    if members.is_empty() {
        return result(
            READY,
            ConditionStatus::Unknown,
            "NoMembersInStatus",
            "no members are listed in status yet",
        );
    }
    let up = members
        .iter()
        .filter(|m| m.status != EtcdMemberConditionStatus::NotReady)
        .count();
    let needed = quorum(members.len());
    if up >= needed {
        result(
            READY,
            ConditionStatus::True,
            "Quorate",
            format!(
                "{up} of {} members are ready or not known to be down; quorum is {needed}",
                members.len()
            ),
        )
    } else {
        result(
            READY,
            ConditionStatus::False,
            "QuorumLost",
            format!(
                "only {up} of {} members are ready or not known to be down; quorum needs {needed}",
                members.len()
            ),
        )
    }
}

/// `AllMembersReady`: True when status lists at least `replicas` members and all are Ready.
pub fn check_all_members_ready(members: &[EtcdMemberStatus], replicas: i32) -> CheckResult {
    if members.is_empty() {
        return result(
            ALL_MEMBERS_READY,
            ConditionStatus::Unknown,
            "NoMembersInStatus",
            "no members are listed in status yet",
        );
    }
    let not_ready: Vec<&str> = members
        .iter()
        .filter(|m| m.status != EtcdMemberConditionStatus::Ready)
        .map(|m| m.name.as_str())
        .collect();
    let expected = usize::try_from(replicas).unwrap_or(0);
    if members.len() >= expected && not_ready.is_empty() {
        result(
            ALL_MEMBERS_READY,
            ConditionStatus::True,
            "AllMembersReady",
            format!("all {} members are ready", members.len()),
        )
    } else if !not_ready.is_empty() {
        result(
            ALL_MEMBERS_READY,
            ConditionStatus::False,
            "NotAllMembersReady",
            format!("members not ready: {}", not_ready.join(", ")),
        )
    } else {
        result(
            ALL_MEMBERS_READY,
            ConditionStatus::False,
            "NotAllMembersReady",
            format!(
                "{} of {expected} members are listed in status; the others have not joined yet",
                members.len()
            ),
        )
    }
}

/// `ClusterIDMismatch`: True when members (other than Unknown ones) hold leases naming more
/// than one cluster ID; False with exactly one; Unknown with none, or when a holder identity
/// does not parse. Leases not yet held and old two-part identities carry no cluster ID and
/// are skipped (druid reports an unheld lease as unparseable; quorate treats it as bootstrapping).
pub fn check_cluster_id_mismatch(
    members: &[EtcdMemberStatus],
    leases: &[MemberLease],
) -> CheckResult {
    let mut ids: Vec<u64> = Vec::new();
    for lease in leases {
        let cluster_id = match lease.holder() {
            None => None,
            Some(Ok(h)) => h.cluster_id,
            Some(Err(e)) => {
                return result(
                    CLUSTER_ID_MISMATCH,
                    ConditionStatus::Unknown,
                    "UnableToParseLeaseHolderIdentity",
                    format!("lease {}: {e}", lease.name),
                );
            }
        };
        let counted = members
            .iter()
            .any(|m| m.name == lease.name && m.status != EtcdMemberConditionStatus::Unknown);
        if let Some(id) = cluster_id.filter(|_| counted)
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    match ids.as_slice() {
        [] => result(
            CLUSTER_ID_MISMATCH,
            ConditionStatus::Unknown,
            "NoClusterIDDetected",
            "no member lease names a cluster ID yet",
        ),
        [_] => result(
            CLUSTER_ID_MISMATCH,
            ConditionStatus::False,
            "NoClusterIDMismatchDetected",
            "all members belong to the same etcd cluster",
        ),
        many => result(
            CLUSTER_ID_MISMATCH,
            ConditionStatus::True,
            "MultipleClusterIDsDetected",
            format!(
                "members report different etcd cluster IDs ({}); a member has formed or joined \
                 another cluster and must be removed and re-added",
                many.iter()
                    .map(|id| format!("{id:x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
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
    use super::*;
    use EtcdMemberConditionStatus::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn now() -> Timestamp {
        t("2024-06-01T10:00:00Z")
    }

    fn earlier() -> Timestamp {
        t("2024-05-01T10:00:00Z")
    }

    fn member(name: &str, status: EtcdMemberConditionStatus) -> EtcdMemberStatus {
        EtcdMemberStatus {
            name: name.into(),
            id: None,
            role: None,
            status,
            reason: String::new(),
            last_transition_time: Time(earlier()),
        }
    }

    fn members(statuses: &[EtcdMemberConditionStatus]) -> Vec<EtcdMemberStatus> {
        statuses
            .iter()
            .enumerate()
            .map(|(i, s)| member(&format!("etcd-{i}"), *s))
            .collect()
    }

    fn held(name: &str, holder: &str) -> MemberLease {
        MemberLease {
            holder_identity: Some(holder.into()),
            ..MemberLease::new(name)
        }
    }

    fn condition(type_: &str, status: ConditionStatus, at: Timestamp) -> Condition {
        Condition {
            type_: type_.into(),
            status,
            last_transition_time: Time(at),
            last_update_time: Time(at),
            reason: "Old".into(),
            message: "old".into(),
        }
    }

    #[test]
    fn ready_counts_unknown_members_as_up() {
        let r = check_ready(&members(&[Ready, Unknown, NotReady]));
        assert_eq!((r.status, r.reason), (ConditionStatus::True, "Quorate"));
        let r = check_ready(&members(&[Ready, NotReady, NotReady]));
        assert_eq!((r.status, r.reason), (ConditionStatus::False, "QuorumLost"));
        assert!(r.message.contains("1 of 3"), "{}", r.message);
    }

    #[test]
    fn ready_needs_a_strict_majority() {
        let r = check_ready(&members(&[Ready, Ready, NotReady, NotReady]));
        assert_eq!(r.status, ConditionStatus::False);
        let r = check_ready(&members(&[Ready, Ready, Ready, NotReady]));
        assert_eq!(r.status, ConditionStatus::True);
    }

    #[test]
    fn no_members_is_unknown() {
        let r = check_ready(&[]);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::Unknown, "NoMembersInStatus")
        );
        let r = check_all_members_ready(&[], 3);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::Unknown, "NoMembersInStatus")
        );
    }

    #[test]
    fn all_members_ready_needs_every_expected_member_ready() {
        let r = check_all_members_ready(&members(&[Ready, Ready, Ready]), 3);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::True, "AllMembersReady")
        );
        let r = check_all_members_ready(&members(&[Ready, Unknown, Ready]), 3);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::False, "NotAllMembersReady")
        );
        assert!(r.message.contains("etcd-1"), "{}", r.message);
        let r = check_all_members_ready(&members(&[Ready, Ready]), 3);
        assert_eq!(r.status, ConditionStatus::False);
        assert!(r.message.contains("2 of 3"), "{}", r.message);
    }

    #[test]
    fn one_cluster_id_is_no_mismatch() {
        let ms = members(&[Ready, Ready]);
        let leases = [held("etcd-0", "1:c1:Leader"), held("etcd-1", "2:c1:Member")];
        let r = check_cluster_id_mismatch(&ms, &leases);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::False, "NoClusterIDMismatchDetected")
        );
    }

    #[test]
    fn two_cluster_ids_are_a_mismatch() {
        let ms = members(&[Ready, NotReady]);
        let leases = [held("etcd-0", "1:c1:Leader"), held("etcd-1", "2:c2:Member")];
        let r = check_cluster_id_mismatch(&ms, &leases);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::True, "MultipleClusterIDsDetected")
        );
        assert!(
            r.message.contains("c1") && r.message.contains("c2"),
            "{}",
            r.message
        );
    }

    #[test]
    fn unknown_and_unlisted_members_are_skipped() {
        let ms = members(&[Ready, Unknown]);
        let leases = [
            held("etcd-0", "1:c1:Leader"),
            held("etcd-1", "2:c2:Member"),
            held("etcd-2", "3:c3:Member"), // not in status: bootstrapping
        ];
        let r = check_cluster_id_mismatch(&ms, &leases);
        assert_eq!(r.status, ConditionStatus::False);
    }

    #[test]
    fn no_cluster_id_is_unknown() {
        let ms = members(&[Ready, Ready]);
        let leases = [held("etcd-0", "1:Leader"), MemberLease::new("etcd-1")];
        let r = check_cluster_id_mismatch(&ms, &leases);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::Unknown, "NoClusterIDDetected")
        );
    }

    #[test]
    fn unparseable_holder_is_unknown_and_named() {
        let ms = members(&[Ready, Ready]);
        let leases = [held("etcd-0", "1:c1:Leader"), held("etcd-1", "garbage")];
        let r = check_cluster_id_mismatch(&ms, &leases);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::Unknown, "UnableToParseLeaseHolderIdentity")
        );
        assert!(r.message.contains("etcd-1"), "{}", r.message);
    }

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

    #[test]
    fn all_members_updated_follows_the_statefulset_rollout() {
        let done = StatefulSetRollout {
            generation: Some(3),
            observed_generation: Some(3),
            replicas: 3,
            updated_replicas: 3,
            current_revision: Some("r2".into()),
            update_revision: Some("r2".into()),
        };
        assert_eq!(
            check_all_members_updated(Some(&done)).status,
            ConditionStatus::True
        );
        let rolling = StatefulSetRollout {
            updated_replicas: 1,
            current_revision: Some("r1".into()),
            ..done.clone()
        };
        let r = check_all_members_updated(Some(&rolling));
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::False, "NotAllMembersUpdated")
        );
        assert_eq!(r.message, "1 of 3 members run the latest pod template");
        let unseen = StatefulSetRollout {
            observed_generation: Some(2),
            ..done.clone()
        };
        assert!(!unseen.is_complete());
        let r = check_all_members_updated(None);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::False, "StatefulSetNotFound")
        );
    }
}
