//! `AllMembersReady`: whether every expected member is listed in status and ready.

use quorate_api::status::{ConditionStatus, EtcdMemberConditionStatus, EtcdMemberStatus};

use super::{ALL_MEMBERS_READY, CheckResult, result};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::test_support::members;
    use EtcdMemberConditionStatus::*;

    #[test]
    fn no_members_is_unknown() {
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
}
