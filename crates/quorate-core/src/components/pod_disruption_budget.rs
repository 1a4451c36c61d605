//! PodDisruptionBudget `<name>`: voluntary evictions (drains) may never take the cluster below
//! quorum. `policy/v1` (Kubernetes 1.21+; the operator refuses to start on a server without it).

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use quorate_api::Etcd;
use quorate_api::annotations::ALLOW_UNHEALTHY_POD_EVICTION;
use quorate_api::names::{component, default_labels, pod_disruption_budget_name};

use crate::last_operation::ErrorCode;

use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when the PodDisruptionBudget cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncPodDisruptionBudget;

/// `unhealthyPodEvictionPolicy` set by [`ALLOW_UNHEALTHY_POD_EVICTION`]: pods that are not
/// ready may be evicted even when the budget is exhausted.
pub const ALWAYS_ALLOW: &str = "AlwaysAllow";

/// Members that must stay available: a majority (`replicas/2 + 1`) when there is more than
/// one member; 0 for one member (or none), so a single-member cluster never blocks a drain.
pub fn min_available(replicas: i32) -> i32 {
    if replicas <= 1 { 0 } else { replicas / 2 + 1 }
}

/// The PodDisruptionBudget of the `running` member pods (`policy/v1`): a majority of the
/// members that run, so a scale-in in progress is protected at its current size.
pub fn build(etcd: &Etcd, running: i32) -> Result<PodDisruptionBudget, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    let allow_unhealthy = etcd
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ALLOW_UNHEALTHY_POD_EVICTION));
    Ok(PodDisruptionBudget {
        metadata: id.object_meta(
            component::POD_DISRUPTION_BUDGET,
            &pod_disruption_budget_name(&id.name),
        ),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available(running))),
            selector: Some(LabelSelector {
                match_labels: Some(default_labels(&id.name)),
                ..LabelSelector::default()
            }),
            unhealthy_pod_eviction_policy: allow_unhealthy.then(|| ALWAYS_ALLOW.to_string()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

/// `pdb` as a manifest, for server-side apply.
pub fn to_manifest(pdb: &PodDisruptionBudget) -> Result<serde_json::Value, ComponentError> {
    serde_json::to_value(pdb).map_err(|e| ComponentError::Serialize {
        what: "the PodDisruptionBudget",
        name: pdb.metadata.name.clone().unwrap_or_default(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use std::collections::BTreeMap;

    #[test]
    fn min_available_is_a_majority_or_zero_for_one_member() {
        assert_eq!(min_available(0), 0);
        assert_eq!(min_available(1), 0);
        assert_eq!(min_available(2), 2);
        assert_eq!(min_available(3), 2);
        assert_eq!(min_available(4), 3);
        assert_eq!(min_available(5), 3);
    }

    #[test]
    fn selects_the_default_labels() {
        let pdb = build(&etcd("etcd-main", 3), 3).unwrap();
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(2)));
        assert_eq!(
            spec.selector.unwrap().match_labels.unwrap(),
            default_labels("etcd-main")
        );
        assert_eq!(spec.unhealthy_pod_eviction_policy, None);
        assert_eq!(
            pdb.metadata.labels.unwrap()["app.kubernetes.io/component"],
            "etcd-pdb"
        );
    }

    #[test]
    fn annotation_allows_unhealthy_pod_eviction() {
        let mut e = etcd("etcd-main", 5);
        e.metadata.annotations = Some(BTreeMap::from([(
            ALLOW_UNHEALTHY_POD_EVICTION.to_string(),
            String::new(),
        )]));
        let pdb = build(&e, e.spec.replicas).unwrap();
        let spec = pdb.spec.as_ref().unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(3)));
        assert_eq!(
            spec.unhealthy_pod_eviction_policy.as_deref(),
            Some("AlwaysAllow")
        );
        let v1 = to_manifest(&pdb).unwrap();
        assert_eq!(v1["apiVersion"], "policy/v1");
        assert_eq!(v1["kind"], "PodDisruptionBudget");
        assert_eq!(v1["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    }
}
