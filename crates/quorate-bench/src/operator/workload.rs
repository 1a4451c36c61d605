//! The workload and what the benchmark asks the API server: many `Etcd` objects made from
//! `examples/etcd-cluster.yaml`, created as fast as the client goes; a watch that notes when
//! each is reconciled; the baseline's plain replay of the operator's first pass; scrapes of
//! the API server's request counters; and lists of what ended up stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use quorate_api::Etcd;
use quorate_api::annotations::ETCD_FINALIZER;
use quorate_api::names::{LABEL_MANAGED_BY, MANAGED_BY_VALUE, config_map_name};
use quorate_api::status::LastOperationState;
use quorate_core::components::{ComponentContext, desired_components};
use quorate_operator::Images;
use quorate_operator::replay::{
    PassOutcome, StatusInputs, apply_component, compute_status, token_secret,
};
use tokio::sync::{mpsc, watch};

use super::metrics::{RequestCounts, parse_apiserver_requests};
use crate::error::{BenchError, Result};

/// The example every cluster is made from.
pub const EXAMPLE: &str = include_str!("../../../../examples/etcd-cluster.yaml");

/// Name of the `i`-th namespace.
pub fn namespace_name(i: usize) -> String {
    format!("bench-{i}")
}

/// `count` `Etcd` objects from [`EXAMPLE`] spread round-robin over `namespaces` namespaces,
/// each with its own name (`etcd-0000`, ...), which also replaces the example's name in its
/// labels, annotations and backup prefix.
pub fn clusters(count: usize, namespaces: usize) -> Result<Vec<Etcd>> {
    let template: Etcd = serde_saphyr::from_str(EXAMPLE)
        .map_err(|e| BenchError::failed(format!("examples/etcd-cluster.yaml: {e}")))?;
    let example_name = template.metadata.name.clone().unwrap_or_default();
    let rename = |map: &mut Option<std::collections::BTreeMap<String, String>>, name: &str| {
        for value in map.iter_mut().flat_map(|m| m.values_mut()) {
            if *value == example_name {
                *value = name.to_string();
            }
        }
    };
    Ok((0..count)
        .map(|i| {
            let name = format!("etcd-{i:04}");
            let mut etcd = template.clone();
            etcd.metadata.name = Some(name.clone());
            etcd.metadata.namespace = Some(namespace_name(i % namespaces.max(1)));
            rename(&mut etcd.metadata.labels, &name);
            let mut spec_labels = Some(std::mem::take(&mut etcd.spec.labels));
            rename(&mut spec_labels, &name);
            etcd.spec.labels = spec_labels.unwrap_or_default();
            rename(&mut etcd.spec.annotations, &name);
            if let Some(store) = etcd.spec.backup.store.as_mut() {
                store.prefix = name.clone();
            }
            etcd
        })
        .collect())
}

/// `namespace/name` of an object.
pub fn key_of(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Creates the namespaces `bench-0` ... `bench-{n-1}`.
pub async fn create_namespaces(client: &Client, n: usize) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    for i in 0..n {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace_name(i)),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        api.create(&PostParams::default(), &namespace)
            .await
            .map_err(kube_failed("create namespace", &namespace_name(i)))?;
    }
    Ok(())
}

fn kube_failed(action: &'static str, what: &str) -> impl FnOnce(kube::Error) -> BenchError {
    let what = what.to_string();
    move |e| BenchError::failed(format!("{action} {what}: {e}"))
}

/// The creates, measured.
#[derive(Debug, Default)]
pub struct Created {
    /// From the first create sent until the last one was acknowledged.
    pub elapsed: Duration,
    /// When each create was acknowledged, by `namespace/name`.
    pub at: HashMap<String, Instant>,
}

/// Creates every `Etcd`, `concurrency` at a time, from `t0`; each created object (as the API
/// server returned it) goes to `created` when given.
pub async fn create_all(
    client: &Client,
    etcds: &[Etcd],
    concurrency: usize,
    t0: Instant,
    created: Option<mpsc::UnboundedSender<Etcd>>,
) -> Result<Created> {
    let results: Vec<(String, Instant)> = futures::stream::iter(etcds.iter().cloned())
        .map(|etcd| {
            let client = client.clone();
            let created = created.clone();
            async move {
                let key = key_of(&etcd.metadata);
                let namespace = etcd.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Etcd> = Api::namespaced(client, &namespace);
                let made = api
                    .create(&PostParams::default(), &etcd)
                    .await
                    .map_err(kube_failed("create Etcd", &key))?;
                let at = Instant::now();
                if let Some(created) = created {
                    let _ = created.send(made);
                }
                Ok::<_, BenchError>((key, at))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    let last = results.iter().map(|(_, at)| *at).max().unwrap_or(t0);
    Ok(Created {
        elapsed: last.saturating_duration_since(t0),
        at: results.into_iter().collect(),
    })
}

/// Whether `etcd` is reconciled once: `status.observedGeneration == 1` and the last operation
/// succeeded.
pub fn reconciled(etcd: &Etcd) -> bool {
    let Some(status) = etcd.status.as_ref() else {
        return false;
    };
    status.observed_generation == Some(1)
        && status
            .last_operation
            .as_ref()
            .is_some_and(|op| op.state == LastOperationState::Succeeded)
}

/// A watch over every `Etcd` that notes when each is first seen reconciled.
pub struct ConvergenceWatch {
    done: Arc<Mutex<HashMap<String, Instant>>>,
    count: watch::Receiver<usize>,
    listed: watch::Receiver<bool>,
    errors: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ConvergenceWatch {
    /// Starts the watch and returns once its initial list is done.
    pub async fn start(client: &Client) -> Result<ConvergenceWatch> {
        let api: Api<Etcd> = Api::all(client.clone());
        let done: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let (count_tx, count) = watch::channel(0usize);
        let (listed_tx, mut listed) = watch::channel(false);
        let (task_done, task_errors) = (done.clone(), errors.clone());
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let etcd = match event {
                    Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => e,
                    Ok(watcher::Event::InitDone) => {
                        let _ = listed_tx.send(true);
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        if let Ok(mut errors) = task_errors.lock() {
                            errors.push(e.to_string());
                        }
                        continue;
                    }
                };
                if !reconciled(&etcd) {
                    continue;
                }
                let now = Instant::now();
                let Ok(mut done) = task_done.lock() else {
                    return;
                };
                done.entry(key_of(&etcd.metadata)).or_insert(now);
                let _ = count_tx.send(done.len());
            }
        });
        tokio::time::timeout(Duration::from_secs(30), listed.wait_for(|l| *l))
            .await
            .map_err(|_| BenchError::failed("the watch on Etcds did not list within 30 s"))?
            .map_err(|_| BenchError::failed("the watch on Etcds ended before listing"))?;
        Ok(ConvergenceWatch {
            done,
            count,
            listed,
            errors,
            task,
        })
    }

    /// Waits until `n` objects are reconciled or `timeout` has passed; true when all are.
    pub async fn wait_for(&mut self, n: usize, timeout: Duration) -> bool {
        let waited = tokio::time::timeout(timeout, self.count.wait_for(|c| *c >= n)).await;
        matches!(waited, Ok(Ok(_)))
    }

    /// How many are reconciled so far.
    pub fn count(&self) -> usize {
        *self.count.borrow()
    }

    /// Stops the watch; returns when each object was first seen reconciled, and the watch
    /// errors met (retried with backoff).
    pub fn stop(self) -> (HashMap<String, Instant>, Vec<String>) {
        self.task.abort();
        let _ = self.listed;
        let done = self.done.lock().map(|d| d.clone()).unwrap_or_default();
        let errors = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        (done, errors)
    }
}

impl Drop for ConvergenceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the baseline's plain replay of the operator's first pass needs.
pub struct Replay {
    client: Client,
    recorder: Recorder,
    images: Images,
}

/// The run id the baseline writes into `lastOperation.runID`.
pub const BASELINE_RUN_ID: &str = "quorate-bench-baseline";

impl Replay {
    /// A replay writing through `client`.
    pub fn new(client: Client) -> Replay {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "quorate-bench-baseline".to_string(),
                instance: Some(BASELINE_RUN_ID.to_string()),
            },
        );
        Replay {
            client,
            recorder,
            images: Images::default(),
        }
    }

    /// The requests of the operator's first pass over a new `Etcd`, one after the other and
    /// nothing else: add the finalizer (merge patch), read the agents' token Secret (absent) and
    /// create it, read the ConfigMap (absent), apply the
    /// 12 components and the StatefulSet (server-side apply, the operator's own functions and
    /// objects), publish the `ReconcileSucceeded` event, write the status (merge patch of the
    /// operator's `compute_status`).
    pub async fn first_pass(&self, etcd: Etcd) -> Result<()> {
        let key = key_of(&etcd.metadata);
        let namespace = etcd.metadata.namespace.clone().unwrap_or_default();
        let name = etcd.metadata.name.clone().unwrap_or_default();
        let api: Api<Etcd> = Api::namespaced(self.client.clone(), &namespace);
        let patch = serde_json::json!({"metadata": {
            "finalizers": [ETCD_FINALIZER],
            "resourceVersion": etcd.metadata.resource_version,
        }});
        let etcd = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_failed("add the finalizer to", &key))?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
        let token = token_secret(&etcd).map_err(|e| BenchError::failed(e.to_string()))?;
        let token_name = token.metadata.name.clone().unwrap_or_default();
        secrets
            .get_opt(&token_name)
            .await
            .map_err(kube_failed("get the agent token Secret of", &key))?;
        secrets
            .create(&PostParams::default(), &token)
            .await
            .map_err(kube_failed("create the agent token Secret of", &key))?;
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        config_maps
            .get_opt(&config_map_name(&name))
            .await
            .map_err(kube_failed("get the ConfigMap of", &key))?;
        let ctx = ComponentContext::new(self.images.member.clone(), self.images.init.clone());
        let desired = desired_components(&etcd, &ctx)
            .map_err(|e| BenchError::failed(format!("components of {key}: {e}")))?;
        for object in desired.in_sync_order() {
            apply_component(&self.client, object)
                .await
                .map_err(|e| BenchError::failed(e.to_string()))?;
        }
        let event = KubeEvent {
            type_: EventType::Normal,
            reason: "ReconcileSucceeded".to_string(),
            note: Some("every component is as the spec asks".to_string()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        self.recorder
            .publish(&event, &etcd.object_ref(&()))
            .await
            .map_err(kube_failed("publish the event of", &key))?;
        let members = std::collections::BTreeMap::new();
        let status = compute_status(StatusInputs {
            etcd: &etcd,
            leases: &[],
            backup: None,
            statefulset: None,
            members: &members,
            scale: None,
            etcd_version: None,
            outcome: &PassOutcome::Succeeded,
            run_id: BASELINE_RUN_ID,
            now: jiff::Timestamp::now(),
        });
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "status": status })),
        )
        .await
        .map_err(kube_failed("write the status of", &key))?;
        Ok(())
    }
}

/// The API server's `apiserver_request_total`, read from its `/metrics`.
pub async fn apiserver_requests(client: &Client) -> Result<RequestCounts> {
    let request = kube::core::Request::new("")
        .get("metrics", &Default::default())
        .map_err(|e| BenchError::failed(format!("building the /metrics request: {e}")))?;
    let text = client
        .request_text(request)
        .await
        .map_err(|e| BenchError::failed(format!("reading the API server's /metrics: {e}")))?;
    let counts = parse_apiserver_requests(&text);
    if counts.is_empty() {
        return Err(BenchError::failed(
            "the API server's /metrics has no apiserver_request_total",
        ));
    }
    Ok(counts)
}

/// One kind of stored object, listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// What was listed (`statefulsets`, ...).
    pub what: String,
    /// Objects found.
    pub count: usize,
    /// Size of the JSON list, bytes.
    pub bytes: usize,
}

/// One cached kind: listed, and its size once deserialized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached {
    /// The list.
    pub listed: Listed,
    /// Heap bytes of the deserialized objects.
    pub heap: u64,
    /// The same as the operator caches them, trimmed by `quorate_operator::replay::trim`.
    pub heap_cached: u64,
}

/// The JSON list of `path` (`/api/v1/...` or `/apis/...`), only objects managed for an
/// `Etcd` when `managed` is set.
pub async fn list_text(client: &Client, path: &str, managed: bool) -> Result<String> {
    let mut params = ListParams::default();
    if managed {
        params = params.labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"));
    }
    let request = kube::core::Request::new(path)
        .list(&params)
        .map_err(|e| BenchError::failed(format!("building the list of {path}: {e}")))?;
    client
        .request_text(request)
        .await
        .map_err(|e| BenchError::failed(format!("listing {path}: {e}")))
}

/// Lists `path` as [`list_text`] does and counts the objects.
pub async fn list(client: &Client, what: &str, path: &str, managed: bool) -> Result<Listed> {
    let text = list_text(client, path, managed).await?;
    listed(what, &text)
}

/// Counts the objects of a JSON list.
pub fn listed(what: &str, text: &str) -> Result<Listed> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| BenchError::failed(format!("the list of {what} is not JSON: {e}")))?;
    let count = value["items"].as_array().map(Vec::len).unwrap_or(0);
    Ok(Listed {
        what: what.to_string(),
        count,
        bytes: text.len(),
    })
}

/// Heap bytes the objects of a JSON list take once deserialized as `K`, each in an `Arc` as a
/// reflector store keeps them: as served, and as the operator caches them (each trimmed by
/// `trim`, the operator's own function from `quorate_operator::replay::trim`, right after it is
/// deserialized).
pub fn heap_of_list<K: serde::de::DeserializeOwned + Clone>(
    text: &str,
    trim: fn(&mut K),
) -> Result<(u64, u64)> {
    let parse = |text: &str, trim: Option<fn(&mut K)>| {
        serde_json::from_str::<kube::core::ObjectList<K>>(text)
            .map(|list| {
                list.items
                    .into_iter()
                    .map(|mut item| {
                        if let Some(trim) = trim {
                            trim(&mut item);
                        }
                        Arc::new(item)
                    })
                    .collect::<Vec<_>>()
            })
            .map_err(|e| BenchError::failed(format!("a list does not deserialize: {e}")))
    };
    let (items, full) = crate::alloc_count::retained_by(|| parse(text, None));
    drop(items?);
    let (items, cached) = crate::alloc_count::retained_by(|| parse(text, Some(trim)));
    drop(items?);
    Ok((full, cached))
}

/// The components every `Etcd` of the example gets, per cluster: (resource, API path, count).
pub fn component_lists() -> Vec<(&'static str, String, usize)> {
    vec![
        ("serviceaccounts", "/api/v1/serviceaccounts".to_string(), 1),
        (
            "roles",
            "/apis/rbac.authorization.k8s.io/v1/roles".to_string(),
            1,
        ),
        (
            "rolebindings",
            "/apis/rbac.authorization.k8s.io/v1/rolebindings".to_string(),
            1,
        ),
        (
            "leases",
            "/apis/coordination.k8s.io/v1/leases".to_string(),
            5,
        ),
        (
            "poddisruptionbudgets",
            "/apis/policy/v1/poddisruptionbudgets".to_string(),
            1,
        ),
        ("services", "/api/v1/services".to_string(), 2),
        ("configmaps", "/api/v1/configmaps".to_string(), 1),
        ("statefulsets", "/apis/apps/v1/statefulsets".to_string(), 1),
    ]
}

/// Counts the stored components against what `clusters` clusters should have: (listed,
/// expected) per resource.
pub async fn count_components(client: &Client, clusters: usize) -> Result<Vec<(Listed, usize)>> {
    let mut out = Vec::new();
    for (what, path, per_cluster) in component_lists() {
        out.push((
            list(client, what, &path, true).await?,
            per_cluster * clusters,
        ));
    }
    Ok(out)
}

/// The path of the `Etcd` list.
pub const ETCDS_PATH: &str = "/apis/druid.gardener.cloud/v1alpha1/etcds";
/// The path of the pod list.
pub const PODS_PATH: &str = "/api/v1/pods";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_have_distinct_names_in_round_robin_namespaces() {
        let etcds = clusters(25, 10).unwrap();
        assert_eq!(etcds.len(), 25);
        let keys: std::collections::BTreeSet<String> =
            etcds.iter().map(|e| key_of(&e.metadata)).collect();
        assert_eq!(keys.len(), 25);
        let names: std::collections::BTreeSet<_> =
            etcds.iter().map(|e| e.metadata.name.clone()).collect();
        assert_eq!(names.len(), 25);
        assert_eq!(etcds[0].metadata.namespace.as_deref(), Some("bench-0"));
        assert_eq!(etcds[13].metadata.namespace.as_deref(), Some("bench-3"));
        let e = &etcds[7];
        assert_eq!(e.spec.replicas, 3);
        assert_eq!(e.metadata.labels.as_ref().unwrap()["app"], "etcd-0007");
        assert_eq!(e.spec.labels["app"], "etcd-0007");
        assert_eq!(e.spec.backup.store.as_ref().unwrap().prefix, "etcd-0007");
    }

    #[test]
    fn reconciled_needs_generation_one_and_success() {
        let mut e = clusters(1, 1).unwrap().remove(0);
        assert!(!reconciled(&e));
        e.status = Some(quorate_api::status::EtcdStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        assert!(!reconciled(&e));
        e.status.as_mut().unwrap().last_operation =
            Some(quorate_core::last_operation::reconcile_operation(
                Some(1),
                LastOperationState::Succeeded,
                "",
                "run",
                jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(reconciled(&e));
    }

    #[test]
    fn thirteen_components_per_cluster() {
        let per_cluster: usize = component_lists().iter().map(|(_, _, n)| n).sum();
        assert_eq!(per_cluster, 13);
    }
}
