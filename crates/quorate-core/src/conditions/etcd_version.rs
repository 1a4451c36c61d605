//! `EtcdVersionCurrent` (quorate's own): whether the members run the etcd version the `Etcd`
//! asks for, and while a (chained) version change runs, which step runs and what it waits for.

use quorate_api::status::ConditionStatus;

use super::{CheckResult, ETCD_VERSION_CURRENT, result};
use crate::etcd_version::VersionDecision;

/// True once the members run the requested version and etcd reports it as the cluster
/// version; False with the step and its wait while a change runs.
pub fn check_etcd_version(decision: &VersionDecision) -> CheckResult {
    match &decision.progress {
        Some(progress) if decision.snapshot_wait => result(
            ETCD_VERSION_CURRENT,
            ConditionStatus::False,
            "VersionStepWaitsForSnapshot",
            progress.clone(),
        ),
        Some(progress) => result(
            ETCD_VERSION_CURRENT,
            ConditionStatus::False,
            "VersionChangeInProgress",
            progress.clone(),
        ),
        None if decision.run != decision.target => result(
            ETCD_VERSION_CURRENT,
            ConditionStatus::False,
            "VersionChangeInProgress",
            format!(
                "etcd {} runs; {} is asked for",
                decision.run, decision.target
            ),
        ),
        None => result(
            ETCD_VERSION_CURRENT,
            ConditionStatus::True,
            "VersionCurrent",
            format!("every member runs etcd {}, as asked", decision.run),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_api::EtcdVersion;

    #[test]
    fn says_the_step_and_its_wait_until_the_target_is_reached() {
        let v = |s| EtcdVersion::parse(s).unwrap();
        let running = VersionDecision {
            run: v("3.6"),
            target: v("3.7"),
            progress: Some("etcd 3.5 → 3.6 → 3.7: step to 3.6 runs".into()),
            snapshot_wait: false,
        };
        let r = check_etcd_version(&running);
        assert_eq!(r.status, ConditionStatus::False);
        assert!(r.message.contains("step to 3.6 runs"), "{}", r.message);
        let done = VersionDecision {
            run: v("3.7"),
            target: v("3.7"),
            progress: None,
            snapshot_wait: false,
        };
        let r = check_etcd_version(&done);
        assert_eq!(r.status, ConditionStatus::True);
        assert_eq!(r.message, "every member runs etcd 3.7, as asked");
    }
}
