//! Role `druid.gardener.cloud:etcd:<name>`: only what the agent in a member pod does through
//! the API. Unlike druid's Role there is no access to StatefulSets (the agent decides from
//! etcd's member list, not from the StatefulSet), and the only ConfigMap it can read is its own.

use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use quorate_api::Etcd;
use quorate_api::names::{
    agent_token_secret_name, component, config_map_name, delta_snapshot_lease_name,
    full_snapshot_lease_name, member_lease_name, role_name,
};

use crate::last_operation::ErrorCode;

use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when the Role cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncRole;

/// Verbs on every lease of the namespace: the agent reads the member leases (listed by label,
/// which `resourceNames` cannot restrict).
pub const LEASE_READ_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Verbs on this cluster's own member and snapshot leases, named: the agent renews (patches)
/// them; it never creates or replaces one, nor touches another cluster's.
pub const LEASE_WRITE_VERBS: [&str; 1] = ["patch"];
/// Verbs on the cluster's ConfigMap, where the agent reads its `ClusterConfig`. With
/// `resourceNames`, `list` and `watch` are allowed only with a `metadata.name` field selector.
pub const CONFIG_MAP_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Verbs on pods (as druid grants).
pub const POD_VERBS: [&str; 3] = ["get", "list", "watch"];

/// The Role of the member pods, `running` of which run (their leases are the ones it may patch).
pub fn build(etcd: &Etcd, running: i32) -> Result<Role, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    let rule =
        |group: &str, resource: &str, names: Option<Vec<String>>, verbs: &[&str]| PolicyRule {
            api_groups: Some(vec![group.to_string()]),
            resources: Some(vec![resource.to_string()]),
            resource_names: names,
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..PolicyRule::default()
        };
    // The agent reads its token, its TLS Secrets (writing the TLS files itself,
    // `super::tls_secrets`) and the backup encryption keys, and no other Secret.
    let secrets: Vec<String> = std::iter::once(agent_token_secret_name(&id.name))
        .chain(
            super::tls_secrets::tls_secret_files(etcd)
                .into_iter()
                .map(|f| f.secret),
        )
        .chain(quorate_api::annotations::backup_encryption_secret(etcd).map(String::from))
        .collect();
    let own_leases: Vec<String> = (0..u32::try_from(running).unwrap_or(0))
        .map(|i| member_lease_name(etcd, i))
        .chain([
            full_snapshot_lease_name(&id.name),
            delta_snapshot_lease_name(&id.name),
        ])
        .collect();
    Ok(Role {
        metadata: id.object_meta(component::ROLE, &role_name(&id.name)),
        rules: Some(
            vec![
                rule("coordination.k8s.io", "leases", None, &LEASE_READ_VERBS),
                rule(
                    "coordination.k8s.io",
                    "leases",
                    Some(own_leases),
                    &LEASE_WRITE_VERBS,
                ),
                rule(
                    "",
                    "configmaps",
                    Some(vec![config_map_name(&id.name)]),
                    &CONFIG_MAP_VERBS,
                ),
                rule("", "pods", None, &POD_VERBS),
            ]
            .into_iter()
            .chain([rule("", "secrets", Some(secrets), &["get"])])
            .collect(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;

    #[test]
    fn grants_leases_own_config_map_and_pods_only() {
        let role = build(&etcd("etcd-main", 3), 3).unwrap();
        assert_eq!(
            role.metadata.name.as_deref(),
            Some("druid.gardener.cloud:etcd:etcd-main")
        );
        assert_eq!(
            role.metadata.labels.unwrap()["app.kubernetes.io/name"],
            "druid.gardener.cloud-etcd-etcd-main"
        );
        let rules = role.rules.unwrap();
        let resources: Vec<_> = rules
            .iter()
            .map(|r| r.resources.clone().unwrap()[0].clone())
            .collect();
        assert_eq!(
            resources,
            ["leases", "leases", "configmaps", "pods", "secrets"]
        );
        // Any lease may be read; only its own are patched, none created.
        assert_eq!(rules[0].verbs, LEASE_READ_VERBS);
        assert!(rules[0].resource_names.is_none());
        assert_eq!(rules[1].verbs, ["patch"]);
        assert_eq!(
            rules[1].resource_names.as_deref().unwrap(),
            [
                "etcd-main-0",
                "etcd-main-1",
                "etcd-main-2",
                "etcd-main-full-snap",
                "etcd-main-delta-snap"
            ]
        );
        assert_eq!(
            rules[2].resource_names.as_deref(),
            Some(&["etcd-main-config".to_string()][..])
        );
        assert!(!rules[3].verbs.contains(&"update".to_string()));
        // Secrets: its own token only (no TLS here), read only.
        assert_eq!(
            rules[4].resource_names.as_deref(),
            Some(&["etcd-main-agent-token".to_string()][..])
        );
        assert_eq!(rules[4].verbs, ["get"]);
    }

    #[test]
    fn grants_the_backup_encryption_secret_when_one_is_named() {
        let mut e = etcd("etcd-main", 3);
        e.metadata.annotations = Some(
            [(
                quorate_api::annotations::BACKUP_ENCRYPTION_SECRET.to_string(),
                "backup-keys".to_string(),
            )]
            .into(),
        );
        let rules = build(&e, 3).unwrap().rules.unwrap();
        assert_eq!(
            rules[4].resource_names.as_deref(),
            Some(
                &[
                    "etcd-main-agent-token".to_string(),
                    "backup-keys".to_string()
                ][..]
            )
        );
    }
}
