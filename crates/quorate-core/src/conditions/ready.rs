//! `Ready`: whether a quorum of the members in status is ready (the `QUORATE` printer column),
//! and whether etcd itself refuses service with an alarm, which no quorum makes up for.

use quorate_api::status::{ConditionStatus, EtcdMemberConditionStatus, EtcdMemberStatus};

use super::{CheckResult, READY, result};
use crate::membership::planner::quorum;

/// Reason of a `Ready` condition that is False because etcd reports an alarm.
pub const REASON_ALARM_RAISED: &str = "AlarmRaised";

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

/// `Ready` when etcd may report alarms: each entry of `alarms` describes one active alarm
/// (e.g. "NOSPACE on member etcd-main-0"). An active alarm makes `Ready` False whatever the
/// quorum, because etcd refuses writes until the alarm is cleared; without alarms this is
/// [`check_ready`].
pub fn check_ready_under_alarms(members: &[EtcdMemberStatus], alarms: &[String]) -> CheckResult {
    if alarms.is_empty() {
        return check_ready(members);
    }
    result(
        READY,
        ConditionStatus::False,
        REASON_ALARM_RAISED,
        format!(
            "etcd reports {}; it refuses writes until the cause is dealt with and the alarm is \
             disarmed (NOSPACE: quorate compacts, defragments every member and disarms it by \
             itself once the data fits under the quota; when it does not, MembersWaiting says so)",
            alarms.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::test_support::members;
    use EtcdMemberConditionStatus::*;

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
    }

    #[test]
    fn an_alarm_makes_a_quorate_cluster_not_ready_and_is_named() {
        let ms = members(&[Ready, Ready, Ready]);
        let r = check_ready_under_alarms(&ms, &["NOSPACE on member etcd-0".into()]);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::False, REASON_ALARM_RAISED)
        );
        assert!(
            r.message.contains("NOSPACE on member etcd-0"),
            "{}",
            r.message
        );
        assert_eq!(check_ready_under_alarms(&ms, &[]), check_ready(&ms));
    }
}
