//! `ClusterIDMismatch`: whether members report more than one etcd cluster ID on their leases,
//! i.e. a member formed or joined another cluster.

use quorate_api::status::{ConditionStatus, EtcdMemberConditionStatus, EtcdMemberStatus};

use super::{CLUSTER_ID_MISMATCH, CheckResult, result};
use crate::lease::MemberLease;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::test_support::{held, members};
    use EtcdMemberConditionStatus::*;

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
}
