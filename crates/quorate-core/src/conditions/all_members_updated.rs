//! `AllMembersUpdated`: whether every member runs the latest desired configuration. On
//! Kubernetes that is the StatefulSet's rollout; locally the supervisor fills the same facts
//! from the configuration hash each member publishes on its lease.

use quorate_api::status::ConditionStatus;

use super::{ALL_MEMBERS_UPDATED, CheckResult, result};

/// What `AllMembersUpdated` is judged from: the StatefulSet's generation and revisions (or
/// their local equivalents: the `Etcd`'s generation and configuration hashes).
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

#[cfg(test)]
mod tests {
    use super::*;

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
