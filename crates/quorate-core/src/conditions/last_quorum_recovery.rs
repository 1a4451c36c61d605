//! `LastQuorumRecovery` (quorate's own): the quorum-loss recovery a member carried out, as it
//! recorded it on its lease (which member, at which revision, which members it dropped and on
//! whose request), so a person sees it in the status and an event without reading agent logs.

use quorate_api::status::ConditionStatus;

use super::{CheckResult, LAST_QUORUM_RECOVERY, result};
use crate::lease::MemberLease;
use crate::membership::recovery::RecoveryRecord;

/// True with the recorded recovery; False when no member recorded one.
pub fn check_last_quorum_recovery(member_leases: &[&MemberLease]) -> CheckResult {
    let records: Vec<String> = member_leases
        .iter()
        .filter_map(|l| RecoveryRecord::of_lease(l))
        .map(|r| {
            let dropped: Vec<String> = r.dropped.iter().map(|id| format!("{id:x}")).collect();
            let request = r
                .request
                .as_deref()
                .map(|q| format!(" on request {q}"))
                .unwrap_or_else(|| " automatically (a majority reported lost data)".into());
            format!(
                "{} recovered cluster {:x} at revision {}{request}; dropped members {} rejoin as learners",
                r.member,
                r.cluster_id,
                r.revision,
                dropped.join(", ")
            )
        })
        .collect();
    if records.is_empty() {
        result(
            LAST_QUORUM_RECOVERY,
            ConditionStatus::False,
            "NoRecovery",
            "no quorum-loss recovery recorded",
        )
    } else {
        result(
            LAST_QUORUM_RECOVERY,
            ConditionStatus::True,
            "QuorumRecovered",
            records.join("; "),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::recovery::RECOVERY_ANNOTATION;

    #[test]
    fn names_the_member_the_revision_and_the_dropped_members() {
        let mut lease = MemberLease::new("etcd-main-0");
        let record = RecoveryRecord {
            member: "etcd-main-0".into(),
            member_id: 1,
            cluster_id: 0xc1,
            revision: 42,
            dropped: vec![0xa, 0xb],
            request: None,
        };
        lease.annotations.insert(
            RECOVERY_ANNOTATION.into(),
            serde_json::to_string(&record).unwrap(),
        );
        let r = check_last_quorum_recovery(&[&lease]);
        assert_eq!(r.status, ConditionStatus::True);
        assert!(
            r.message
                .contains("etcd-main-0 recovered cluster c1 at revision 42 automatically")
                && r.message.contains("a, b"),
            "{}",
            r.message
        );
        let none = MemberLease::new("etcd-main-1");
        assert_eq!(
            check_last_quorum_recovery(&[&none]).status,
            ConditionStatus::False
        );
    }
}
