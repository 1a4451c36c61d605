//! `ScaleOperationComplete` (DEP-08's condition): whether etcd's own membership has reached
//! `spec.replicas`, and while it has not, what the scale operation is doing (members leaving or
//! joining, a hibernation waiting for its final snapshot). Computed from etcd's member list,
//! never from how many processes or pods run: five pods can hold a three-member cluster.

use quorate_api::status::ConditionStatus;

use super::{CheckResult, SCALE_OPERATION_COMPLETE, result};
use crate::hibernation::Hibernation;

/// What the scale condition is computed from.
#[derive(Clone, Copy, Debug)]
pub struct ScaleObservation<'a> {
    /// `spec.replicas`.
    pub replicas: i32,
    /// The desired member names.
    pub desired: &'a [String],
    /// Names of etcd's voting members as its leader lists them; `None` when no leader answered.
    pub voters: Option<&'a [String]>,
    /// Where a hibernation stands, when one was requested.
    pub hibernation: Option<&'a Hibernation>,
}

/// True once etcd's voting members are exactly the desired ones (or the cluster hibernated);
/// False while members leave or join or a hibernation waits; Unknown without etcd's word.
pub fn check_scale_operation(o: &ScaleObservation<'_>) -> CheckResult {
    let r =
        |status, reason, message: String| result(SCALE_OPERATION_COMPLETE, status, reason, message);
    if o.replicas == 0 {
        return match o.hibernation {
            Some(Hibernation::Hibernated {
                final_snapshot_revision: Some(revision),
                ..
            }) => r(
                ConditionStatus::True,
                "Hibernated",
                format!("hibernated after a final full snapshot at revision {revision}"),
            ),
            Some(Hibernation::Hibernated { warning, .. }) => r(
                ConditionStatus::True,
                "HibernatedWithoutFinalSnapshot",
                warning.clone().unwrap_or_default(),
            ),
            Some(Hibernation::Pending {
                failures,
                last_error,
            }) => r(
                ConditionStatus::False,
                if last_error.is_some() {
                    "FinalSnapshotFailed"
                } else {
                    "Hibernating"
                },
                Hibernation::pending_message(*failures, last_error.as_deref()),
            ),
            None => r(
                ConditionStatus::False,
                "Hibernating",
                Hibernation::pending_message(0, None),
            ),
        };
    }
    let Some(voters) = o.voters else {
        return r(
            ConditionStatus::Unknown,
            "MembershipUnknown",
            "etcd's member list was not observed (no leader answered)".into(),
        );
    };
    let leaving: Vec<&str> = voters
        .iter()
        .filter(|v| !o.desired.contains(v))
        .map(String::as_str)
        .collect();
    let joining: Vec<&str> = o
        .desired
        .iter()
        .filter(|d| !voters.contains(d))
        .map(String::as_str)
        .collect();
    match (leaving.is_empty(), joining.is_empty()) {
        (true, true) => r(
            ConditionStatus::True,
            "Complete",
            format!(
                "etcd has the {} voting member(s) spec.replicas asks for",
                o.replicas
            ),
        ),
        (false, _) => r(
            ConditionStatus::False,
            "ScalingIn",
            format!(
                "{} leave(s) etcd's membership, one member at a time; {} voting member(s) now, {} wanted",
                leaving.join(", "),
                voters.len(),
                o.replicas
            ),
        ),
        (true, false) => r(
            ConditionStatus::False,
            "ScalingOut",
            format!(
                "{} join(s) as learner(s) and will be promoted; {} voting member(s) now, {} wanted",
                joining.join(", "),
                voters.len(),
                o.replicas
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("e-{i}")).collect()
    }

    fn check(replicas: i32, voters: Option<&[String]>, h: Option<&Hibernation>) -> CheckResult {
        let desired = names(usize::try_from(replicas).unwrap());
        check_scale_operation(&ScaleObservation {
            replicas,
            desired: &desired,
            voters,
            hibernation: h,
        })
    }

    #[test]
    fn complete_only_when_etcd_has_exactly_the_desired_voters() {
        let three = names(3);
        let five = names(5);
        assert_eq!(check(3, Some(&three), None).status, ConditionStatus::True);
        let shrinking = check(3, Some(&five), None);
        assert_eq!(
            (shrinking.status, shrinking.reason),
            (ConditionStatus::False, "ScalingIn")
        );
        assert!(
            shrinking.message.contains("e-3, e-4"),
            "{}",
            shrinking.message
        );
        let growing = check(5, Some(&three), None);
        assert_eq!(growing.reason, "ScalingOut");
        assert_eq!(check(3, None, None).status, ConditionStatus::Unknown);
    }

    #[test]
    fn hibernation_is_complete_only_once_the_members_stopped() {
        let pending = Hibernation::Pending {
            failures: 2,
            last_error: Some("store refused".into()),
        };
        let c = check(0, None, Some(&pending));
        assert_eq!(
            (c.status, c.reason),
            (ConditionStatus::False, "FinalSnapshotFailed")
        );
        assert!(
            c.message.contains("store refused")
                && c.message.contains("hibernate-without-final-snapshot"),
            "{}",
            c.message
        );
        let done = Hibernation::Hibernated {
            final_snapshot_revision: Some(42),
            warning: None,
            at: jiff::Timestamp::UNIX_EPOCH,
        };
        let c = check(0, None, Some(&done));
        assert_eq!((c.status, c.reason), (ConditionStatus::True, "Hibernated"));
        assert!(c.message.contains("42"));
    }
}
