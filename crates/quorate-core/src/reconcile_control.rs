//! Whether the operator may change an `Etcd`'s components now: druid's reconcile controls
//! (auto-reconcile, the operation annotations, suspension) as pure decisions, so the
//! controller and its tests agree on one reading of them.

use quorate_api::Etcd;
use quorate_api::annotations::{has_reconcile_operation, is_spec_reconcile_suspended};
use quorate_api::status::LastOperationState;

/// What the spec flow does in this pass. The status flow runs in every case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecDecision {
    /// Sync the components.
    Run,
    /// `druid.gardener.cloud/suspend-etcd-spec-reconcile` is set: leave the components alone
    /// and say so with a Warning event.
    Suspended,
    /// The spec changed but auto-reconcile is off and no operation annotation asks for it.
    AwaitingAnnotation,
    /// Nothing to do: the observed generation is current.
    UpToDate,
}

/// Decides the spec flow for `etcd`. A cluster never reconciled (no `observedGeneration`) is
/// always created, as druid does; suspension wins over everything else.
pub fn spec_decision(etcd: &Etcd, auto_reconcile: bool) -> SpecDecision {
    let annotations = etcd.metadata.annotations.as_ref();
    if is_spec_reconcile_suspended(annotations) {
        return SpecDecision::Suspended;
    }
    let observed = etcd.status.as_ref().and_then(|s| s.observed_generation);
    let Some(observed) = observed else {
        return SpecDecision::Run;
    };
    if has_reconcile_operation(annotations) {
        return SpecDecision::Run;
    }
    let generation_current = etcd.metadata.generation.is_none_or(|g| g <= observed);
    let last_succeeded = etcd
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_none_or(|op| op.state == LastOperationState::Succeeded);
    if generation_current && last_succeeded {
        return SpecDecision::UpToDate;
    }
    if auto_reconcile {
        SpecDecision::Run
    } else if generation_current {
        // An earlier pass did not finish (error or wait): keep going, it was already allowed.
        SpecDecision::Run
    } else {
        SpecDecision::AwaitingAnnotation
    }
}

/// Whether `etcd` waits for its spec flow on a generation not yet reconciled: a new cluster, or
/// a spec change the operator may apply now — the work that goes before refreshing settled
/// clusters' statuses (`status::refresh`). A cluster being deleted, suspended, or whose change
/// waits for the annotation does not wait for the operator.
pub fn awaits_spec_flow(etcd: &Etcd, auto_reconcile: bool) -> bool {
    if etcd.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let observed = etcd.status.as_ref().and_then(|s| s.observed_generation);
    let new_generation = match (observed, etcd.metadata.generation) {
        (None, _) => true,
        (Some(observed), Some(generation)) => generation > observed,
        (Some(_), None) => false,
    };
    new_generation && spec_decision(etcd, auto_reconcile) == SpecDecision::Run
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use quorate_api::annotations::{
        DRUID_OPERATION, GARDENER_OPERATION, SUSPEND_ETCD_SPEC_RECONCILE,
    };
    use quorate_api::status::{EtcdStatus, LastOperationType};
    use std::collections::BTreeMap;

    fn etcd(generation: i64, observed: Option<i64>, annotations: &[(&str, &str)]) -> Etcd {
        let mut etcd = Etcd::new("main", Default::default());
        etcd.metadata.generation = Some(generation);
        etcd.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        etcd.status = Some(EtcdStatus {
            observed_generation: observed,
            ..Default::default()
        });
        etcd
    }

    fn with_last(mut etcd: Etcd, state: LastOperationState) -> Etcd {
        let op = crate::last_operation::reconcile_operation(
            Some(1),
            state,
            "",
            "run",
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(op.type_, LastOperationType::Reconcile);
        etcd.status.as_mut().unwrap().last_operation = Some(op);
        etcd
    }

    #[test]
    fn a_new_cluster_is_created_without_annotation_or_auto_reconcile() {
        assert_eq!(spec_decision(&etcd(1, None, &[]), false), SpecDecision::Run);
    }

    #[test]
    fn suspension_wins_even_for_a_new_cluster_and_with_the_annotation() {
        let e = etcd(
            2,
            None,
            &[
                (SUSPEND_ETCD_SPEC_RECONCILE, ""),
                (DRUID_OPERATION, "reconcile"),
            ],
        );
        assert_eq!(spec_decision(&e, true), SpecDecision::Suspended);
    }

    #[test]
    fn a_spec_change_waits_for_the_annotation_unless_auto_reconcile_is_on() {
        let e = etcd(2, Some(1), &[]);
        assert_eq!(spec_decision(&e, false), SpecDecision::AwaitingAnnotation);
        assert_eq!(spec_decision(&e, true), SpecDecision::Run);
        for key in [DRUID_OPERATION, GARDENER_OPERATION] {
            let e = etcd(2, Some(1), &[(key, "reconcile")]);
            assert_eq!(spec_decision(&e, false), SpecDecision::Run, "{key}");
        }
        let other_value = etcd(2, Some(1), &[(DRUID_OPERATION, "restore")]);
        assert_eq!(
            spec_decision(&other_value, false),
            SpecDecision::AwaitingAnnotation
        );
    }

    #[test]
    fn a_current_generation_after_success_needs_nothing() {
        let e = with_last(etcd(2, Some(2), &[]), LastOperationState::Succeeded);
        assert_eq!(spec_decision(&e, true), SpecDecision::UpToDate);
        assert_eq!(spec_decision(&e, false), SpecDecision::UpToDate);
    }

    #[test]
    fn an_unfinished_pass_continues_without_a_new_annotation() {
        for state in [LastOperationState::Requeue, LastOperationState::Error] {
            let e = with_last(etcd(2, Some(2), &[]), state);
            assert_eq!(spec_decision(&e, false), SpecDecision::Run, "{state:?}");
        }
    }

    #[test]
    fn the_annotation_forces_a_pass_even_when_up_to_date() {
        let e = with_last(
            etcd(2, Some(2), &[(DRUID_OPERATION, "reconcile")]),
            LastOperationState::Succeeded,
        );
        assert_eq!(spec_decision(&e, false), SpecDecision::Run);
    }

    #[test]
    fn new_clusters_and_allowed_spec_changes_await_the_spec_flow() {
        assert!(awaits_spec_flow(&etcd(1, None, &[]), false));
        assert!(awaits_spec_flow(&etcd(2, Some(1), &[]), true));
        assert!(awaits_spec_flow(
            &etcd(2, Some(1), &[(GARDENER_OPERATION, "reconcile")]),
            false
        ));
        // Waiting for the annotation, settled, suspended or being deleted: not the operator's.
        assert!(!awaits_spec_flow(&etcd(2, Some(1), &[]), false));
        assert!(!awaits_spec_flow(&etcd(1, Some(1), &[]), true));
        assert!(!awaits_spec_flow(
            &etcd(1, None, &[(SUSPEND_ETCD_SPEC_RECONCILE, "true")]),
            true
        ));
        let mut deleting = etcd(1, None, &[]);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        assert!(!awaits_spec_flow(&deleting, true));
        // A settled cluster's failed pass is retried, but on a generation already reconciled.
        let failed = with_last(etcd(1, Some(1), &[]), LastOperationState::Error);
        assert!(!awaits_spec_flow(&failed, true));
    }
}
