//! Runs the Etcd controller: the caches (StatefulSets, Leases and Pods that carry druid's
//! managed-by label), the controller over all `Etcd` objects, and the PDB API probe. Every
//! cached object is trimmed ([`crate::trim`]) before it enters its store.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use quorate_api::names::{LABEL_PART_OF, delta_snapshot_lease_name, full_snapshot_lease_name};
use quorate_core::shard::Shard;
use quorate_core::status::triggers::{self, LeaseKind};

use futures::StreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_api::names::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use tokio::sync::watch;

use crate::context::{Caches, Context, NewerVersions, OperatorSettings, SpecBacklog};
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
    /// The server does not serve `policy/v1` PodDisruptionBudgets (Kubernetes older than 1.21).
    #[error(
        "the API server does not serve policy/v1 PodDisruptionBudgets: Kubernetes 1.21 or newer \
         is required (quorate is tested on v1.37.2); upgrade the cluster"
    )]
    NoPolicyV1,
}

/// Refuses servers without `policy/v1` PodDisruptionBudgets (before Kubernetes 1.21), whose
/// other APIs quorate does not test either.
pub async fn require_policy_v1(client: &Client) -> Result<(), StartError> {
    let versions = client.list_api_group_resources("policy/v1").await;
    match versions {
        Ok(list)
            if list
                .resources
                .iter()
                .any(|r| r.name == "poddisruptionbudgets") =>
        {
            Ok(())
        }
        Ok(_) | Err(kube::Error::Api(_)) => Err(StartError::NoPolicyV1),
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
    shard: Shard,
    trim: fn(&mut K),
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
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
    let stream = only_shard(
        watcher(api, config).default_backoff(),
        shard,
        move |object: &K| {
            owning_etcd(object).is_some_and(|etcd| {
                shard.owns(etcd.namespace.as_deref().unwrap_or_default(), &etcd.name)
            })
        },
    )
    .modify(trim)
    .reflect(writer);
    (store, stream)
}

/// The watch events of objects this replica's `shard` owns (`owned`); the others never reach a
/// store or start a pass, so a sharded replica neither keeps nor reconciles another's share.
/// Unsharded, every event passes (and `owned` is not asked).
fn only_shard<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    shard: Shard,
    owned: impl Fn(&K) -> bool,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> {
    events.filter(move |event| {
        let keep = !shard.is_sharded()
            || match event {
                Ok(
                    watcher::Event::Apply(object)
                    | watcher::Event::InitApply(object)
                    | watcher::Event::Delete(object),
                ) => owned(object),
                Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => true,
            };
        futures::future::ready(keep)
    })
}

/// The controller's `Etcd` events: every one into the spec `backlog` (every share's, taken
/// before the shard filter: the replicas share one API server, so one replica's status
/// refreshes slow another's first passes as much as its own; counting only its own share, the
/// replica that finished first rewrote every settled status while the other still created
/// clusters, 0.4 more status writes per cluster at 5,000 over two replicas), then only those of
/// this replica's `shard`.
fn etcd_events(
    events: impl futures::Stream<Item = Result<watcher::Event<Etcd>, watcher::Error>>,
    shard: Shard,
    backlog: Arc<SpecBacklog>,
    auto_reconcile: bool,
) -> impl futures::Stream<Item = Result<watcher::Event<Etcd>, watcher::Error>> {
    let events = events.inspect(move |event| {
        if let Ok(event) = event {
            backlog.observe(event, auto_reconcile);
        }
    });
    only_shard(events, shard, move |etcd| owns_etcd(shard, etcd))
}

/// Whether `shard` owns this `Etcd`.
fn owns_etcd(shard: Shard, etcd: &Etcd) -> bool {
    shard.owns(
        etcd.metadata.namespace.as_deref().unwrap_or_default(),
        etcd.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The objects of `events` whose fingerprint changed (core `status::triggers`), and every
/// deleted one: what starts a pass of their `Etcd`. An object first seen counts as changed
/// from `blank` (so a lease or pod just created starts none); one whose fingerprint is `None`
/// starts none. The initial listing records fingerprints without starting passes (every
/// `Etcd` gets its first pass anyway), except for objects that changed while the watch was
/// down.
fn changed_objects<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    fingerprint: impl Fn(&K) -> Option<u64>,
    blank: impl Fn(&K) -> u64,
) -> impl futures::Stream<Item = Result<K, watcher::Error>>
where
    K: kube::Resource,
{
    let mut seen: HashMap<(Option<String>, String), u64> = HashMap::new();
    let key = |k: &K| {
        (
            k.meta().namespace.clone(),
            k.meta().name.clone().unwrap_or_default(),
        )
    };
    events.filter_map(move |event| {
        let out = match event {
            Err(e) => Some(Err(e)),
            Ok(watcher::Event::Apply(object)) => {
                let now = fingerprint(&object);
                let before = match now {
                    Some(now) => seen.insert(key(&object), now),
                    None => seen.remove(&key(&object)),
                };
                let before = before.or_else(|| Some(blank(&object)));
                (now.is_some() && before != now).then_some(Ok(object))
            }
            Ok(watcher::Event::InitApply(object)) => {
                let now = fingerprint(&object);
                let before = match now {
                    Some(now) => seen.insert(key(&object), now),
                    None => seen.remove(&key(&object)),
                };
                (now.is_some() && before.is_some() && before != now).then_some(Ok(object))
            }
            Ok(watcher::Event::Delete(object)) => {
                seen.remove(&key(&object));
                fingerprint(&object).map(|_| Ok(object))
            }
            Ok(watcher::Event::Init) | Ok(watcher::Event::InitDone) => None,
        };
        futures::future::ready(out)
    })
}

/// Polls `stream` in a task of its own (so the cache it fills is ready before the controller
/// runs) and hands its items over. Unbounded: a bounded hand-over would stop the cache from
/// filling while the controller has not started; the controller takes them as they come.
fn pump<K: Send + 'static>(
    stream: impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) -> (
    tokio::task::JoinHandle<()>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    let triggers = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (task, triggers)
}

/// The `Etcd` a pod or lease belongs to: its part-of label, in its namespace.
fn owning_etcd<K: kube::Resource>(object: &K) -> Option<ObjectRef<Etcd>> {
    let meta = object.meta();
    let name = meta.labels.as_ref()?.get(LABEL_PART_OF)?;
    Some(ObjectRef::new(name).within(meta.namespace.as_deref()?))
}

/// A lease's fingerprint: member leases and the two snapshot leases of its `Etcd`.
fn lease_fingerprint(lease: &Lease) -> Option<u64> {
    let kind = lease_kind(lease)?;
    let spec = lease.spec.as_ref();
    Some(triggers::lease_fingerprint(
        kind,
        spec.and_then(|s| s.holder_identity.as_deref()),
        spec.is_some_and(|s| s.renew_time.is_some()),
        &lease.metadata.annotations.clone().unwrap_or_default(),
    ))
}

fn lease_kind(lease: &Lease) -> Option<LeaseKind> {
    let etcd = owning_etcd(lease)?.name;
    let name = lease.metadata.name.as_deref()?;
    Some(
        if name == full_snapshot_lease_name(&etcd) || name == delta_snapshot_lease_name(&etcd) {
            LeaseKind::Snapshot
        } else {
            LeaseKind::Member
        },
    )
}

/// A member pod's fingerprint: its Ready condition, whether it is being deleted, and how an
/// in-place resize stands (whether the kubelet has seen the spec, its resize conditions).
fn pod_fingerprint(pod: &Pod) -> Option<u64> {
    owning_etcd(pod)?;
    let status = pod.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let ready = conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str());
    let mut resize = String::new();
    if !crate::spec_flow::in_place::kubelet_saw_spec(pod) {
        resize.push_str("unobserved ");
    }
    for c in conditions
        .iter()
        .filter(|c| c.type_.starts_with("PodResize"))
    {
        resize.push_str(&format!("{}={} {:?} ", c.type_, c.status, c.reason));
    }
    Some(triggers::pod_fingerprint(
        ready,
        pod.metadata.deletion_timestamp.is_some(),
        &resize,
    ))
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
    /// The share of the `Etcd`s this replica owns (`--shard`); [`Shard::ALL`] unsharded.
    pub shard: Shard,
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
    require_policy_v1(&client).await?;
    let shard = scope.shard;
    let (statefulsets, sts_stream) = cache(&client, namespace, shard, trim::statefulset);
    let (leases, lease_stream) = cache(&client, namespace, shard, trim::lease);
    let (pods, pod_stream) = cache(&client, namespace, shard, trim::pod);
    // Every StatefulSet change starts its Etcd's pass; a lease or a pod only when what the
    // status reads of it changed (core `status::triggers`), not on every lease renewal.
    let sts_stream = sts_stream.touched_objects();
    let lease_stream = changed_objects(lease_stream, lease_fingerprint, |lease| {
        triggers::blank_lease_fingerprint(lease_kind(lease).unwrap_or(LeaseKind::Member))
    });
    let pod_stream = changed_objects(pod_stream, pod_fingerprint, |_| {
        triggers::blank_pod_fingerprint()
    });
    // The caches fill while their streams are polled, before the controller runs (it starts
    // once they are ready): pumps poll them and hand the triggers over.
    let (lease_pump, lease_triggers) = pump(lease_stream);
    let (pod_pump, pod_triggers) = pump(pod_stream);
    let workers = settings.workers.max(1);
    let (backlog, auto_reconcile) = (Arc::new(SpecBacklog::default()), settings.auto_reconcile);
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
        caches: Caches {
            statefulsets,
            leases: leases.clone(),
            pods: pods.clone(),
        },
        metrics,
        run_id: identity.to_string(),
        newer: NewerVersions::default(),
        announced_defrags: Default::default(),
        backlog: backlog.clone(),
    });
    leases.wait_until_ready().await.ok();
    pods.wait_until_ready().await.ok();
    let etcds: Api<Etcd> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let (etcd_store, etcd_writer) = reflector::store();
    let etcd_stream = etcd_events(
        watcher(etcds, watcher::Config::default()),
        shard,
        backlog,
        auto_reconcile,
    )
    .modify(trim::etcd)
    .reflect(etcd_writer)
    .applied_objects()
    .predicate_filter(pass_trigger, Default::default());
    let task_controllers = tokio::spawn(crate::tasks::run(
        client_for_tasks,
        settings_for_tasks,
        scope.namespace.clone(),
        shard,
        identity.to_string(),
        shutdown.clone(),
    ));
    Controller::for_stream(etcd_stream, etcd_store)
        .owns_stream(sts_stream)
        .watches_stream(lease_triggers, |lease| owning_etcd(&lease))
        .watches_stream(pod_triggers, |pod| owning_etcd(&pod))
        .with_config(kube::runtime::controller::Config::default().concurrency(workers))
        .graceful_shutdown_on(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .run(reconcile, error_policy, context)
        .for_each(|_| async {})
        .await;
    lease_pump.abort();
    pod_pump.abort();
    let _ = task_controllers.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_etcd(name: &str) -> Etcd {
        let mut etcd = Etcd::new(name, Default::default());
        etcd.metadata.namespace = Some("ns".into());
        etcd.metadata.generation = Some(1);
        etcd
    }

    #[tokio::test]
    async fn the_backlog_counts_every_share_and_the_controller_sees_only_its_own() {
        let shard = Shard::new(0, 2).unwrap();
        let names: Vec<String> = (0..16).map(|i| format!("etcd-{i}")).collect();
        let mine = names.iter().filter(|n| shard.owns("ns", n)).count();
        assert!(0 < mine && mine < names.len(), "both shares have clusters");
        let events = futures::stream::iter(
            names
                .iter()
                .map(|n| Ok(watcher::Event::Apply(new_etcd(n))))
                .collect::<Vec<_>>(),
        );
        let backlog = Arc::new(SpecBacklog::default());
        let passed: Vec<_> = etcd_events(events, shard, backlog.clone(), false)
            .collect()
            .await;
        assert_eq!(passed.len(), mine);
        assert_eq!(backlog.waiting(), names.len());
    }
}
