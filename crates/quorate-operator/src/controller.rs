//! Runs the Etcd controller: the caches (StatefulSets, Leases and Pods that carry druid's
//! managed-by label), the controller over all `Etcd` objects, and the PDB API probe. Every
//! cached object is trimmed ([`crate::trim`]) before it enters its store.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_api::names::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use quorate_core::components::PdbApiVersion;
use tokio::sync::watch;

use crate::context::{Caches, Context, NewerVersions, OperatorSettings};
use crate::metrics::Metrics;
use crate::reconcile::{error_policy, reconcile};
use crate::trim;

/// A failure that stops the controller from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The API server's discovery could not be read.
    #[error("reading the API server's discovery for {what}: {source}")]
    Discovery {
        /// What was looked up.
        what: &'static str,
        /// The cause.
        source: kube::Error,
    },
    /// The `Etcd` CRD is not installed.
    #[error(
        "the Etcd CustomResourceDefinition (etcds.druid.gardener.cloud) is not installed; \
         apply deploy/crds/druid.gardener.cloud_etcds.yaml (or `quorate crd | kubectl apply -f -`)"
    )]
    NoCrd,
}

/// Which PodDisruptionBudget API the server serves: `policy/v1` where it exists (Kubernetes
/// 1.21+), `policy/v1beta1` on older servers.
pub async fn pdb_api_version(client: &Client) -> Result<PdbApiVersion, StartError> {
    let versions = client.list_api_group_resources("policy/v1").await;
    match versions {
        Ok(list)
            if list
                .resources
                .iter()
                .any(|r| r.name == "poddisruptionbudgets") =>
        {
            Ok(PdbApiVersion::V1)
        }
        Ok(_) | Err(kube::Error::Api(_)) => Ok(PdbApiVersion::V1Beta1),
        Err(source) => Err(StartError::Discovery {
            what: "policy/v1",
            source,
        }),
    }
}

async fn check_crd(client: &Client) -> Result<(), StartError> {
    match client
        .list_api_group_resources("druid.gardener.cloud/v1alpha1")
        .await
    {
        Ok(list) if list.resources.iter().any(|r| r.name == "etcds") => Ok(()),
        Ok(_) | Err(kube::Error::Api(_)) => Err(StartError::NoCrd),
        Err(source) => Err(StartError::Discovery {
            what: "druid.gardener.cloud/v1alpha1",
            source,
        }),
    }
}

/// A watch-filled cache of `K` objects carrying druid's managed-by label, each trimmed by
/// `trim` first, and the stream that fills it (which must be polled).
fn cache<K>(
    client: &Client,
    namespace: Option<&str>,
    trim: fn(&mut K),
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let config =
        watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"));
    let api = match namespace {
        Some(ns) => Api::<K>::namespaced(client.clone(), ns),
        None => Api::<K>::all(client.clone()),
    };
    let stream = watcher(api, config)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .touched_objects();
    (store, stream)
}

/// What of an `Etcd` a change must touch to start a pass: its generation (the spec), its
/// annotations (the reconcile operation, suspension) and whether it is being deleted. Status
/// and finalizer writes, which are the operator's own, start none: the status is refreshed by
/// the pass's own requeue every status sync period, and a pass started by them would read the
/// cache right after the writes that caused it, usually before it shows them.
fn pass_trigger(etcd: &Etcd) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    etcd.metadata.generation.hash(&mut hasher);
    etcd.metadata.annotations.hash(&mut hasher);
    etcd.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// Where the controller looks and who it is.
#[derive(Clone, Debug)]
pub struct Scope {
    /// Only `Etcd` objects of this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// This process's identity (events' reporting instance, `lastOperation.runID`).
    pub identity: String,
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(
    client: Client,
    settings: OperatorSettings,
    metrics: Metrics,
    scope: Scope,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), StartError> {
    let identity = scope.identity.as_str();
    let namespace = scope.namespace.as_deref();
    check_crd(&client).await?;
    let pdb_version = pdb_api_version(&client).await?;
    tracing::info!(pdb = pdb_version.as_str(), "PodDisruptionBudget API");
    let (statefulsets, sts_stream) = cache(&client, namespace, trim::statefulset);
    let (leases, lease_stream) = cache(&client, namespace, trim::lease);
    let (pods, pod_stream) = cache(&client, namespace, trim::pod);
    // Leases and pods only fill caches; StatefulSet changes also trigger their Etcd's pass.
    let drain_leases = tokio::spawn(lease_stream.for_each(|_| async {}));
    let drain_pods = tokio::spawn(pod_stream.for_each(|_| async {}));
    let workers = settings.workers.max(1);
    let (client_for_tasks, settings_for_tasks) = (client.clone(), settings.clone());
    let context = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "quorate-operator".to_string(),
                instance: Some(identity.to_string()),
            },
        ),
        client: client.clone(),
        settings,
        pdb_version,
        caches: Caches {
            statefulsets,
            leases: leases.clone(),
            pods: pods.clone(),
        },
        metrics,
        run_id: identity.to_string(),
        newer: NewerVersions::default(),
        announced_defrags: Default::default(),
    });
    leases.wait_until_ready().await.ok();
    pods.wait_until_ready().await.ok();
    let etcds: Api<Etcd> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let (etcd_store, etcd_writer) = reflector::store();
    let etcd_stream = watcher(etcds, watcher::Config::default())
        .modify(trim::etcd)
        .reflect(etcd_writer)
        .applied_objects()
        .predicate_filter(pass_trigger, Default::default());
    let task_controllers = tokio::spawn(crate::tasks::run(
        client_for_tasks,
        settings_for_tasks,
        scope.namespace.clone(),
        identity.to_string(),
        shutdown.clone(),
    ));
    Controller::for_stream(etcd_stream, etcd_store)
        .owns_stream(sts_stream)
        .with_config(kube::runtime::controller::Config::default().concurrency(workers))
        .graceful_shutdown_on(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .run(reconcile, error_policy, context)
        .for_each(|_| async {})
        .await;
    drain_leases.abort();
    drain_pods.abort();
    let _ = task_controllers.await;
    Ok(())
}
