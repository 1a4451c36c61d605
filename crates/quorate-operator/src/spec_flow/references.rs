//! Dereference: the one step of a pass that reads what the `Etcd` refers to besides itself —
//! its existing ConfigMap (the bootstrap set recorded when the cluster first ran) and, for a
//! `Local` store, the store's Secret (where buckets live on the host). Everything after this
//! step is built from the `Etcd` and these facts alone.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use quorate_api::names::config_map_name;
use quorate_api::{Etcd, EtcdVersion};
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::components::ComponentContext;
use quorate_core::components::config_map::CLUSTER_CONFIG_KEY;
use quorate_core::etcd_version::{MemberVersions, VersionDecision};

use crate::context::{Context, OperatorSettings};
use crate::error::Error;
use crate::validated::ValidatedEtcd;

/// Key of a `Local` store's Secret naming the host directory of its buckets (druid's).
const HOST_PATH_KEY: &str = "hostPath";

/// What the `Etcd` refers to, as found in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    /// The bootstrap set the builders must keep; see [`bootstrap_members`].
    pub bootstrap_members: Option<Vec<String>>,
    /// The `hostPath` of a `Local` store's Secret.
    pub local_backup_host_path: Option<String>,
    /// The etcd version the members were last configured with; see [`running_etcd_version`].
    pub running_etcd_version: Option<EtcdVersion>,
    /// The etcd versions each member's agent publishes on its lease: the evidence a chained
    /// version change waits for before its next step.
    pub member_versions: Vec<MemberVersions>,
}

impl References {
    /// Reads the ConfigMap and, for a `Local` store, its Secret.
    pub async fn look_up(etcd: &ValidatedEtcd, ctx: &Context) -> Result<References, Error> {
        let config_map = get(ctx, etcd.namespace(), &config_map_name(etcd.name())).await?;
        let ran_before = etcd
            .etcd()
            .status
            .as_ref()
            .is_some_and(|s| s.observed_generation.is_some())
            || ctx
                .caches
                .statefulset(etcd.namespace(), etcd.name())
                .is_some();
        let secret = match local_store_secret(etcd.etcd()) {
            Some(name) => get::<Secret>(ctx, etcd.namespace(), name).await?,
            None => None,
        };
        let names = quorate_api::names::member_lease_names(etcd.etcd());
        let leases: Vec<_> = names
            .iter()
            .filter_map(|l| ctx.caches.lease(etcd.namespace(), l))
            .map(|l| quorate_coord::kube::lease_map::member_lease(&l))
            .collect();
        Ok(References {
            bootstrap_members: bootstrap_members(config_map.as_ref(), ran_before),
            local_backup_host_path: secret.as_ref().and_then(host_path),
            running_etcd_version: running_etcd_version(config_map.as_ref(), ran_before),
            member_versions: MemberVersions::from_leases(&names, &leases),
        })
    }

    /// The builders' context: the operator's images and settings, these facts, and the etcd
    /// version the members run after this pass (core `etcd_version::decide`: the next step of
    /// a chained change once etcd reports the last one on every member), with that decision
    /// itself for the status's `EtcdVersionCurrent`; `Err` when the `Etcd` asks for a version
    /// change that is refused (a downgrade below 3.5, another major).
    pub fn component_context(
        self,
        etcd: &Etcd,
        settings: &OperatorSettings,
    ) -> Result<(ComponentContext, VersionDecision), Error> {
        let requested = quorate_api::etcd_version::requested(etcd).map_err(Error::EtcdVersion)?;
        let mut ctx =
            ComponentContext::new(settings.images.member.clone(), settings.images.init.clone());
        let decision = quorate_core::etcd_version::decide(
            requested,
            self.running_etcd_version,
            &self.member_versions,
            quorate_api::etcd_version::without_snapshot(etcd),
        )
        .map_err(|refused| Error::EtcdVersion(refused.to_string()))?;
        ctx.etcd_version = decision.run;
        ctx.disable_service_account_automount = settings.disable_service_account_automount;
        ctx.bootstrap_members = self.bootstrap_members;
        if let Some(path) = &self.local_backup_host_path {
            check_host_path(
                path,
                etcd.metadata.namespace.as_deref().unwrap_or_default(),
                local_store_secret(etcd).unwrap_or_default(),
                &settings.allowed_host_paths,
            )?;
        }
        ctx.local_backup_host_path = self.local_backup_host_path;
        Ok((ctx, decision))
    }
}

/// Reads one object of the `Etcd`'s namespace; absent is `None`.
async fn get<K>(ctx: &Context, namespace: &str, name: &str) -> Result<Option<K>, Error>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    api.get_opt(name)
        .await
        .map_err(Error::kube("get", K::kind(&()), namespace, name))
}

/// The bootstrap set written into the existing ConfigMap; `None` for a cluster that never
/// ran; an empty set (never bootstrap, only join or start from data) when the cluster ran
/// before but its ConfigMap is gone or was written by druid.
fn bootstrap_members(config_map: Option<&ConfigMap>, ran_before: bool) -> Option<Vec<String>> {
    let recorded = config_map
        .and_then(|cm| cm.data.as_ref())
        .and_then(|data| data.get(CLUSTER_CONFIG_KEY))
        .and_then(|json| serde_json::from_str::<ClusterConfig>(json).ok())
        .map(|config| config.bootstrap_members);
    match recorded {
        Some(members) => Some(members),
        None if ran_before => Some(Vec::new()),
        None => None,
    }
}

/// The etcd version in quorate's existing ConfigMap (what the agents were told to run); etcd
/// 3.4 for a cluster that ran before without one (druid's, or quorate's before versions);
/// `None` for a cluster that never ran.
fn running_etcd_version(config_map: Option<&ConfigMap>, ran_before: bool) -> Option<EtcdVersion> {
    let recorded = config_map
        .and_then(|cm| cm.data.as_ref())
        .and_then(|data| data.get(CLUSTER_CONFIG_KEY))
        .and_then(|json| serde_json::from_str::<ClusterConfig>(json).ok())
        .map(|config| config.etcd_version);
    recorded.or(ran_before.then_some(EtcdVersion::UNRECORDED))
}

/// The Secret of a `Local` store, the only kind whose Secret the builders need.
fn local_store_secret(etcd: &Etcd) -> Option<&str> {
    let store = etcd.spec.backup.store.as_ref()?;
    if store.provider.as_deref() != Some("Local") {
        return None;
    }
    store.secret_ref.as_ref()?.name.as_deref()
}

/// `Ok` when `path`, the `hostPath` of the Secret `namespace/secret`, may be mounted
/// (core `host_path_allowed`); otherwise the error that says which directories may.
pub(crate) fn check_host_path(
    path: &str,
    namespace: &str,
    secret: &str,
    allowed: &[String],
) -> Result<(), Error> {
    if quorate_core::components::paths::host_path_allowed(path, allowed) {
        return Ok(());
    }
    let mut dirs =
        vec![quorate_core::components::paths::DEFAULT_LOCAL_BACKUP_HOST_PATH.to_string()];
    dirs.extend(allowed.iter().cloned());
    Err(Error::HostPathRefused {
        secret: format!("{namespace}/{secret}"),
        path: path.to_string(),
        allowed: format!("under {}", dirs.join(" or ")),
    })
}

/// The `hostPath` key of a `Local` store's Secret (druid's way to place buckets on the host).
pub(crate) fn host_path(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(HOST_PATH_KEY)?;
    String::from_utf8(bytes.0.clone()).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::SecretReference;
    use quorate_api::StoreSpec;

    use super::*;

    fn config_map(cluster_json: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([(
                CLUSTER_CONFIG_KEY.to_string(),
                cluster_json.to_string(),
            )])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_new_cluster_has_no_bootstrap_set_yet() {
        assert_eq!(bootstrap_members(None, false), None);
    }

    #[test]
    fn a_cluster_that_ran_without_a_readable_record_never_bootstraps_again() {
        assert_eq!(bootstrap_members(None, true), Some(Vec::new()));
        let druids = config_map("not quorate's json");
        assert_eq!(bootstrap_members(Some(&druids), true), Some(Vec::new()));
    }

    #[test]
    fn the_recorded_set_is_kept() {
        let mut etcd = Etcd::new("main", Default::default());
        etcd.spec.replicas = 3;
        etcd.metadata.namespace = Some("shoot".into());
        etcd.metadata.uid = Some("uid-1".into());
        let ctx = ComponentContext {
            bootstrap_members: Some(vec!["main-0".into()]),
            ..ComponentContext::new("q", "a")
        };
        let recorded = quorate_core::components::config_map::build(&etcd, &ctx).unwrap();
        assert_eq!(
            bootstrap_members(Some(&recorded), true),
            Some(vec!["main-0".to_string()])
        );
    }

    #[test]
    fn the_running_version_is_the_configmaps_or_3_4_for_a_cluster_that_ran_without_one() {
        assert_eq!(running_etcd_version(None, false), None);
        assert_eq!(running_etcd_version(None, true), Some(EtcdVersion::V3_4));
        let mut etcd = Etcd::new("main", Default::default());
        etcd.spec.replicas = 1;
        etcd.metadata.namespace = Some("shoot".into());
        etcd.metadata.uid = Some("uid-1".into());
        let ctx = ComponentContext::new("q", "a");
        let recorded = quorate_core::components::config_map::build(&etcd, &ctx).unwrap();
        assert_eq!(
            running_etcd_version(Some(&recorded), true),
            Some(EtcdVersion::DEFAULT)
        );
        // A downgrade request against it is refused by the pass, naming both versions.
        let mut old = etcd.clone();
        old.metadata.annotations = Some(
            [(
                quorate_api::annotations::ETCD_VERSION.to_string(),
                "3.4".to_string(),
            )]
            .into(),
        );
        let references = References {
            running_etcd_version: Some(EtcdVersion::V3_5),
            ..References::default()
        };
        let settings = crate::context::OperatorSettings::default();
        let refused = references.component_context(&old, &settings).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("downgrading etcd from 3.5 to 3.4 is refused"),
            "{refused}"
        );
    }

    fn with_store(provider: &str, secret: Option<&str>) -> Etcd {
        let mut etcd = Etcd::new("main", Default::default());
        etcd.spec.backup.store = Some(StoreSpec {
            provider: Some(provider.into()),
            secret_ref: Some(SecretReference {
                name: secret.map(str::to_string),
                namespace: None,
            }),
            ..StoreSpec::default()
        });
        etcd
    }

    #[test]
    fn only_a_local_store_secret_is_read() {
        assert_eq!(
            local_store_secret(&with_store("Local", Some("s"))),
            Some("s")
        );
        assert_eq!(local_store_secret(&with_store("S3", Some("s"))), None);
        assert_eq!(local_store_secret(&with_store("Local", None)), None);
        assert_eq!(
            local_store_secret(&Etcd::new("main", Default::default())),
            None
        );
    }

    #[test]
    fn the_host_path_comes_from_the_secret() {
        let secret = Secret {
            data: Some(BTreeMap::from([(
                HOST_PATH_KEY.to_string(),
                ByteString(b"/mnt/buckets".to_vec()),
            )])),
            ..Secret::default()
        };
        assert_eq!(host_path(&secret).as_deref(), Some("/mnt/buckets"));
        assert_eq!(host_path(&Secret::default()), None);
    }
}
