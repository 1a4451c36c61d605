//! PodDisruptionBudget `<name>`: voluntary evictions (drains) may never take the cluster below
//! quorum. Rendered as `policy/v1`; [`to_manifest`] also writes it as `policy/v1beta1` for API
//! servers older than 1.21, which do not serve `policy/v1`.

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

/// API version a PodDisruptionBudget is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PdbApiVersion {
    /// `policy/v1`, served from Kubernetes 1.21.
    V1,
    /// `policy/v1beta1`, for API servers up to 1.20 (removed in 1.25).
    V1Beta1,
}

impl PdbApiVersion {
    /// The `apiVersion` string.
    pub fn as_str(self) -> &'static str {
        match self {
            PdbApiVersion::V1 => "policy/v1",
            PdbApiVersion::V1Beta1 => "policy/v1beta1",
        }
    }
}

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

/// `pdb` as a manifest in `version`. `policy/v1beta1` has the same shape except for
/// `unhealthyPodEvictionPolicy`, which it lacks and is therefore dropped. (v1beta1 also reads
/// an empty selector as "no pods" where v1 reads "all pods"; ours is never empty.)
pub fn to_manifest(
    pdb: &PodDisruptionBudget,
    version: PdbApiVersion,
) -> Result<serde_json::Value, ComponentError> {
    let mut value = serde_json::to_value(pdb).map_err(|e| ComponentError::Serialize {
        what: "the PodDisruptionBudget",
        name: pdb.metadata.name.clone().unwrap_or_default(),
        detail: e.to_string(),
    })?;
    if version == PdbApiVersion::V1Beta1 {
        value["apiVersion"] = version.as_str().into();
        if let Some(spec) = value
            .get_mut("spec")
            .and_then(serde_json::Value::as_object_mut)
        {
            spec.remove("unhealthyPodEvictionPolicy");
        }
    }
    Ok(value)
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
        let v1 = to_manifest(&pdb, PdbApiVersion::V1).unwrap();
        assert_eq!(v1["apiVersion"], "policy/v1");
        assert_eq!(v1["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
        let beta = to_manifest(&pdb, PdbApiVersion::V1Beta1).unwrap();
        assert_eq!(beta["apiVersion"], "policy/v1beta1");
        assert_eq!(beta["kind"], "PodDisruptionBudget");
        assert!(beta["spec"].get("unhealthyPodEvictionPolicy").is_none());
        assert_eq!(beta["spec"]["minAvailable"], 3);
        assert_eq!(beta["metadata"], v1["metadata"]);
    }
}
