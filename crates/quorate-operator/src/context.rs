//! What every reconcile shares: the client, the operator's settings, the caches of the objects
//! it reads every pass, metrics and the event recorder.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use quorate_api::Etcd;
use quorate_core::reconcile_control::awaits_spec_flow;

use crate::images::Images;
use crate::metrics::Metrics;

/// How the operator behaves; set from its command line.
#[derive(Clone, Debug)]
pub struct OperatorSettings {
    /// `--enable-etcd-spec-auto-reconcile`: apply spec changes without the reconcile
    /// annotation.
    pub auto_reconcile: bool,
    /// Images of the etcd pods.
    pub images: Images,
    /// `--disable-etcd-serviceaccount-automount`.
    pub disable_service_account_automount: bool,
    /// How often a cluster's status is refreshed when nothing else triggers a pass (druid's
    /// `etcdStatusSyncPeriod`, 15 s).
    pub status_sync_period: Duration,
    /// How soon a pass that has to wait (peer TLS, pods not ready) looks again (druid: 10 s).
    pub wait_period: Duration,
    /// Clusters reconciled at the same time.
    pub workers: u16,
    /// Host directories a `Local` store's Secret may name as `hostPath` (besides druid's
    /// default, always allowed).
    pub allowed_host_paths: Vec<String>,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        OperatorSettings {
            auto_reconcile: false,
            images: Images::default(),
            disable_service_account_automount: false,
            status_sync_period: Duration::from_secs(15),
            wait_period: Duration::from_secs(10),
            workers: 3,
            allowed_host_paths: Vec::new(),
        }
    }
}

/// Caches of the objects every pass reads, filled by watches, so a pass that changes nothing
/// costs no API reads. They hold the objects trimmed by [`crate::trim`].
#[derive(Clone)]
pub struct Caches {
    /// StatefulSets managed for some `Etcd`.
    pub statefulsets: Store<StatefulSet>,
    /// Member and snapshot leases.
    pub leases: Store<Lease>,
    /// Etcd pods, for container readiness.
    pub pods: Store<Pod>,
}

impl Caches {
    /// The StatefulSet `namespace/name`.
    pub fn statefulset(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>> {
        self.statefulsets
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The lease `namespace/name`.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Arc<Lease>> {
        self.leases.get(&ObjectRef::new(name).within(namespace))
    }

    /// The pod `namespace/name`.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }
}

/// Shared by every reconcile.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The operator's settings.
    pub settings: OperatorSettings,
    /// Object caches.
    pub caches: Caches,
    /// Metrics.
    pub metrics: Metrics,
    /// Publishes Kubernetes events.
    pub recorder: Recorder,
    /// This process's identity in `lastOperation.runID`.
    pub run_id: String,
    /// Versions of `Etcd` objects newer than the controller's cache may show yet.
    pub newer: NewerVersions,
    /// Defragmentation outcomes already announced as events.
    pub announced_defrags: crate::defrag_events::AnnouncedDefrags,
    /// The `Etcd`s waiting for their spec flow, before which status refreshes wait.
    pub backlog: Arc<SpecBacklog>,
}

/// The `Etcd`s that wait for their spec flow on a generation not yet reconciled (core
/// `reconcile_control::awaits_spec_flow`), every replica's share of them, as the controller's
/// watch last showed them: kept from each watch event, so asking how many costs nothing per
/// pass. While there are any, settled clusters put off rewriting an unchanged status (core
/// `status::refresh`), leaving the API server to the work that changes something.
#[derive(Debug, Default)]
pub struct SpecBacklog(Mutex<BacklogState>);

#[derive(Debug, Default)]
struct BacklogState {
    /// `namespace/name` of each waiting `Etcd`.
    waiting: HashSet<String>,
    /// While the watch lists everything afresh: the waiting ones listed so far, which replace
    /// `waiting` when the listing is complete (so one deleted meanwhile does not stay).
    relisting: Option<HashSet<String>>,
}

impl SpecBacklog {
    /// Takes in one event of the controller's `Etcd` watch.
    pub fn observe(&self, event: &watcher::Event<Etcd>, auto_reconcile: bool) {
        let key = |etcd: &Etcd| {
            format!(
                "{}/{}",
                etcd.metadata.namespace.as_deref().unwrap_or_default(),
                etcd.metadata.name.as_deref().unwrap_or_default()
            )
        };
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => state.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(etcd) => {
                if awaits_spec_flow(etcd, auto_reconcile) {
                    state
                        .relisting
                        .get_or_insert_with(HashSet::new)
                        .insert(key(etcd));
                }
            }
            watcher::Event::InitDone => {
                state.waiting = state.relisting.take().unwrap_or_default();
            }
            watcher::Event::Apply(etcd) => {
                if awaits_spec_flow(etcd, auto_reconcile) {
                    state.waiting.insert(key(etcd));
                } else {
                    state.waiting.remove(&key(etcd));
                }
            }
            watcher::Event::Delete(etcd) => {
                state.waiting.remove(&key(etcd));
            }
        }
    }

    /// How many `Etcd`s wait.
    pub fn waiting(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .len()
    }
}

/// The `resourceVersion` of each `Etcd` this process wrote (or read from the API server) last,
/// by uid, kept until the controller's cache shows that version. A pass triggered while an
/// earlier one ran starts right after that pass's writes, often before the watch has brought
/// them into the cache; with this it knows to read the object afresh instead of redoing work
/// the stale copy still asks for.
#[derive(Debug, Default)]
pub struct NewerVersions(Mutex<HashMap<String, String>>);

impl NewerVersions {
    /// Remembers `resource_version` as the newest version of the `Etcd` with this uid.
    pub fn record(&self, uid: Option<&str>, resource_version: Option<&str>) {
        if let (Some(uid), Some(version)) = (uid, resource_version) {
            self.map().insert(uid.to_string(), version.to_string());
        }
    }

    /// The newest version remembered for this uid.
    pub fn get(&self, uid: &str) -> Option<String> {
        self.map().get(uid).cloned()
    }

    /// Forgets this uid (the cache caught up, or the object is gone).
    pub fn forget(&self, uid: &str) {
        self.map().remove(uid);
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_api::status::EtcdStatus;

    fn etcd(name: &str, observed: Option<i64>) -> Etcd {
        let mut etcd = Etcd::new(name, Default::default());
        etcd.metadata.namespace = Some("ns".into());
        etcd.metadata.generation = Some(1);
        etcd.status = observed.map(|o| EtcdStatus {
            observed_generation: Some(o),
            ..Default::default()
        });
        etcd
    }

    #[test]
    fn the_backlog_follows_the_watch_and_a_relisting_replaces_it() {
        use watcher::Event::*;
        let backlog = SpecBacklog::default();
        backlog.observe(&Apply(etcd("a", None)), false);
        backlog.observe(&Apply(etcd("b", None)), false);
        backlog.observe(&Apply(etcd("c", Some(1))), false);
        assert_eq!(backlog.waiting(), 2);
        // Its first pass reconciled it.
        backlog.observe(&Apply(etcd("a", Some(1))), false);
        assert_eq!(backlog.waiting(), 1);
        // `b` is deleted while the watch is down: the relisting does not show it.
        backlog.observe(&Init, false);
        backlog.observe(&InitApply(etcd("c", Some(1))), false);
        backlog.observe(&InitApply(etcd("d", None)), false);
        assert_eq!(
            backlog.waiting(),
            1,
            "the old set counts until the listing is complete"
        );
        backlog.observe(&InitDone, false);
        assert_eq!(backlog.waiting(), 1);
        backlog.observe(&Delete(etcd("d", None)), false);
        assert_eq!(backlog.waiting(), 0);
    }
}
