//! Role `druid.gardener.cloud:etcd:<name>`: only what the agent in a member pod does through
//! the API. Unlike druid's Role there is no access to StatefulSets (the agent decides from
//! etcd's member list, not from the StatefulSet), and the only ConfigMap it can read is its own.

use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use quorate_api::Etcd;
use quorate_api::names::{agent_token_secret_name, component, config_map_name, role_name};

use crate::last_operation::ErrorCode;

use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when the Role cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncRole;

/// Verbs on leases: the agent reads and renews (patches) the member and snapshot leases the
/// operator creates; it never creates or replaces one.
pub const LEASE_VERBS: [&str; 4] = ["get", "list", "watch", "patch"];
/// Verbs on the cluster's ConfigMap, where the agent reads its `ClusterConfig`. With
/// `resourceNames`, `list` and `watch` are allowed only with a `metadata.name` field selector.
pub const CONFIG_MAP_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Verbs on pods (as druid grants).
pub const POD_VERBS: [&str; 3] = ["get", "list", "watch"];

/// The Role of the member pods.
pub fn build(etcd: &Etcd) -> Result<Role, ComponentError> {
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
    Ok(Role {
        metadata: id.object_meta(component::ROLE, &role_name(&id.name)),
        rules: Some(
            vec![
                rule("coordination.k8s.io", "leases", None, &LEASE_VERBS),
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
        let role = build(&etcd("etcd-main", 3)).unwrap();
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
        assert_eq!(resources, ["leases", "configmaps", "pods", "secrets"]);
        assert!(rules[0].verbs.contains(&"patch".to_string()));
        assert!(!rules[0].verbs.contains(&"create".to_string()));
        assert!(rules[0].resource_names.is_none());
        assert_eq!(
            rules[1].resource_names.as_deref(),
            Some(&["etcd-main-config".to_string()][..])
        );
        assert!(!rules[2].verbs.contains(&"update".to_string()));
        // Secrets: its own token only (no TLS here), read only.
        assert_eq!(
            rules[3].resource_names.as_deref(),
            Some(&["etcd-main-agent-token".to_string()][..])
        );
        assert_eq!(rules[3].verbs, ["get"]);
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
        let rules = build(&e).unwrap().rules.unwrap();
        assert_eq!(
            rules[3].resource_names.as_deref(),
            Some(
                &[
                    "etcd-main-agent-token".to_string(),
                    "backup-keys".to_string()
                ][..]
            )
        );
    }
}
