//! One scenario: its own namespace (and volumes), its timings, and its line in the results.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use quorate_api::Etcd;

use crate::cluster::Cluster;
use crate::env::E2eEnv;
use crate::manifests::EtcdShape;
use crate::members::wait_fully_ready;
use crate::provisioner::HostPathProvisioner;
use crate::wait::wait_for;

/// How long a cluster may take from `kubectl apply` (or a disruption) to Ready: pods scheduled,
/// images present, etcd formed, readiness probes passed, first full and delta snapshots taken.
pub const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// Label on the namespaces the suite makes.
pub const SCENARIO_LABEL: &str = "e2e.quorate.io/scenario";

/// The message of the last panic, so a failed scenario's line in the results says why.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);
static PANIC_HOOK: Once = Once::new();

fn remember_panics() {
    PANIC_HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            if let Ok(mut last) = LAST_PANIC.lock() {
                *last = Some(message);
            }
            default(info);
        }));
    });
}

/// A running scenario. [`Scenario::pass`] records it as passed and deletes its namespace; a
/// scenario dropped without it (a failed assertion) is recorded as FAILED and its namespace
/// is left for inspection (`scripts/e2e.sh` copies its logs).
pub struct Scenario {
    /// Short name, used in the namespace and the results.
    pub name: String,
    /// The scenario's namespace.
    pub namespace: String,
    /// The cluster.
    pub cluster: Cluster,
    started: Instant,
    measured: Vec<(String, String)>,
    numbers: Vec<(String, String)>,
    provisioner: Option<HostPathProvisioner>,
    done: bool,
}

impl Scenario {
    /// Creates the namespace `e2e-<name>-<suffix>`, waits until pods can be created in it,
    /// and starts the hostPath provisioner when the cluster needs one.
    pub async fn start(env: &E2eEnv, name: &str) -> Scenario {
        remember_panics();
        let cluster = Cluster::connect(env).await;
        let suffix = format!(
            "{:04x}",
            std::process::id() as u16 ^ (jiff::Timestamp::now().as_millisecond() as u16)
        );
        let namespace = format!("e2e-{name}-{suffix}");
        println!("== scenario {name}: namespace {namespace}");
        let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            SCENARIO_LABEL.to_string(),
                            name.to_string(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("creating namespace {namespace}: {e}"));
        grant_secrets(&cluster, &namespace).await;
        // Before Kubernetes 1.24 a pod cannot be created until the token controller has given
        // the namespace's `default` ServiceAccount its token Secret.
        let legacy_tokens = cluster
            .client
            .apiserver_version()
            .await
            .ok()
            .and_then(|v| v.minor.trim_end_matches('+').parse::<u32>().ok())
            .is_some_and(|minor| minor < 24);
        let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), &namespace);
        wait_for(
            "the namespace's default ServiceAccount",
            Duration::from_secs(60),
            Duration::from_millis(250),
            || async {
                match accounts.get_opt("default").await {
                    Ok(Some(sa))
                        if !legacy_tokens || sa.secrets.as_ref().is_some_and(|s| !s.is_empty()) =>
                    {
                        Ok(())
                    }
                    Ok(Some(_)) => Err("no token Secret yet".to_string()),
                    Ok(None) => Err("not there yet".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await;
        let provisioner = env
            .hostpath_dir
            .as_ref()
            .map(|dir| HostPathProvisioner::start(cluster.client.clone(), &namespace, dir));
        Scenario {
            name: name.to_string(),
            namespace,
            cluster,
            started: Instant::now(),
            measured: Vec::new(),
            numbers: Vec::new(),
            provisioner,
            done: false,
        }
    }

    /// Records the canary writer's `totals` (see `quorate canary`) and asserts that no write
    /// failed and none waited `longest_ms` or more.
    pub fn writer_held(&mut self, totals: &serde_json::Value, longest_ms: u64) {
        self.measure(
            "writer",
            format!(
                "{} acknowledged, {} failed, {} retried attempts, longest write {} ms",
                totals["acknowledged"],
                totals["failed"],
                totals["retried_attempts"],
                totals["longest_wait_ms"]
            ),
        );
        assert_eq!(totals["failed"], 0, "writes failed: {totals}");
        let longest = totals["longest_wait_ms"].as_u64().unwrap_or(u64::MAX);
        assert!(
            longest < longest_ms,
            "a write waited {longest} ms (less than {longest_ms} ms allowed): {totals}"
        );
    }

    /// Records a measurement for the results table (e.g. `apply→Ready`, `41.2 s`).
    pub fn measure(&mut self, what: &str, value: impl Into<String>) {
        let value = value.into();
        println!("  measured {what}: {value}");
        self.measured.push((what.to_string(), value));
    }

    /// Records a value for the benchmark table (`docs/benchmarks/e2e.md`); written only when the
    /// scenario passes, so a failed run never yields numbers.
    pub fn record_number(&mut self, key: &str, value: impl std::fmt::Display) {
        self.numbers.push((key.to_string(), value.to_string()));
    }

    /// The host directory of this scenario's `Local` backup buckets.
    pub fn bucket_dir(&self) -> std::path::PathBuf {
        self.cluster.env.bucket_host_dir().join(&self.namespace)
    }

    /// `kubectl apply` of a plain `Etcd` (no peer TLS) of `replicas` members, with backups to
    /// [`Scenario::bucket_dir`] when `backups`, then waits until it is fully ready.
    pub async fn create_ready_etcd(&self, name: &str, replicas: u32, backups: bool) -> Etcd {
        self.create_ready_etcd_with(name, replicas, backups, false)
            .await
    }

    /// [`Scenario::create_ready_etcd`]; with `secured`, its backups are encrypted (the keys of
    /// the Secret `<name>-backup-keys`) and its agents serve HTTPS requiring client
    /// certificates (`spec.backup.tls`), every Secret made with it as a user would.
    pub async fn create_ready_etcd_with(
        &self,
        name: &str,
        replicas: u32,
        backups: bool,
        secured: bool,
    ) -> Etcd {
        let bucket = self.bucket_dir().display().to_string();
        let keys = format!("{name}-backup-keys");
        let shape = EtcdShape {
            name,
            namespace: &self.namespace,
            replicas,
            local_bucket: backups.then_some(bucket.as_str()),
            peer_tls: false,
            reconcile: false,
            etcd_version: None,
            cpu: crate::manifests::DEFAULT_CPU,
            backup_tls: secured,
            client_tls: false,
            backup_encryption_secret: secured.then_some(keys.as_str()),
            pod_revision: None,
        };
        if secured {
            let secrets = crate::tls::backup_tls_secrets(name, &self.namespace);
            self.cluster.apply(&secrets).await;
        }
        println!("{}", self.cluster.apply(&shape.yaml()).await.trim_end());
        wait_fully_ready(
            &self.cluster,
            &self.namespace,
            name,
            replicas as i32,
            backups,
            READY_TIMEOUT,
        )
        .await
    }

    /// Three members `name`, one per node on node-bound volumes
    /// ([`EtcdShape::yaml_one_per_node`]), with backups, fully ready.
    pub async fn create_one_per_node(&self, name: &str) -> Etcd {
        let bucket = self.bucket_dir().display().to_string();
        let shape = EtcdShape {
            local_bucket: Some(&bucket),
            ..EtcdShape::new(name, &self.namespace, 3)
        };
        self.cluster.apply(&shape.yaml_one_per_node()).await;
        wait_fully_ready(&self.cluster, &self.namespace, name, 3, true, READY_TIMEOUT).await
    }

    /// [`Scenario::create_one_per_node`], then the canary `<name>-canary` (`quorate canary
    /// --write-timeout 5s`) writing to every member
    /// ([`crate::manifests::canary_pod_all_members`]). Returns the canary pod's name.
    pub async fn create_one_per_node_under_a_canary(&self, name: &str) -> String {
        self.create_one_per_node(name).await;
        let image = &self.cluster.env.image;
        self.cluster
            .apply(&crate::manifests::canary_pod_all_members(
                image,
                name,
                &self.namespace,
                3,
                "5s",
            ))
            .await;
        let canary = format!("{name}-canary");
        crate::members::wait_canary_writing(&self.cluster, &self.namespace, &canary).await;
        canary
    }

    /// Seconds since the scenario started.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The scenario passed its checks: deletes its namespace and waits until its `Etcd`
    /// objects are gone (failing when a finalizer stays) and its pods have stopped, so the next
    /// scenario starts on a quiet node; then deletes its volumes and records it with the time
    /// its checks took. The namespace object itself goes in the background: the namespace
    /// controller re-checks only after the longest grace period of the pods it saw, which
    /// would add up to 30 s per scenario for nothing.
    pub async fn pass(mut self) {
        let seconds = self.elapsed();
        let namespaces: Api<Namespace> = Api::all(self.cluster.client.clone());
        let _ = namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await;
        let ns = self.namespace.clone();
        let etcds: Api<Etcd> = Api::namespaced(self.cluster.client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(self.cluster.client.clone(), &ns);
        wait_for(
            &format!("namespace {ns} emptied of Etcd objects and pods"),
            Duration::from_secs(180),
            Duration::from_millis(500),
            || async {
                let left = |names: Vec<Option<String>>| -> Vec<String> {
                    names.into_iter().flatten().collect()
                };
                let etcds = etcds.list(&ListParams::default()).await;
                let pods = pods.list(&ListParams::default()).await;
                match (etcds, pods) {
                    (Ok(e), Ok(p)) if e.items.is_empty() && p.items.is_empty() => Ok(()),
                    (Ok(e), Ok(p)) => Err(format!(
                        "Etcd {:?}, pods {:?}",
                        left(e.items.into_iter().map(|o| o.metadata.name).collect()),
                        left(p.items.into_iter().map(|o| o.metadata.name).collect())
                    )),
                    (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
                }
            },
        )
        .await;
        if let Some(p) = self.provisioner.take() {
            p.cleanup().await;
        }
        // Recorded only now: an Etcd that does not go away (its finalizer stays)
        // fails the scenario.
        self.done = true;
        self.record("passed", seconds);
        self.write_numbers();
        println!(
            "== scenario {}: passed in {seconds:.1} s (cleanup {:.1} s)",
            self.name,
            self.elapsed() - seconds
        );
    }

    fn write_numbers(&self) {
        let Some(path) = &self.cluster.env.bench else {
            return;
        };
        let lines: String = self
            .numbers
            .iter()
            .map(|(k, v)| format!("{}\t{k}\t{v}\n", self.name))
            .collect();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(lines.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "cannot record the benchmark numbers in {}: {e}",
                path.display()
            );
        }
    }

    fn record(&self, result: &str, seconds: f64) {
        let Some(path) = &self.cluster.env.results else {
            return;
        };
        let measured = self
            .measured
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let line = format!("{}\t{result}\t{seconds:.1}\t{measured}\n", self.name);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("cannot record the result in {}: {e}", path.display());
        }
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if !self.done {
            if let Some(message) = LAST_PANIC.lock().ok().and_then(|mut m| m.take()) {
                let mut message = message.replace(['\n', '\t', '|'], " ");
                if message.len() > 400 {
                    let mut cut = 400;
                    while !message.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    message.truncate(cut);
                    message.push('…');
                }
                self.measured.push(("failure".to_string(), message));
            }
            self.record("FAILED", self.elapsed());
            eprintln!(
                "== scenario {} FAILED after {:.1} s; namespace {} is left for inspection",
                self.name,
                self.elapsed(),
                self.namespace
            );
        }
    }
}

/// Lets the operator use Secrets in `namespace`, as an admin does for each namespace with
/// `Etcd` objects (deploy/manifests/09-etcd-namespace-secrets.yaml).
async fn grant_secrets(cluster: &Cluster, namespace: &str) {
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "quorate-operator-secrets", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "quorate-operator-secrets",
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": "quorate-operator",
            "namespace": "quorate-system",
        }],
    }))
    .expect("RoleBinding");
    Api::<RoleBinding>::namespaced(cluster.client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap_or_else(|e| panic!("granting the operator Secrets in {namespace}: {e}"));
}
