//! ConfigMap `<name>-config`: druid's `etcd.conf.yaml` plus quorate's `cluster.json`, which the
//! agents read through the API. A checksum of its size-independent part goes on the pod
//! template ([`template_checksum`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use quorate_api::Etcd;
use quorate_api::names::{CONFIG_MAP_KEY, component, config_map_name};
use sha2::{Digest, Sha256};

use crate::cluster_config::ClusterConfig;
use crate::last_operation::ErrorCode;

use super::cluster_config::render_for_kubernetes;
use super::context::ComponentContext;
use super::error::ComponentError;
use super::etcd_conf_yaml;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when the ConfigMap cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncConfigMap;

/// Key of quorate's [`crate::cluster_config::ClusterConfig`] (JSON) in the ConfigMap.
pub const CLUSTER_CONFIG_KEY: &str = "cluster.json";

/// The ConfigMap with both keys.
pub fn build(etcd: &Etcd, ctx: &ComponentContext) -> Result<ConfigMap, ComponentError> {
    with_cluster(etcd, &render_for_kubernetes(etcd, ctx)?)
}

/// The ConfigMap of `etcd` carrying `cluster` as `cluster.json`.
fn with_cluster(etcd: &Etcd, cluster: &ClusterConfig) -> Result<ConfigMap, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    let cluster_json =
        serde_json::to_string_pretty(&cluster).map_err(|e| ComponentError::Serialize {
            what: CLUSTER_CONFIG_KEY,
            name: id.name.clone(),
            detail: e.to_string(),
        })?;
    Ok(ConfigMap {
        metadata: id.object_meta(component::CONFIG_MAP, &config_map_name(&id.name)),
        data: Some(BTreeMap::from([
            (CONFIG_MAP_KEY.to_string(), etcd_conf_yaml::render(etcd)?),
            (CLUSTER_CONFIG_KEY.to_string(), cluster_json),
        ])),
        ..ConfigMap::default()
    })
}

/// Checksum of a ConfigMap's data, computed like druid's: the SHA-256 (lower-case hex) of the
/// data as a JSON object with sorted keys. It changes exactly when some key or value changes.
pub fn checksum(data: &BTreeMap<String, String>) -> String {
    // A map of strings always serializes; the empty fallback only keeps this total.
    let json = serde_json::to_vec(data).unwrap_or_default();
    Sha256::digest(&json)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// [`checksum`] of the ConfigMap's data (empty data when it has none).
pub fn config_map_checksum(config_map: &ConfigMap) -> String {
    checksum(&config_map.data.clone().unwrap_or_default())
}

/// The checksum the pod template carries: that of the ConfigMap rendered as if the cluster had
/// one member and no recorded bootstrap set, so it changes with every setting a pod must be
/// restarted for, but not with the member list. Scaling therefore never rolls the running
/// pods (druid's checksum covers `initial-cluster` and rolls them, the second restart of its
/// TLS-then-scale sequence); joining members learn the list through the API. Requests the
/// agents carry out while running (recovery, a new backup chain, defragmentation and its
/// settings) do not restart pods either,
/// nor does an etcd version upgrade or a TLS change: the agents restart etcd in place, one at
/// a time (`crate::membership::rollout`); the image carries every version and the agents write
/// the TLS files themselves (`super::tls_secrets`).
pub fn template_checksum(etcd: &Etcd, ctx: &ComponentContext) -> Result<String, ComponentError> {
    let mut one = etcd.clone();
    one.spec.replicas = 1;
    one.spec.etcd.client_url_tls = None;
    one.spec.etcd.peer_url_tls = None;
    // Maintenance settings are read by the running agents.
    one.spec.etcd.defragmentation_schedule = None;
    one.spec.etcd.etcd_defrag_timeout = None;
    if let Some(annotations) = one.metadata.annotations.as_mut() {
        use quorate_api::{annotations as a, defrag as d};
        for key in [
            a::RECOVER,
            a::NEW_BACKUP_CHAIN,
            a::BACKUP_ENCRYPTION_SECRET,
            a::ACCEPT_PLAINTEXT_BEFORE,
            a::ETCD_VERSION,
            d::DEFRAGMENT,
            d::DEFRAG_FREE_PERCENT,
            d::DEFRAG_FREE_BYTES,
            d::DEFRAG_NEAR_QUOTA_PERCENT,
        ] {
            annotations.remove(key);
        }
    }
    let ctx = ComponentContext {
        bootstrap_members: Some(Vec::new()),
        running: None,
        etcd_version: quorate_api::EtcdVersion::DEFAULT,
        ..ctx.clone()
    };
    let mut cluster = render_for_kubernetes(&one, &ctx)?;
    // The agents read their token Secret at each request, and the encryption keys and the
    // migration window for clear objects when they use the store: none restarts anything.
    cluster.agent_token_secret = None;
    if let Some(backup) = cluster.backup.as_mut() {
        backup.encryption_key_dir = None;
        backup.accept_plaintext_before = None;
    }
    Ok(config_map_checksum(&with_cluster(&one, &cluster)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_config::ClusterConfig;
    use crate::components::meta::tests::etcd;

    fn ctx() -> ComponentContext {
        ComponentContext::new("quorate:test", "alpine:test")
    }

    #[test]
    fn holds_druids_yaml_and_quorates_json() {
        let cm = build(&etcd("etcd-main", 3), &ctx()).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("etcd-main-config"));
        assert_eq!(
            cm.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"],
            "etcd-configmap"
        );
        let data = cm.data.unwrap();
        assert_eq!(data.len(), 2);
        assert!(data["etcd.conf.yaml"].contains("data-dir: /var/etcd/data/new.etcd"));
        let cluster: ClusterConfig = serde_json::from_str(&data["cluster.json"]).unwrap();
        assert_eq!(cluster.members.len(), 3);
    }

    #[test]
    fn checksum_is_sha256_of_the_sorted_json() {
        let data = BTreeMap::from([("a".to_string(), "b".to_string())]);
        // sha256 of `{"a":"b"}`.
        assert_eq!(
            checksum(&data),
            "db4a7ecb114bc66c623a06c4ff6fe8daa2f49cc270ebbf7a1f81e22ab061c837"
        );
    }

    #[test]
    fn checksum_changes_with_the_config_and_only_then() {
        let e = etcd("etcd-main", 3);
        let a = config_map_checksum(&build(&e, &ctx()).unwrap());
        let again = config_map_checksum(&build(&e, &ctx()).unwrap());
        assert_eq!(a, again);
        // Things outside the configuration (pod labels, images) do not change it.
        let mut labelled = e.clone();
        labelled.spec.labels.insert("team".into(), "x".into());
        let other_image = ComponentContext::new("quorate:other", "alpine:test");
        assert_eq!(
            a,
            config_map_checksum(&build(&labelled, &other_image).unwrap())
        );
        // Scaling, a port or the bootstrap set does.
        let mut scaled = e.clone();
        scaled.spec.replicas = 5;
        assert_ne!(a, config_map_checksum(&build(&scaled, &ctx()).unwrap()));
        let mut port = e.clone();
        port.spec.etcd.client_port = Some(12379);
        assert_ne!(a, config_map_checksum(&build(&port, &ctx()).unwrap()));
        let mut recorded = ctx();
        recorded.bootstrap_members = Some(vec!["etcd-main-0".into()]);
        assert_ne!(a, config_map_checksum(&build(&e, &recorded).unwrap()));
    }

    #[test]
    fn the_template_checksum_ignores_the_member_list_only() {
        let e = etcd("etcd-main", 1);
        let one = template_checksum(&e, &ctx()).unwrap();
        let mut scaled = e.clone();
        scaled.spec.replicas = 3;
        assert_eq!(one, template_checksum(&scaled, &ctx()).unwrap());
        let mut recorded = ctx();
        recorded.bootstrap_members = Some(vec!["etcd-main-0".into()]);
        assert_eq!(one, template_checksum(&scaled, &recorded).unwrap());
        let mut quota = scaled.clone();
        quota.spec.etcd.client_port = Some(12379);
        assert_ne!(one, template_checksum(&quota, &ctx()).unwrap());
    }

    /// An upgrade and a TLS change are in-place restarts by the agents: no pod is replaced.
    #[test]
    fn the_template_checksum_ignores_the_etcd_version_and_tls() {
        let plain = etcd("etcd-main", 3);
        let mut tls = plain.clone();
        tls.spec.etcd.peer_url_tls = Some(quorate_api::PeerTlsConfig::default());
        assert_eq!(
            template_checksum(&plain, &ctx()).unwrap(),
            template_checksum(&tls, &ctx()).unwrap()
        );
        let mut e = etcd("etcd-main", 3);
        let mut v34 = ctx();
        v34.etcd_version = quorate_api::EtcdVersion::V3_4;
        let before = template_checksum(&e, &v34).unwrap();
        e.metadata.annotations = Some(
            [(
                quorate_api::annotations::ETCD_VERSION.to_string(),
                "3.5".to_string(),
            )]
            .into(),
        );
        let mut v35 = ctx();
        v35.etcd_version = quorate_api::EtcdVersion::V3_5;
        assert_eq!(before, template_checksum(&e, &v35).unwrap());
        assert_ne!(
            build(&e, &v34).unwrap().data,
            build(&e, &v35).unwrap().data,
            "the agents' configuration does change"
        );
    }

    /// Naming backup encryption keys reaches the agents through the configuration (they copy
    /// the Secret into the TLS emptyDir): no pod is replaced.
    #[test]
    fn the_template_checksum_ignores_backup_encryption() {
        let mut plain = etcd("etcd-main", 3);
        plain.spec.backup.store = Some(quorate_api::StoreSpec {
            provider: Some("S3".into()),
            container: Some("bucket".into()),
            prefix: "main".into(),
            ..Default::default()
        });
        let mut sealed = plain.clone();
        sealed.metadata.annotations = Some(
            [(
                quorate_api::annotations::BACKUP_ENCRYPTION_SECRET.to_string(),
                "backup-keys".to_string(),
            )]
            .into(),
        );
        assert_eq!(
            template_checksum(&plain, &ctx()).unwrap(),
            template_checksum(&sealed, &ctx()).unwrap()
        );
        // Opening the migration window for clear objects restarts nothing either.
        let mut window = sealed.clone();
        window.metadata.annotations.as_mut().unwrap().insert(
            quorate_api::annotations::ACCEPT_PLAINTEXT_BEFORE.to_string(),
            "2026-11-20T10:00:00Z".to_string(),
        );
        assert_eq!(
            template_checksum(&sealed, &ctx()).unwrap(),
            template_checksum(&window, &ctx()).unwrap()
        );
        let data = build(&sealed, &ctx()).unwrap().data.unwrap();
        let cluster: ClusterConfig = serde_json::from_str(&data["cluster.json"]).unwrap();
        let backup = cluster.backup.unwrap();
        assert_eq!(backup.encryption_secret.as_deref(), Some("backup-keys"));
        assert_eq!(
            backup.encryption_key_dir.as_deref(),
            Some(crate::components::paths::BACKUP_ENCRYPTION_KEY_DIR)
        );
    }

    /// Maintenance settings reach the running agents through the configuration: no pod is
    /// replaced for a defragmentation request, schedule or threshold.
    #[test]
    fn the_template_checksum_ignores_maintenance_settings() {
        let plain = etcd("etcd-main", 3);
        let mut changed = plain.clone();
        changed.spec.etcd.defragmentation_schedule = Some("0 3 * * *".into());
        changed.spec.etcd.etcd_defrag_timeout = Some("1m".into());
        changed.metadata.annotations = Some(
            [
                (quorate_api::defrag::DEFRAGMENT, "now"),
                (quorate_api::defrag::DEFRAG_FREE_PERCENT, "30"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        );
        assert_eq!(
            template_checksum(&plain, &ctx()).unwrap(),
            template_checksum(&changed, &ctx()).unwrap()
        );
        assert_ne!(
            build(&plain, &ctx()).unwrap().data,
            build(&changed, &ctx()).unwrap().data,
            "the agents' configuration does change"
        );
    }
}
