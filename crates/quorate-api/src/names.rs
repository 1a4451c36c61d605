//! Names and labels of everything derived from an `Etcd`, in one place so the naming contract
//! with etcd-druid (and with existing clusters) is explicit: `<name>` StatefulSet,
//! `<name>-config`, `<name>-client`, `<name>-peer`, member leases `<name>-<i>` (or
//! `<prefix>-<name>-<i>`), snapshot leases `<name>-full-snap`/`<name>-delta-snap`, ...

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::etcd::Etcd;

/// Longest `Etcd` name we accept: `<name>-delta-snap` must stay a 63-character label, and so
/// must the StatefulSet's `<name>-<10-char revision hash>` pod label.
pub const MAX_ETCD_NAME_LENGTH: usize = 63 - "-delta-snap".len();
/// Longest `memberNamePrefix` (druid's limit).
pub const MAX_MEMBER_NAME_PREFIX_LENGTH: usize = 63;
/// Key of the etcd configuration in the `<name>-config` ConfigMap.
pub const CONFIG_MAP_KEY: &str = "etcd.conf.yaml";

/// `app.kubernetes.io/managed-by`, set to [`MANAGED_BY_VALUE`] on every managed resource.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`]; druid's, so druid-aware tooling recognises our resources.
pub const MANAGED_BY_VALUE: &str = "etcd-druid";
/// `app.kubernetes.io/part-of`, set to the `Etcd` name.
pub const LABEL_PART_OF: &str = "app.kubernetes.io/part-of";
/// `app.kubernetes.io/component`, set to one of the [`component`] names.
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/name`, set to the resource's own name.
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";

/// Values of [`LABEL_COMPONENT`] per kind of managed resource (druid's names).
pub mod component {
    /// The client Service.
    pub const CLIENT_SERVICE: &str = "etcd-client-service";
    /// The etcd ConfigMap.
    pub const CONFIG_MAP: &str = "etcd-configmap";
    /// Member leases.
    pub const MEMBER_LEASE: &str = "etcd-member-lease";
    /// Full and delta snapshot leases.
    pub const SNAPSHOT_LEASE: &str = "etcd-snapshot-lease";
    /// The headless peer Service.
    pub const PEER_SERVICE: &str = "etcd-peer-service";
    /// The PodDisruptionBudget.
    pub const POD_DISRUPTION_BUDGET: &str = "etcd-pdb";
    /// The Role.
    pub const ROLE: &str = "etcd-role";
    /// The RoleBinding.
    pub const ROLE_BINDING: &str = "etcd-role-binding";
    /// The ServiceAccount.
    pub const SERVICE_ACCOUNT: &str = "etcd-service-account";
    /// The StatefulSet and its pods.
    pub const STATEFULSET: &str = "etcd-statefulset";
    /// The snapshot-compaction Job.
    pub const SNAPSHOT_COMPACTION_JOB: &str = "etcd-snapshot-compaction-job";
    /// The agents' bearer token Secret (quorate's own).
    pub const AGENT_TOKEN: &str = "etcd-agent-token";
}

/// Name of pod (and StatefulSet ordinal) `ordinal`: `<name>-<ordinal>`.
pub fn pod_name(etcd_name: &str, ordinal: u32) -> String {
    format!("{etcd_name}-{ordinal}")
}

/// etcd member name for a pod: `<prefix>-<pod>` when a non-empty prefix is set, else the pod
/// name.
pub fn member_name_for_pod(member_name_prefix: Option<&str>, pod_name: &str) -> String {
    match member_name_prefix.filter(|p| !p.is_empty()) {
        Some(prefix) => format!("{prefix}-{pod_name}"),
        None => pod_name.to_string(),
    }
}

/// etcd member name of ordinal `ordinal` of this `Etcd`.
pub fn member_name(etcd: &Etcd, ordinal: u32) -> String {
    member_name_for_pod(
        etcd.spec.member_name_prefix.as_deref(),
        &pod_name(&etcd.name_any(), ordinal),
    )
}

/// Member lease of ordinal `ordinal`; named like the member.
pub fn member_lease_name(etcd: &Etcd, ordinal: u32) -> String {
    member_name(etcd, ordinal)
}

/// Member leases for every ordinal below `spec.replicas`.
pub fn member_lease_names(etcd: &Etcd) -> Vec<String> {
    (0..replica_count(etcd))
        .map(|i| member_lease_name(etcd, i))
        .collect()
}

/// Pod names for every ordinal below `spec.replicas`.
pub fn pod_names(etcd: &Etcd) -> Vec<String> {
    let name = etcd.name_any();
    (0..replica_count(etcd))
        .map(|i| pod_name(&name, i))
        .collect()
}

fn replica_count(etcd: &Etcd) -> u32 {
    u32::try_from(etcd.spec.replicas).unwrap_or(0)
}

/// Lease whose holder identity records the last full snapshot's revision.
pub fn full_snapshot_lease_name(etcd_name: &str) -> String {
    format!("{etcd_name}-full-snap")
}

/// Lease whose holder identity records the last delta snapshot's revision.
pub fn delta_snapshot_lease_name(etcd_name: &str) -> String {
    format!("{etcd_name}-delta-snap")
}

/// ConfigMap holding the etcd configuration template.
pub fn config_map_name(etcd_name: &str) -> String {
    format!("{etcd_name}-config")
}

/// Secret with the bearer token the agents require on their state-changing endpoints
/// (`/snapshot/full`, `/snapshot/delta`); key [`AGENT_TOKEN_KEY`].
pub fn agent_token_secret_name(etcd_name: &str) -> String {
    format!("{etcd_name}-agent-token")
}

/// Key of the token in [`agent_token_secret_name`]'s Secret.
pub const AGENT_TOKEN_KEY: &str = "token";

/// ClusterIP Service clients connect to.
pub fn client_service_name(etcd_name: &str) -> String {
    format!("{etcd_name}-client")
}

/// Headless Service that gives each member a stable peer DNS name.
pub fn peer_service_name(etcd_name: &str) -> String {
    format!("{etcd_name}-peer")
}

/// StatefulSet running the members.
pub fn statefulset_name(etcd_name: &str) -> String {
    etcd_name.to_string()
}

/// PodDisruptionBudget of the members.
pub fn pod_disruption_budget_name(etcd_name: &str) -> String {
    etcd_name.to_string()
}

/// ServiceAccount of the member pods.
pub fn service_account_name(etcd_name: &str) -> String {
    etcd_name.to_string()
}

/// Role granting the member pods access to their leases: `druid.gardener.cloud:etcd:<name>`.
pub fn role_name(etcd_name: &str) -> String {
    format!("{}:etcd:{etcd_name}", crate::etcd::GROUP)
}

/// RoleBinding of [`role_name`] to [`service_account_name`]; same name as the Role.
pub fn role_binding_name(etcd_name: &str) -> String {
    role_name(etcd_name)
}

/// Job that compacts snapshots.
pub fn compaction_job_name(etcd_name: &str) -> String {
    format!("{etcd_name}-compactor")
}

/// Name of the StatefulSet's volume claim template: `spec.volumeClaimTemplate`, or the
/// `Etcd` name.
pub fn volume_claim_template_name(etcd: &Etcd) -> String {
    etcd.spec
        .volume_claim_template
        .clone()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| etcd.name_any())
}

/// PersistentVolumeClaim of ordinal `ordinal`: `<template>-<statefulset>-<ordinal>`.
pub fn pvc_name(etcd: &Etcd, ordinal: u32) -> String {
    format!(
        "{}-{}",
        volume_claim_template_name(etcd),
        pod_name(&statefulset_name(&etcd.name_any()), ordinal)
    )
}

/// In-cluster peer host of ordinal `ordinal`: `<pod>.<name>-peer.<namespace>.svc`.
pub fn peer_hostname(etcd_name: &str, namespace: &str, ordinal: u32) -> String {
    format!(
        "{}.{}.{namespace}.svc",
        pod_name(etcd_name, ordinal),
        peer_service_name(etcd_name)
    )
}

/// In-cluster client host: `<name>-client.<namespace>.svc`.
pub fn client_hostname(etcd_name: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", client_service_name(etcd_name))
}

/// Labels every managed resource carries; also the selector of pods, PDB and status.
pub fn default_labels(etcd_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (LABEL_PART_OF.to_string(), etcd_name.to_string()),
    ])
}

/// [`default_labels`] plus the component and the resource's own name. A `:` in the name
/// (the Role's) becomes `-`, since label values may not contain it.
pub fn component_labels(
    etcd_name: &str,
    component: &str,
    resource_name: &str,
) -> BTreeMap<String, String> {
    let mut labels = default_labels(etcd_name);
    labels.insert(LABEL_COMPONENT.to_string(), component.to_string());
    labels.insert(LABEL_APP_NAME.to_string(), resource_name.replace(':', "-"));
    labels
}

/// [`default_labels`] as a label-selector string, for `status.selector` (scale subresource).
pub fn selector_string(etcd_name: &str) -> String {
    default_labels(etcd_name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::EtcdSpec;

    fn etcd(name: &str, replicas: i32, prefix: Option<&str>) -> Etcd {
        let mut e = Etcd::new(
            name,
            EtcdSpec {
                replicas,
                ..EtcdSpec::default()
            },
        );
        e.spec.member_name_prefix = prefix.map(str::to_string);
        e
    }

    #[test]
    fn member_and_lease_names_follow_ordinals() {
        let e = etcd("etcd-main", 3, None);
        assert_eq!(member_name(&e, 0), "etcd-main-0");
        assert_eq!(
            member_lease_names(&e),
            ["etcd-main-0", "etcd-main-1", "etcd-main-2"]
        );
        assert_eq!(pod_names(&e), ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
        assert!(member_lease_names(&etcd("x", 0, None)).is_empty());
        assert!(member_lease_names(&etcd("x", -1, None)).is_empty());
    }

    #[test]
    fn member_name_prefix_prefixes_members_but_not_pods() {
        let e = etcd("etcd-main", 2, Some("seed-a"));
        assert_eq!(member_name(&e, 1), "seed-a-etcd-main-1");
        assert_eq!(
            member_lease_names(&e),
            ["seed-a-etcd-main-0", "seed-a-etcd-main-1"]
        );
        assert_eq!(pod_names(&e), ["etcd-main-0", "etcd-main-1"]);
        // An empty prefix is no prefix.
        assert_eq!(
            member_name(&etcd("etcd-main", 1, Some("")), 0),
            "etcd-main-0"
        );
    }

    #[test]
    fn component_names_match_druid() {
        assert_eq!(full_snapshot_lease_name("etcd-main"), "etcd-main-full-snap");
        assert_eq!(
            delta_snapshot_lease_name("etcd-main"),
            "etcd-main-delta-snap"
        );
        assert_eq!(config_map_name("etcd-main"), "etcd-main-config");
        assert_eq!(client_service_name("etcd-main"), "etcd-main-client");
        assert_eq!(peer_service_name("etcd-main"), "etcd-main-peer");
        assert_eq!(statefulset_name("etcd-main"), "etcd-main");
        assert_eq!(pod_disruption_budget_name("etcd-main"), "etcd-main");
        assert_eq!(service_account_name("etcd-main"), "etcd-main");
        assert_eq!(
            role_name("etcd-main"),
            "druid.gardener.cloud:etcd:etcd-main"
        );
        assert_eq!(
            role_binding_name("etcd-main"),
            "druid.gardener.cloud:etcd:etcd-main"
        );
        assert_eq!(compaction_job_name("etcd-main"), "etcd-main-compactor");
        assert_eq!(
            peer_hostname("etcd-main", "shoot", 2),
            "etcd-main-2.etcd-main-peer.shoot.svc"
        );
        assert_eq!(
            client_hostname("etcd-main", "shoot"),
            "etcd-main-client.shoot.svc"
        );
    }

    #[test]
    fn volume_claim_template_defaults_to_the_etcd_name() {
        let mut e = etcd("etcd-main", 1, None);
        assert_eq!(volume_claim_template_name(&e), "etcd-main");
        assert_eq!(pvc_name(&e, 0), "etcd-main-etcd-main-0");
        e.spec.volume_claim_template = Some("main-etcd".into());
        assert_eq!(pvc_name(&e, 2), "main-etcd-etcd-main-2");
    }

    #[test]
    fn labels_and_selector() {
        let labels = default_labels("etcd-main");
        assert_eq!(labels.len(), 2);
        assert_eq!(labels[LABEL_MANAGED_BY], "etcd-druid");
        assert_eq!(labels[LABEL_PART_OF], "etcd-main");
        let role = component_labels("etcd-main", component::ROLE, &role_name("etcd-main"));
        assert_eq!(role[LABEL_COMPONENT], "etcd-role");
        assert_eq!(role[LABEL_APP_NAME], "druid.gardener.cloud-etcd-etcd-main");
        assert_eq!(
            selector_string("etcd-main"),
            "app.kubernetes.io/managed-by=etcd-druid,app.kubernetes.io/part-of=etcd-main"
        );
    }

    #[test]
    fn longest_name_leaves_room_for_suffixes() {
        assert_eq!(MAX_ETCD_NAME_LENGTH, 52);
        let name = "a".repeat(MAX_ETCD_NAME_LENGTH);
        assert!(delta_snapshot_lease_name(&name).len() <= 63);
        assert!(compaction_job_name(&name).len() <= 63);
        assert!(format!("{name}-0123456789").len() <= 63);
    }
}
