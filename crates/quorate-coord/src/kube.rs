//! Coordination through the Kubernetes API, for agents in member pods: member and snapshot
//! leases are `coordination.k8s.io/v1` Lease objects, the cluster configuration is the
//! `cluster.json` key of the `<name>-config` ConfigMap. The operator creates all of these with
//! druid's labels and an owner reference to the `Etcd`; the agent only reads them and renews
//! the leases (see [`lease_map`]), so it needs exactly the verbs of the Role the operator
//! renders.

pub mod api_failure;
pub mod config_watch;
pub mod lease_map;

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::kube::api::{ListParams, Patch, PatchParams};
use ::kube::{Api, Client};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use quorate_api::names::{LABEL_COMPONENT, LABEL_PART_OF, component, config_map_name};
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::components::config_map::CLUSTER_CONFIG_KEY;
use quorate_core::lease::{MemberLease, SnapshotLease};

pub use api_failure::{ApiFailure, Target};

use crate::{CoordError, Coordination};
use config_watch::ConfigWatch;

/// How long the first read of the configuration waits for the ConfigMap's initial list.
const FIRST_LIST_PATIENCE: Duration = Duration::from_secs(30);

/// Attempts of a call that fails transiently (no answer, 429, 5xx) before giving up; the
/// agent's own loops retry later anyway, this only smooths over a blip.
const ATTEMPTS: u32 = 3;

/// Pause before the second attempt; doubled for each further one.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// [`Coordination`] through the Kubernetes API for the agents of one `Etcd`.
#[derive(Clone)]
pub struct KubeCoordination {
    client: Client,
    namespace: String,
    cluster: String,
    /// Started on first use, so building one needs no runtime; shared by clones.
    config: Arc<OnceLock<ConfigWatch>>,
}

impl std::fmt::Debug for KubeCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCoordination")
            .field("namespace", &self.namespace)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl KubeCoordination {
    /// Coordination for the `Etcd` `cluster` in `namespace`, as the identity of `client`.
    pub fn new(client: Client, namespace: impl Into<String>, cluster: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            cluster: cluster.into(),
            config: Arc::new(OnceLock::new()),
        }
    }

    /// Namespace of the `Etcd`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Name of the `Etcd`.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Name of the ConfigMap holding the cluster configuration.
    pub fn config_map_name(&self) -> String {
        config_map_name(&self.cluster)
    }

    fn target(&self) -> Target<'_> {
        Target {
            namespace: &self.namespace,
            cluster: &self.cluster,
        }
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn failure(&self, verb: &'static str, name: &str, error: &::kube::Error) -> CoordError {
        ApiFailure::from_kube(&self.target(), verb, "leases", name, error).into()
    }

    async fn get_lease(&self, name: &str) -> Result<Option<Lease>, CoordError> {
        let leases = self.leases();
        retrying(|| leases.get_opt(name))
            .await
            .map_err(|e| self.failure("get", name, &e))
    }

    /// Merge-patches the lease `name`; a missing lease is reported, never created.
    async fn patch_lease(
        &self,
        kind: &'static str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<(), CoordError> {
        let leases = self.leases();
        let params = PatchParams::default();
        let patch = Patch::Merge(&patch);
        match retrying(|| leases.patch(name, &params, &patch)).await {
            Ok(_) => Ok(()),
            Err(::kube::Error::Api(status)) if status.code == 404 => {
                Err(CoordError::MissingLease {
                    kind,
                    namespace: self.namespace.clone(),
                    name: name.to_string(),
                    cluster: self.cluster.clone(),
                })
            }
            Err(e) => Err(self.failure("patch", name, &e)),
        }
    }

    fn config_watch(&self) -> &ConfigWatch {
        self.config.get_or_init(|| {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
            ConfigWatch::start(api, self.config_map_name(), &self.target())
        })
    }
}

/// Runs `call` up to [`ATTEMPTS`] times while it fails transiently.
async fn retrying<T, F, Fut>(mut call: F) -> Result<T, ::kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    let mut pause = RETRY_PAUSE;
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if attempt < ATTEMPTS && api_failure::is_transient(&e) => {
                tracing::debug!(error = %e, attempt, "Kubernetes API call failed; retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
            }
            result => return result,
        }
    }
}

impl Coordination for KubeCoordination {
    async fn cluster_config(&self) -> Result<ClusterConfig, CoordError> {
        let name = self.config_map_name();
        let config_map = self
            .config_watch()
            .current(FIRST_LIST_PATIENCE, &self.target(), &name)
            .await?
            .ok_or_else(|| CoordError::NoConfig {
                path: format!("ConfigMap {}/{name}", self.namespace),
                hint: "the operator creates it when it reconciles the Etcd",
            })?;
        let text = config_map
            .data
            .as_ref()
            .and_then(|d| d.get(CLUSTER_CONFIG_KEY))
            .ok_or_else(|| CoordError::MissingConfigKey {
                namespace: self.namespace.clone(),
                config_map: name.clone(),
                key: CLUSTER_CONFIG_KEY,
            })?;
        serde_json::from_str(text).map_err(|e| CoordError::InvalidConfig {
            namespace: self.namespace.clone(),
            config_map: name,
            key: CLUSTER_CONFIG_KEY,
            message: e.to_string(),
        })
    }

    async fn member_lease(&self, name: &str) -> Result<Option<MemberLease>, CoordError> {
        Ok(self
            .get_lease(name)
            .await?
            .as_ref()
            .map(lease_map::member_lease))
    }

    async fn member_leases(&self) -> Result<Vec<MemberLease>, CoordError> {
        let selector = format!(
            "{LABEL_PART_OF}={},{LABEL_COMPONENT}={}",
            self.cluster,
            component::MEMBER_LEASE
        );
        let leases = self.leases();
        let params = ListParams::default().labels(&selector);
        let list = retrying(|| leases.list(&params))
            .await
            .map_err(|e| self.failure("list", &selector, &e))?;
        let mut leases: Vec<MemberLease> = list.items.iter().map(lease_map::member_lease).collect();
        leases.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(leases)
    }

    async fn put_member_lease(&self, lease: &MemberLease) -> Result<(), CoordError> {
        self.patch_lease("member", &lease.name, lease_map::member_lease_patch(lease))
            .await
    }

    async fn secret_data(
        &self,
        name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, Vec<u8>>>, CoordError> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let secret = retrying(|| secrets.get_opt(name)).await.map_err(|e| {
            CoordError::from(ApiFailure::from_kube(
                &self.target(),
                "get",
                "secrets",
                name,
                &e,
            ))
        })?;
        Ok(secret.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect()
        }))
    }

    async fn snapshot_lease(&self, name: &str) -> Result<Option<SnapshotLease>, CoordError> {
        Ok(self
            .get_lease(name)
            .await?
            .as_ref()
            .map(lease_map::snapshot_lease))
    }

    async fn put_snapshot_lease(&self, lease: &SnapshotLease) -> Result<(), CoordError> {
        self.patch_lease(
            "snapshot",
            &lease.name,
            lease_map::snapshot_lease_patch(lease),
        )
        .await
    }
}
