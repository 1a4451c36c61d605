//! `MembersWaiting` (quorate's own): which members' agents hold back a decision about data
//! because evidence is missing (a member that may hold data is silent, the bucket cannot be
//! read, quorum is lost and nobody reported losing data), and why, in their own words from
//! their leases. This is where a person sees what is missing and what overrides it.

use quorate_api::status::ConditionStatus;

use super::{CheckResult, MEMBERS_WAITING, result};
use crate::lease::MemberLease;
use crate::membership::data_state::WAITING_ANNOTATION;

/// True with every waiting member's reason; False when no member waits.
pub fn check_members_waiting(member_leases: &[&MemberLease]) -> CheckResult {
    let waiting: Vec<String> = member_leases
        .iter()
        .filter_map(|l| {
            let why = l.annotations.get(WAITING_ANNOTATION)?;
            (!why.is_empty()).then(|| format!("{}: {why}", l.name))
        })
        .collect();
    if waiting.is_empty() {
        result(
            MEMBERS_WAITING,
            ConditionStatus::False,
            "NoMemberWaiting",
            "no member waits for evidence",
        )
    } else {
        result(
            MEMBERS_WAITING,
            ConditionStatus::True,
            "WaitingForEvidence",
            waiting.join("; "),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_every_waiting_member_with_its_reason() {
        let mut waiting = MemberLease::new("etcd-main-0");
        waiting.annotations.insert(
            WAITING_ANNOTATION.into(),
            "etcd-main-1 has data; quorate recover".into(),
        );
        let quiet = MemberLease::new("etcd-main-1");
        let r = check_members_waiting(&[&waiting, &quiet]);
        assert_eq!(r.status, ConditionStatus::True);
        assert_eq!(
            r.message,
            "etcd-main-0: etcd-main-1 has data; quorate recover"
        );
        assert_eq!(
            check_members_waiting(&[&quiet]).status,
            ConditionStatus::False
        );
    }
}
