//! The Etcd controller against a real kube-apiserver v1.37.2. No kubelet runs there, so the
//! tests play the agents' part: they renew member leases and set StatefulSet readiness the way
//! the pods would, and check what the controller makes of it. Each test runs its own
//! controller scoped to its own namespace.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource};
use quorate_api::Etcd;
use quorate_api::annotations::{DRUID_OPERATION, SUSPEND_ETCD_SPEC_RECONCILE};
use quorate_api::status::LastOperationState;
use quorate_operator::{Metrics, Scope};
use quorate_testkit::{KubeApiServer, eventually};

mod support;

use support::operator::Operator;

const CLUSTER: &str = include_str!("../../../examples/etcd-cluster.yaml");
const SINGLE: &str = include_str!("../../../examples/etcd-single.yaml");
const WAIT: Duration = Duration::from_secs(30);

/// A controller scoped to the test's namespace (see `support::operator`).
impl Operator {
    fn start(client: &Client, namespace: &str, auto_reconcile: bool) -> Operator {
        let period = Duration::from_millis(500);
        Operator::run(
            client,
            scope(namespace),
            auto_reconcile,
            period,
            Metrics::default(),
        )
    }

    /// A controller whose periodic passes are an hour apart: every pass it makes within a
    /// test was started by a watch event. `metrics` counts them.
    fn start_event_driven(client: &Client, namespace: &str, metrics: Metrics) -> Operator {
        let period = Duration::from_secs(3600);
        Operator::run(client, scope(namespace), true, period, metrics)
    }
}

/// The test's own namespace, under a leader identity of its own.
fn scope(namespace: &str) -> Scope {
    Scope {
        namespace: Some(namespace.to_string()),
        identity: format!("test-{namespace}"),
        shard: quorate_core::shard::Shard::ALL,
    }
}

/// Reconcile passes counted so far (every result).
fn passes(metrics: &Metrics) -> u64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("quorate_operator_reconciles_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn setup(test: &str) -> Option<(Client, String)> {
    let (client, namespace, _) = setup_with_server(test).await?;
    Some((client, namespace))
}

async fn setup_with_server(test: &str) -> Option<(Client, String, &'static KubeApiServer)> {
    let (server, client, namespace) = quorate_testkit::etcd_test_namespace(test).await?;
    Some((client, namespace, server))
}

fn manifest(yaml: &str, namespace: &str) -> Etcd {
    let mut etcd: Etcd = serde_saphyr::from_str(yaml).expect("example parses");
    etcd.metadata.namespace = Some(namespace.to_string());
    etcd
}

async fn create(client: &Client, etcd: &Etcd) -> Api<Etcd> {
    let api: Api<Etcd> =
        Api::namespaced(client.clone(), etcd.metadata.namespace.as_deref().unwrap());
    api.create(&PostParams::default(), etcd)
        .await
        .expect("create the Etcd");
    api
}

/// Waits until the controller has reconciled generation `generation` of `name`; on timeout,
/// says what the status showed last (its last operation and errors).
async fn wait_observed(api: &Api<Etcd>, name: &str, generation: i64) -> Etcd {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let etcd = api.get(name).await.ok();
        let status = etcd.as_ref().and_then(|e| e.status.as_ref());
        if status.is_some_and(|s| s.observed_generation == Some(generation)) {
            return etcd.expect("an Etcd with a status");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} not observed at generation {generation} after {WAIT:?}; last status: {:?}",
            status.map(|s| (&s.observed_generation, &s.last_operation, &s.last_errors))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn labels_of<K: Resource>(object: &K) -> BTreeMap<String, String> {
    object.meta().labels.clone().unwrap_or_default()
}

fn assert_managed<K: Resource>(object: &K, etcd: &Etcd, component: &str) {
    let name = object.meta().name.clone().unwrap_or_default();
    let labels = labels_of(object);
    assert_eq!(
        labels["app.kubernetes.io/managed-by"], "etcd-druid",
        "{name}"
    );
    assert_eq!(
        labels["app.kubernetes.io/part-of"],
        etcd.metadata.name.clone().unwrap(),
        "{name}"
    );
    assert_eq!(labels["app.kubernetes.io/component"], component, "{name}");
    let owners = object.meta().owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{name}: {owners:?}");
    assert_eq!(owners[0].kind, "Etcd");
    assert_eq!(Some(&owners[0].uid), etcd.metadata.uid.as_ref());
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].block_owner_deletion, Some(true));
}

async fn pdb_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Renews a member lease as its agent would.
async fn renew(client: &Client, namespace: &str, lease: &str, role: &str, tls: bool) {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let patch = serde_json::json!({
        "metadata": {"annotations": {"member.etcd.gardener.cloud/tls-enabled": tls.to_string()}},
        "spec": {
            "holderIdentity": format!("1a2b3c:4d5e6f:{role}"),
            "leaseDurationSeconds": 40,
            "renewTime": now,
        }
    });
    api.patch(lease, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("renew the member lease");
}

/// Sets the StatefulSet's status as its controller would once the pods are ready and run the
/// current template.
async fn set_ready(client: &Client, namespace: &str, name: &str, ready: i32) {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let sts = api.get(name).await.expect("StatefulSet");
    let replicas = sts.spec.and_then(|s| s.replicas).unwrap_or(0);
    let patch = serde_json::json!({"status": {
        "observedGeneration": sts.metadata.generation,
        "replicas": replicas,
        "readyReplicas": ready,
        "currentReplicas": replicas,
        "updatedReplicas": replicas,
        "currentRevision": format!("{name}-1"),
        "updateRevision": format!("{name}-1"),
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch StatefulSet status");
}

fn condition(etcd: &Etcd, type_: &str) -> Option<String> {
    etcd.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| format!("{:?}", c.status))
}

#[tokio::test]
async fn every_component_appears_named_labelled_and_owned_and_status_follows_the_leases() {
    let Some((client, ns, server)) = setup_with_server("components_and_status").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, false);
    let api = create(&client, &manifest(CLUSTER, &ns)).await;
    let etcd = wait_observed(&api, "etcd-main", 1).await;
    assert!(
        etcd.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "druid.gardener.cloud/etcd-druid"))
    );
    let op = etcd
        .status
        .as_ref()
        .unwrap()
        .last_operation
        .clone()
        .unwrap();
    assert_eq!(op.state, LastOperationState::Succeeded);

    let sa = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .get("etcd-main")
        .await
        .unwrap();
    assert_managed(&sa, &etcd, "etcd-service-account");
    let role_name = "druid.gardener.cloud:etcd:etcd-main";
    let role = Api::<Role>::namespaced(client.clone(), &ns)
        .get(role_name)
        .await
        .unwrap();
    assert_managed(&role, &etcd, "etcd-role");
    let binding = Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .get(role_name)
        .await
        .unwrap();
    assert_managed(&binding, &etcd, "etcd-role-binding");
    // The agents' token: made once, owned by the Etcd, readable by the pods' Role alone.
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns);
    let token = secrets.get("etcd-main-agent-token").await.unwrap();
    assert_managed(&token, &etcd, "etcd-agent-token");
    let value = token.data.clone().unwrap()["token"].0.clone();
    assert_eq!(value.len(), 64, "32 random bytes as hex");
    assert!(role.rules.as_ref().unwrap().iter().any(|r| {
        r.resources.as_deref() == Some(&["secrets".to_string()][..])
            && r.resource_names.as_deref() == Some(&["etcd-main-agent-token".to_string()][..])
    }));
    let leases = Api::<Lease>::namespaced(client.clone(), &ns);
    for i in 0..3 {
        let lease = leases.get(&format!("etcd-main-{i}")).await.unwrap();
        assert_managed(&lease, &etcd, "etcd-member-lease");
    }
    for name in ["etcd-main-full-snap", "etcd-main-delta-snap"] {
        assert_managed(
            &leases.get(name).await.unwrap(),
            &etcd,
            "etcd-snapshot-lease",
        );
    }
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let client_svc = services.get("etcd-main-client").await.unwrap();
    assert_managed(&client_svc, &etcd, "etcd-client-service");
    let peer = services.get("etcd-main-peer").await.unwrap();
    assert_managed(&peer, &etcd, "etcd-peer-service");
    assert_eq!(peer.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("etcd-main-config")
        .await
        .unwrap();
    assert_managed(&cm, &etcd, "etcd-configmap");
    assert!(cm.data.as_ref().unwrap().contains_key("etcd.conf.yaml"));
    // policy/v1: minAvailable 3/2+1.
    let pdb = pdb_api(&client, &ns).await.get("etcd-main").await.unwrap();
    assert_eq!(pdb.data["spec"]["minAvailable"], 2);
    assert_eq!(
        pdb.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"],
        "etcd-pdb"
    );
    let sts = Api::<StatefulSet>::namespaced(client.clone(), &ns)
        .get("etcd-main")
        .await
        .unwrap();
    assert_managed(&sts, &etcd, "etcd-statefulset");
    let spec = sts.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.service_name.as_deref(), Some("etcd-main-peer"));
    assert!(
        spec.template
            .metadata
            .unwrap()
            .annotations
            .unwrap()
            .contains_key("checksum/etcd-configmap")
    );

    // Nothing ready yet: not Ready.
    assert_ne!(etcd.status.as_ref().unwrap().ready, Some(true));
    // The agents renew, the pods become ready: Ready, AllMembersReady, three members.
    for i in 0..3 {
        let role = if i == 0 { "Leader" } else { "Member" };
        renew(&client, &ns, &format!("etcd-main-{i}"), role, false).await;
    }
    set_ready(&client, &ns, "etcd-main", 3).await;
    let etcd = eventually("the status to show three ready members", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        let status = etcd.status.as_ref()?;
        (status.ready == Some(true)
            && status.members.len() == 3
            && condition(&etcd, "AllMembersReady").as_deref() == Some("True"))
        .then_some(etcd)
    })
    .await;
    assert_eq!(condition(&etcd, "Ready").as_deref(), Some("True"));
    assert_eq!(
        condition(&etcd, "AllMembersUpdated").as_deref(),
        Some("True")
    );
    let status = etcd.status.unwrap();
    assert_eq!(
        status.etcd.as_ref().map(|r| r.name.as_str()),
        Some("etcd-main")
    );
    assert_eq!((status.replicas, status.ready_replicas), (3, 3));
    assert_eq!(status.members[0].id.as_deref(), Some("1a2b3c"));

    // What a user sees.
    let output = server
        .kubectl()
        .args(["get", "etcd", "-n", &ns, "-o", "wide"])
        .output()
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "QUORATE",
            "ALL MEMBERS READY",
            "BACKUP READY",
            "SCALE",
            "AGE",
            "CLUSTER SIZE",
            "CURRENT REPLICAS",
            "READY REPLICAS"
        ],
        "{stdout}"
    );
    // NAME READY QUORATE ALL-MEMBERS-READY BACKUP-READY SCALE AGE SIZE CURRENT READY; BACKUP
    // READY has no value before the first snapshot lease renewal, SCALE says MembershipUnknown
    // until a leader's agent publishes etcd's member list.
    assert_eq!(row[..4], ["etcd-main", "true", "True", "True"], "{stdout}");
    assert_eq!(row[row.len() - 3..], ["3", "3", "3"], "{stdout}");
}

#[tokio::test]
async fn a_spec_change_waits_for_the_reconcile_annotation_which_is_removed_after() {
    let Some((client, ns)) = setup("reconcile_annotation").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, false);
    let api = create(&client, &manifest(SINGLE, &ns)).await;
    wait_observed(&api, "etcd-single", 1).await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let before = cms.get("etcd-single-config").await.unwrap().data.unwrap();

    let patch = serde_json::json!({"spec": {"etcd": {"snapshotCount": 12345}}});
    api.patch(
        "etcd-single",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    // Several passes later nothing changed and generation 2 is not observed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let etcd = api.get("etcd-single").await.unwrap();
    assert_eq!(etcd.metadata.generation, Some(2));
    assert_eq!(etcd.status.unwrap().observed_generation, Some(1));
    assert_eq!(
        cms.get("etcd-single-config").await.unwrap().data.unwrap(),
        before
    );

    let annotate = serde_json::json!({"metadata": {"annotations": {DRUID_OPERATION: "reconcile"}}});
    api.patch(
        "etcd-single",
        &PatchParams::default(),
        &Patch::Merge(&annotate),
    )
    .await
    .unwrap();
    let etcd = wait_observed(&api, "etcd-single", 2).await;
    let after = cms.get("etcd-single-config").await.unwrap().data.unwrap();
    assert!(
        after["etcd.conf.yaml"].contains("snapshot-count: 12345"),
        "{}",
        after["etcd.conf.yaml"]
    );
    let annotations = eventually("the operation annotation to be removed", WAIT, || async {
        let etcd = api.get("etcd-single").await.ok()?;
        let a = etcd.metadata.annotations.clone().unwrap_or_default();
        (!a.contains_key(DRUID_OPERATION)).then_some(a)
    })
    .await;
    assert!(!annotations.contains_key(DRUID_OPERATION));
    assert_eq!(etcd.metadata.generation, Some(2));
}

#[tokio::test]
async fn auto_reconcile_applies_at_once_and_suspension_stops_it_but_not_the_status() {
    let Some((client, ns)) = setup("auto_and_suspend").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, true);
    let api = create(&client, &manifest(SINGLE, &ns)).await;
    wait_observed(&api, "etcd-single", 1).await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    let patch = serde_json::json!({"spec": {"etcd": {"snapshotCount": 2222}}});
    api.patch(
        "etcd-single",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    wait_observed(&api, "etcd-single", 2).await;
    let data = cms.get("etcd-single-config").await.unwrap().data.unwrap();
    assert!(data["etcd.conf.yaml"].contains("snapshot-count: 2222"));

    let suspend = serde_json::json!({
        "metadata": {"annotations": {SUSPEND_ETCD_SPEC_RECONCILE: "true"}},
        "spec": {"etcd": {"snapshotCount": 3333}},
    });
    api.patch(
        "etcd-single",
        &PatchParams::default(),
        &Patch::Merge(&suspend),
    )
    .await
    .unwrap();
    // The status keeps following the leases while the spec is suspended.
    renew(&client, &ns, "etcd-single-0", "Leader", false).await;
    let etcd = eventually("a member in the status while suspended", WAIT, || async {
        let etcd = api.get("etcd-single").await.ok()?;
        (etcd.status.as_ref()?.members.len() == 1).then_some(etcd)
    })
    .await;
    assert_eq!(etcd.status.unwrap().observed_generation, Some(2));
    let data = cms.get("etcd-single-config").await.unwrap().data.unwrap();
    assert!(data["etcd.conf.yaml"].contains("snapshot-count: 2222"));
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    eventually("a SpecReconcileSuspended warning event", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("SpecReconcileSuspended")
                    && e.type_.as_deref() == Some("Warning")
            })
            .then_some(())
    })
    .await;

    let resume =
        serde_json::json!({"metadata": {"annotations": {SUSPEND_ETCD_SPEC_RECONCILE: null}}});
    api.patch(
        "etcd-single",
        &PatchParams::default(),
        &Patch::Merge(&resume),
    )
    .await
    .unwrap();
    wait_observed(&api, "etcd-single", 3).await;
    let data = cms.get("etcd-single-config").await.unwrap().data.unwrap();
    assert!(data["etcd.conf.yaml"].contains("snapshot-count: 3333"));
}

fn peer_tls_volumes(sts: &StatefulSet) -> Vec<String> {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.volumes.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .filter(|n| n.starts_with("etcd-peer"))
        .collect()
}

fn template_checksum(sts: &StatefulSet) -> String {
    sts.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()["checksum/etcd-configmap"]
        .clone()
}

#[tokio::test]
async fn peer_tls_is_enabled_at_the_current_size_before_the_cluster_grows() {
    let Some((client, ns)) = setup("tls_then_scale").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, true);
    let api = create(&client, &manifest(SINGLE, &ns)).await;
    wait_observed(&api, "etcd-single", 1).await;
    renew(&client, &ns, "etcd-single-0", "Leader", false).await;
    set_ready(&client, &ns, "etcd-single", 1).await;
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), &ns);
    let checksum_before = template_checksum(&statefulsets.get("etcd-single").await.unwrap());

    let grow = serde_json::json!({"spec": {"replicas": 3, "etcd": {"peerUrlTls": {
        "tlsCASecretRef": {"name": "peer-ca", "dataKey": "ca.crt"},
        "serverTLSSecretRef": {"name": "peer-server"},
    }}}});
    api.patch("etcd-single", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    // Step 1: the agents' configuration asks for peer TLS (the agent restarts etcd in place
    // with the Secrets' files it writes itself); the StatefulSet keeps one replica and its
    // pod template, so no pod is replaced; the pass asks to be requeued.
    eventually("peer TLS in the agents' configuration", WAIT, || async {
        let config = cluster_config(&client, &ns, "etcd-single").await;
        let secrets = config["secretFiles"].as_array()?;
        (config["peerTls"].is_object() && secrets.iter().any(|s| s["secret"] == "peer-server"))
            .then_some(())
    })
    .await;
    let sts = statefulsets.get("etcd-single").await.unwrap();
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(1));
    assert!(peer_tls_volumes(&sts).is_empty(), "no Secret is mounted");
    assert_eq!(
        template_checksum(&sts),
        checksum_before,
        "the pod is not replaced"
    );
    let etcd = eventually("lastOperation Requeue", WAIT, || async {
        let etcd = api.get("etcd-single").await.ok()?;
        let op = etcd.status.as_ref()?.last_operation.clone()?;
        (op.state == LastOperationState::Requeue).then_some(etcd)
    })
    .await;
    let status = etcd.status.unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(status.last_errors[0].code, "ERR_REQUEUE_AFTER");
    // Step 2: still one replica while the member has not reported TLS.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        statefulsets
            .get("etcd-single")
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(1)
    );
    // Step 3: the agent restarted etcd with https and says so; the cluster grows, and the
    // pod template is the same as at step 1, so the running pod is not restarted again.
    renew(&client, &ns, "etcd-single-0", "Leader", true).await;
    let sts = eventually("three replicas", WAIT, || async {
        let sts = statefulsets.get("etcd-single").await.ok()?;
        (sts.spec.as_ref()?.replicas == Some(3)).then_some(sts)
    })
    .await;
    assert_eq!(template_checksum(&sts), checksum_before);
    // The StatefulSet controller's part: it saw the grown StatefulSet.
    set_ready(&client, &ns, "etcd-single", 3).await;
    wait_observed(&api, "etcd-single", 2).await;
    let pdb = pdb_api(&client, &ns)
        .await
        .get("etcd-single")
        .await
        .unwrap();
    assert_eq!(pdb.data["spec"]["minAvailable"], 2);
}

/// A `Local` store whose Secret names a host directory outside the allowed ones gets no
/// StatefulSet (a hostPath volume of `/var/lib` would hand the node to whoever wrote the
/// Secret); `lastErrors` says which directories are allowed and which flag adds one.
#[tokio::test]
async fn a_local_store_outside_the_allowed_host_directories_is_refused() {
    let Some((client, ns)) = setup("host_path_refused").await else {
        return;
    };
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns);
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some("buckets".into());
    secret.string_data = Some(BTreeMap::from([(
        "hostPath".to_string(),
        "/var/lib".to_string(),
    )]));
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let _operator = Operator::start(&client, &ns, false);
    let text = SINGLE.replace(
        "  backup: {}\n",
        "  backup:\n    store:\n      provider: Local\n      container: backups\n      prefix: single\n      secretRef:\n        name: buckets\n",
    );
    let api = create(&client, &manifest(&text, &ns)).await;
    let message = eventually("the hostPath refused in lastErrors", WAIT, || async {
        let etcd = api.get("etcd-single").await.ok()?;
        let errors = etcd.status?.last_errors;
        errors
            .iter()
            .find(|e| e.code == "ERR_INVALID_SPEC")
            .map(|e| e.description.clone())
    })
    .await;
    assert!(
        message.contains("\"/var/lib\"") && message.contains("--allowed-local-backup-host-path"),
        "{message}"
    );
    let statefulset = Api::<StatefulSet>::namespaced(client.clone(), &ns)
        .get_opt("etcd-single")
        .await
        .unwrap();
    assert!(statefulset.is_none(), "no StatefulSet was made");
}

/// An `Etcd` that breaks a rule the webhook enforces (here druid's CEL rule that garbage
/// collection runs less often than delta snapshots, which the CEL-free CRD does not evaluate), created
/// while no webhook runs: the controller writes nothing to the cluster, says why in the
/// `SpecValid` condition, `lastErrors` and a Warning event; once fixed, it proceeds and the
/// condition goes.
#[tokio::test]
async fn an_invalid_etcd_that_bypassed_the_webhook_is_reported_and_not_acted_on() {
    let Some((client, ns)) = setup("invalid_at_reconcile").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, true);
    let text = SINGLE.replace(
        "  backup: {}\n",
        "  backup:\n    deltaSnapshotPeriod: 5m\n    garbageCollectionPeriod: 1m\n",
    );
    assert_ne!(text, SINGLE, "the example changed; adapt the test");
    let api = create(&client, &manifest(&text, &ns)).await;
    let message = eventually("SpecValid False", WAIT, || async {
        let etcd = api.get("etcd-single").await.ok()?;
        let status = etcd.status?;
        let condition = status.conditions.iter().find(|c| c.type_ == "SpecValid")?;
        assert_eq!(format!("{:?}", condition.status), "False");
        assert!(
            status
                .last_errors
                .iter()
                .any(|e| e.code == "ERR_INVALID_SPEC")
        );
        Some(condition.message.clone())
    })
    .await;
    assert!(
        message.contains("spec.backup.garbageCollectionPeriod")
            && message.contains("changes nothing"),
        "{message}"
    );
    let events = eventually("a Warning event naming the rule", WAIT, || async {
        let events = Api::<Event>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        events.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("ReconcileError")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("garbageCollectionPeriod"))
        })
    })
    .await;
    assert_eq!(events.type_.as_deref(), Some("Warning"));
    // Nothing in the cluster: no StatefulSet, no ConfigMap, not even the finalizer.
    let etcd = api.get("etcd-single").await.unwrap();
    assert!(etcd.metadata.finalizers.unwrap_or_default().is_empty());
    assert!(
        Api::<StatefulSet>::namespaced(client.clone(), &ns)
            .get_opt("etcd-single")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|c| !c
                .metadata
                .name
                .as_deref()
                .unwrap_or("")
                .starts_with("etcd-single")),
    );

    // Fixed: the spec flow runs and the condition is gone.
    api.patch(
        "etcd-single",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({ "spec": { "backup": { "garbageCollectionPeriod": "1h" } } }),
        ),
    )
    .await
    .unwrap();
    eventually("the StatefulSet after the fix", WAIT, || async {
        Api::<StatefulSet>::namespaced(client.clone(), &ns)
            .get_opt("etcd-single")
            .await
            .ok()?
    })
    .await;
    let etcd = eventually("SpecValid gone", WAIT, || async {
        let etcd = api.get("etcd-single").await.ok()?;
        let status = etcd.status.as_ref()?;
        (!status.conditions.iter().any(|c| c.type_ == "SpecValid")).then_some(etcd)
    })
    .await;
    assert!(etcd.metadata.finalizers.is_some());
}

#[tokio::test]
async fn deleting_the_etcd_removes_every_component_then_the_finalizer() {
    let Some((client, ns)) = setup("delete_flow").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, false);
    let api = create(&client, &manifest(CLUSTER, &ns)).await;
    wait_observed(&api, "etcd-main", 1).await;
    // Something not owned by this Etcd, with the same labels, must survive.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let mut foreign = ConfigMap::default();
    foreign.metadata.name = Some("bystander".into());
    foreign.metadata.labels = Some(BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            "etcd-druid".to_string(),
        ),
        (
            "app.kubernetes.io/part-of".to_string(),
            "etcd-main".to_string(),
        ),
    ]));
    cms.create(&PostParams::default(), &foreign).await.unwrap();

    api.delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Etcd to be gone", WAIT, || async {
        matches!(api.get_opt("etcd-main").await, Ok(None)).then_some(())
    })
    .await;
    let selector = "app.kubernetes.io/part-of=etcd-main";
    let lp = ListParams::default().labels(selector);
    let kinds = [
        ("apps", "v1", "StatefulSet", "statefulsets"),
        ("", "v1", "Service", "services"),
        ("coordination.k8s.io", "v1", "Lease", "leases"),
        ("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
        ),
        ("", "v1", "ServiceAccount", "serviceaccounts"),
    ];
    for (group, version, kind, plural) in kinds {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
        let left = api.list(&lp).await.unwrap().items.len();
        assert_eq!(left, 0, "{kind} left after delete");
    }
    let left = pdb_api(&client, &ns)
        .await
        .list(&lp)
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(left, 0, "PodDisruptionBudget left after delete");
    let configmaps: Vec<_> = cms
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(configmaps, ["bystander"]);
}

/// Publishes etcd's member list on `lease` as the leader's agent would (`quorate.io/etcd-members`).
async fn publish_members(
    client: &Client,
    namespace: &str,
    lease: &str,
    members: &[String],
    term: u64,
) {
    let published = serde_json::json!({
        "clusterId": "4d5e6f",
        "term": term,
        "members": members.iter().map(|m| serde_json::json!({"name": m})).collect::<Vec<_>>(),
    });
    let patch = serde_json::json!({"metadata": {"annotations": {
        "quorate.io/etcd-members": published.to_string(),
    }}});
    Api::<Lease>::namespaced(client.clone(), namespace)
        .patch(lease, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("publish the member list");
}

fn members(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("etcd-main-{i}")).collect()
}

async fn statefulset_replicas(client: &Client, namespace: &str) -> Option<i32> {
    Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .get("etcd-main")
        .await
        .ok()?
        .spec?
        .replicas
}

/// The agents' configuration the operator wrote into the ConfigMap.
async fn cluster_config(client: &Client, namespace: &str, etcd: &str) -> serde_json::Value {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(&format!("{etcd}-config"))
        .await
        .expect("ConfigMap");
    serde_json::from_str(&cm.data.unwrap()["cluster.json"]).expect("cluster.json")
}

fn condition_reason(etcd: &Etcd, type_: &str) -> Option<String> {
    etcd.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.reason.clone())
}

/// A data volume as the StatefulSet controller would have created it for `pod`.
async fn create_claim(client: &Client, namespace: &str, pod: &str) {
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("etcd-main-{pod}")},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap();
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &claim)
        .await
        .expect("create a PVC");
}

async fn claim_names(client: &Client, namespace: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), namespace);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .expect("list PVCs")
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_scale_in_shrinks_the_statefulset_only_after_the_leader_says_the_members_left() {
    let Some((client, ns)) = setup("scale_in").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, true);
    let mut five = manifest(CLUSTER, &ns);
    five.spec.replicas = 5;
    let api = create(&client, &five).await;
    wait_observed(&api, "etcd-main", 1).await;
    for pod in 0..5 {
        create_claim(&client, &ns, &format!("etcd-main-{pod}")).await;
    }
    publish_members(&client, &ns, "etcd-main-0", &members(5), 3).await;

    let shrink = serde_json::json!({"spec": {"replicas": 3}});
    api.patch("etcd-main", &PatchParams::default(), &Patch::Merge(&shrink))
        .await
        .unwrap();
    let etcd = eventually("the scale-in to be reported", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        (condition_reason(&etcd, "ScaleOperationComplete")? == "ScalingIn").then_some(etcd)
    })
    .await;
    assert!(
        etcd.status.unwrap().last_errors[0]
            .description
            .contains("etcd-main-3, etcd-main-4"),
        "lastErrors names the members that still have to leave"
    );
    let config = cluster_config(&client, &ns, "etcd-main").await;
    assert_eq!(
        config["leaving"],
        serde_json::json!(["etcd-main-3", "etcd-main-4"])
    );
    assert_eq!(config["members"].as_array().unwrap().len(), 5);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        statefulset_replicas(&client, &ns).await,
        Some(5),
        "no pod stops while etcd still lists its member"
    );

    // The leader removed etcd-main-4: its pod may go, etcd-main-3's not yet.
    publish_members(&client, &ns, "etcd-main-0", &members(4), 3).await;
    eventually("four pods", WAIT, || async {
        (statefulset_replicas(&client, &ns).await? == 4).then_some(())
    })
    .await;
    // A former leader's older word (a lower term) changes nothing.
    publish_members(&client, &ns, "etcd-main-1", &members(5), 2).await;
    publish_members(&client, &ns, "etcd-main-0", &members(3), 4).await;
    eventually("three pods", WAIT, || async {
        (statefulset_replicas(&client, &ns).await? == 3).then_some(())
    })
    .await;
    let etcd = eventually("the scale operation to complete", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        (condition(&etcd, "ScaleOperationComplete")? == "True").then_some(etcd)
    })
    .await;
    assert_eq!(
        condition_reason(&etcd, "ScaleOperationComplete").unwrap(),
        "Complete"
    );
    eventually(
        "the departed members' volumes and leases to go",
        WAIT,
        || async {
            let claims = claim_names(&client, &ns).await;
            let leases = Api::<Lease>::namespaced(client.clone(), &ns);
            let gone = leases.get_opt("etcd-main-3").await.ok()?.is_none()
                && leases.get_opt("etcd-main-4").await.ok()?.is_none();
            (gone
                && claims
                    == [
                        "etcd-main-etcd-main-0",
                        "etcd-main-etcd-main-1",
                        "etcd-main-etcd-main-2",
                    ])
            .then_some(())
        },
    )
    .await;
    let pdb = pdb_api(&client, &ns).await.get("etcd-main").await.unwrap();
    assert_eq!(
        pdb.data["spec"]["minAvailable"], 2,
        "the PDB follows the new size"
    );
    let config = cluster_config(&client, &ns, "etcd-main").await;
    assert!(config.get("leaving").is_none(), "{config}");
}

#[tokio::test]
async fn hibernation_stops_the_pods_only_once_the_final_snapshot_is_reported() {
    let Some((client, ns)) = setup("hibernation").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, true);
    let api = create(&client, &manifest(CLUSTER, &ns)).await;
    wait_observed(&api, "etcd-main", 1).await;
    for pod in 0..3 {
        create_claim(&client, &ns, &format!("etcd-main-{pod}")).await;
    }
    publish_members(&client, &ns, "etcd-main-0", &members(3), 2).await;

    let sleep = serde_json::json!({"spec": {"replicas": 0}});
    api.patch("etcd-main", &PatchParams::default(), &Patch::Merge(&sleep))
        .await
        .unwrap();
    eventually("the hibernation request in the ConfigMap", WAIT, || async {
        let config = cluster_config(&client, &ns, "etcd-main").await;
        (config["hibernationRequest"] == "2").then_some(())
    })
    .await;
    let leases = Api::<Lease>::namespaced(client.clone(), &ns);
    let report = |value: serde_json::Value| {
        serde_json::json!({"metadata": {"annotations": {
            "quorate.io/final-snapshot": value.to_string(),
        }}})
    };
    let failed =
        report(serde_json::json!({"request": "2", "failures": 2, "error": "store refused"}));
    leases
        .patch(
            "etcd-main-1",
            &PatchParams::default(),
            &Patch::Merge(&failed),
        )
        .await
        .unwrap();
    let etcd = eventually("the failed final snapshot to be reported", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        (condition_reason(&etcd, "ScaleOperationComplete")? == "FinalSnapshotFailed")
            .then_some(etcd)
    })
    .await;
    let message = &etcd
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "ScaleOperationComplete")
        .unwrap()
        .message;
    assert!(
        message.contains("store refused") && message.contains("hibernate-without-final-snapshot"),
        "{message}"
    );
    assert_eq!(
        statefulset_replicas(&client, &ns).await,
        Some(3),
        "the pods keep running"
    );
    eventually("a HibernationBlocked event", WAIT, || async {
        let events = Api::<Event>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("HibernationBlocked"))
            .then_some(())
    })
    .await;

    let stored = report(serde_json::json!({"request": "2", "revision": 420}));
    leases
        .patch(
            "etcd-main-1",
            &PatchParams::default(),
            &Patch::Merge(&stored),
        )
        .await
        .unwrap();
    eventually("no pod", WAIT, || async {
        (statefulset_replicas(&client, &ns).await? == 0).then_some(())
    })
    .await;
    let etcd = eventually("hibernated", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        (condition_reason(&etcd, "ScaleOperationComplete")? == "Hibernated").then_some(etcd)
    })
    .await;
    assert_eq!(condition(&etcd, "ScaleOperationComplete").unwrap(), "True");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        claim_names(&client, &ns).await.len(),
        3,
        "hibernation keeps every volume"
    );
    assert!(
        leases.get_opt("etcd-main-2").await.unwrap().is_some(),
        "and the leases"
    );
}

/// Plays the StatefulSet controller of an `OnDelete` StatefulSet: it saw the current template
/// (revision `update`), and `updated` pods run it.
async fn set_revision(client: &Client, namespace: &str, name: &str, update: &str, updated: i32) {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let sts = api.get(name).await.expect("StatefulSet");
    let replicas = sts.spec.and_then(|s| s.replicas).unwrap_or(0);
    let patch = serde_json::json!({"status": {
        "observedGeneration": sts.metadata.generation,
        "replicas": replicas,
        "readyReplicas": replicas,
        "updatedReplicas": updated,
        "currentRevision": format!("{name}-1"),
        "updateRevision": update,
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch StatefulSet status");
}

/// Plays the StatefulSet controller and the kubelet: member pod `pod` of `revision`, ready or
/// not, its container restarted `restarts` times (crash-looping when it restarted).
async fn member_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    revision: &str,
    ready: bool,
    restarts: i32,
) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    if api.get_opt(pod).await.unwrap().is_none() {
        let new: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": pod, "labels": {
                "app.kubernetes.io/managed-by": "etcd-druid",
                "controller-revision-hash": revision,
            }},
            "spec": {
                "serviceAccountName": "etcd-main",
                "automountServiceAccountToken": false,
                "containers": [{"name": "etcd", "image": "quorate:test"}],
            },
        }))
        .unwrap();
        api.create(&PostParams::default(), &new)
            .await
            .expect("create the pod");
    }
    let waiting =
        (restarts > 0).then(|| serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}));
    let patch = serde_json::json!({"status": {
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        "containerStatuses": [{
            "name": "etcd", "ready": ready, "restartCount": restarts,
            "image": "quorate:test", "imageID": "", "state": waiting.unwrap_or(serde_json::json!({"running": {}})),
        }],
    }});
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("pod status");
}

/// Waits until the controller deleted `pod` (no kubelet holds it: deletion is immediate).
async fn deleted(client: &Client, namespace: &str, pod: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    eventually(&format!("{pod} deleted by the rollout"), WAIT, || async {
        api.get_opt(pod).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// How many objects of kind `K` in `namespace` match `lp`.
async fn count_labelled<K>(client: &Client, namespace: &str, lp: &ListParams) -> usize
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .list(lp)
        .await
        .unwrap()
        .items
        .len()
}

async fn pod_names(client: &Client, namespace: &str) -> Vec<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_template_change_replaces_one_member_pod_at_a_time_the_leader_last() {
    let Some((client, ns)) = setup("rolling_update").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, true);
    let api = create(&client, &manifest(CLUSTER, &ns)).await;
    wait_observed(&api, "etcd-main", 1).await;
    for (i, role) in ["Member", "Member", "Leader"].iter().enumerate() {
        renew(&client, &ns, &format!("etcd-main-{i}"), role, false).await;
    }
    set_revision(&client, &ns, "etcd-main", "etcd-main-1", 3).await;
    for i in 0..3 {
        member_pod(
            &client,
            &ns,
            &format!("etcd-main-{i}"),
            "etcd-main-1",
            true,
            0,
        )
        .await;
    }
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), &ns);
    let strategy = statefulsets
        .get("etcd-main")
        .await
        .unwrap()
        .spec
        .unwrap()
        .update_strategy;
    assert_eq!(strategy.and_then(|s| s.type_).as_deref(), Some("OnDelete"));

    // A new pod template (more CPU for etcd).
    let more_cpu =
        serde_json::json!({"spec": {"etcd": {"resources": {"requests": {"cpu": "300m"}}}}});
    api.patch(
        "etcd-main",
        &PatchParams::default(),
        &Patch::Merge(&more_cpu),
    )
    .await
    .unwrap();
    eventually("the new template applied", WAIT, || async {
        let sts = statefulsets.get("etcd-main").await.ok()?;
        (sts.metadata.generation? > 1).then_some(())
    })
    .await;
    set_revision(&client, &ns, "etcd-main", "etcd-main-2", 0).await;

    // Followers first, in ordinal order (etcd-main-2 leads): etcd-main-0. Its replacement comes back not ready
    // and crash-loops: the rollout stops there, and says so.
    deleted(&client, &ns, "etcd-main-0").await;
    member_pod(&client, &ns, "etcd-main-0", "etcd-main-2", false, 2).await;
    let stopped = eventually("the rollout stops at etcd-main-0", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        let errors = etcd.status?.last_errors;
        errors
            .iter()
            .find(|e| {
                e.description
                    .contains("rolling update stopped at etcd-main-0")
            })
            .map(|e| e.description.clone())
    })
    .await;
    assert!(stopped.contains("CrashLoopBackOff"), "{stopped}");
    let events = Api::<Event>::namespaced(client.clone(), &ns);
    eventually("a RolloutStopped event", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RolloutStopped"))
            .then_some(())
    })
    .await;
    assert_eq!(
        pod_names(&client, &ns).await,
        ["etcd-main-0", "etcd-main-1", "etcd-main-2"],
        "nobody else was replaced"
    );

    // Once it is ready, the next follower, then the leader last.
    member_pod(&client, &ns, "etcd-main-0", "etcd-main-2", true, 2).await;
    set_revision(&client, &ns, "etcd-main", "etcd-main-2", 1).await;
    deleted(&client, &ns, "etcd-main-1").await;
    assert!(
        pod_names(&client, &ns)
            .await
            .contains(&"etcd-main-2".to_string())
    );
    // The status follows the pods in a later pass than the one that deleted etcd-main-1.
    eventually(
        "AllMembersUpdated counts the one replaced member",
        WAIT,
        || async {
            let etcd = api.get("etcd-main").await.ok()?;
            let updated = etcd
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "AllMembersUpdated")?;
            (updated.message == "1 of 3 members run the latest pod template").then_some(())
        },
    )
    .await;
    member_pod(&client, &ns, "etcd-main-1", "etcd-main-2", true, 0).await;
    set_revision(&client, &ns, "etcd-main", "etcd-main-2", 2).await;
    deleted(&client, &ns, "etcd-main-2").await;
    member_pod(&client, &ns, "etcd-main-2", "etcd-main-2", true, 0).await;
    set_revision(&client, &ns, "etcd-main", "etcd-main-2", 3).await;
    let etcd = eventually("AllMembersUpdated", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        (condition(&etcd, "AllMembersUpdated").as_deref() == Some("True")).then_some(etcd)
    })
    .await;
    assert_eq!(etcd.status.unwrap().observed_generation, Some(2));
}

/// The delete flow in order: the StatefulSet and its member pods first; the objects the pods
/// use while they stop (ConfigMap, leases, RBAC, Services) only once no pod is left; the pass
/// that finishes is started by the pod's deletion, not by the safety recheck (30 s).
#[tokio::test]
async fn a_delete_removes_the_statefulset_and_its_pods_before_what_they_use() {
    let Some((client, ns)) = setup("delete_order").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, false);
    let api = create(&client, &manifest(CLUSTER, &ns)).await;
    wait_observed(&api, "etcd-main", 1).await;
    // A member pod as the StatefulSet controller makes it; the finalizer holds it the way a
    // kubelet does while the pod's containers stop.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "etcd-main-0",
            "labels": {
                "app.kubernetes.io/managed-by": "etcd-druid",
                "app.kubernetes.io/part-of": "etcd-main",
            },
            "finalizers": ["quorate.io/test-kubelet"],
        },
        "spec": {
            "serviceAccountName": "etcd-main",
            "automountServiceAccountToken": false,
            "containers": [{"name": "etcd", "image": "quorate:test"}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    api.delete("etcd-main", &DeleteParams::default())
        .await
        .unwrap();
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    eventually(
        "the StatefulSet to be gone and its pod to be deleted",
        WAIT,
        || async {
            let sts_gone = statefulsets.get_opt("etcd-main").await.ok()?.is_none();
            let terminating = pods
                .get_opt("etcd-main-0")
                .await
                .ok()??
                .metadata
                .deletion_timestamp
                .is_some();
            (sts_gone && terminating).then_some(())
        },
    )
    .await;
    // While the pod stops, what it uses is still there, and so is the Etcd.
    let lp = ListParams::default().labels("app.kubernetes.io/part-of=etcd-main");
    let configmaps = count_labelled::<ConfigMap>(&client, &ns, &lp).await;
    let leases = count_labelled::<Lease>(&client, &ns, &lp).await;
    let roles = count_labelled::<Role>(&client, &ns, &lp).await;
    assert!(
        configmaps > 0 && leases > 0 && roles > 0,
        "configmaps {configmaps}, leases {leases}, roles {roles} while a member pod stops"
    );
    assert!(api.get_opt("etcd-main").await.unwrap().is_some());

    // The pod's containers have stopped: the kubelet lets it go.
    let released = std::time::Instant::now();
    pods.patch(
        "etcd-main-0",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("the Etcd to be gone", WAIT, || async {
        matches!(api.get_opt("etcd-main").await, Ok(None)).then_some(())
    })
    .await;
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the pod's deletion event starts the pass that finishes; took {took:?}"
    );
    for kind in ["ConfigMap", "Lease", "Role"] {
        let left = match kind {
            "ConfigMap" => Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .list(&lp)
                .await
                .unwrap()
                .items
                .len(),
            "Lease" => Api::<Lease>::namespaced(client.clone(), &ns)
                .list(&lp)
                .await
                .unwrap()
                .items
                .len(),
            _ => Api::<Role>::namespaced(client.clone(), &ns)
                .list(&lp)
                .await
                .unwrap()
                .items
                .len(),
        };
        assert_eq!(left, 0, "{kind} left after delete");
    }
}

/// The status follows the leases: a member lease changing its role starts a pass at once
/// (the periodic pass is an hour away), while renewals that change nothing the status reads
/// start none.
#[tokio::test]
async fn a_lease_changing_role_starts_a_status_pass_and_renewals_do_not() {
    let Some((client, ns)) = setup("lease_triggers").await else {
        return;
    };
    let metrics = Metrics::default();
    let _operator = Operator::start_event_driven(&client, &ns, metrics.clone());
    let api = create(&client, &manifest(CLUSTER, &ns)).await;
    wait_observed(&api, "etcd-main", 1).await;
    for i in 0..3 {
        let role = if i == 0 { "Leader" } else { "Member" };
        renew(&client, &ns, &format!("etcd-main-{i}"), role, false).await;
    }
    eventually("the status to show the leader", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        let members = &etcd.status.as_ref()?.members;
        (members.len() == 3
            && members
                .iter()
                .any(|m| m.name == "etcd-main-0" && format!("{:?}", m.role) == "Some(Leader)"))
        .then_some(())
    })
    .await;

    let before = passes(&metrics);
    const RENEWALS: u64 = 20;
    for _ in 0..RENEWALS {
        for i in 0..3 {
            let role = if i == 0 { "Leader" } else { "Member" };
            renew(&client, &ns, &format!("etcd-main-{i}"), role, false).await;
        }
    }
    // Leadership moves: etcd-main-1 leads now.
    let moved = std::time::Instant::now();
    renew(&client, &ns, "etcd-main-0", "Member", false).await;
    renew(&client, &ns, "etcd-main-1", "Leader", false).await;
    eventually("the status to show the new leader", WAIT, || async {
        let etcd = api.get("etcd-main").await.ok()?;
        let members = &etcd.status.as_ref()?.members;
        members
            .iter()
            .any(|m| m.name == "etcd-main-1" && format!("{:?}", m.role) == "Some(Leader)")
            .then_some(())
    })
    .await;
    let took = moved.elapsed();
    let during = passes(&metrics) - before;
    assert!(
        took < Duration::from_secs(10),
        "a role change starts a pass at once; took {took:?}"
    );
    // Passes started before the renewals (the StatefulSet's own events) may still end in this
    // window, and the role change takes one or two: far fewer than one per renewal.
    assert!(
        during <= 5,
        "{during} passes for {} renewals and one role change",
        RENEWALS * 3
    );
}

/// Publishes on the member lease `lease` what its agent reports about etcd's versions: the
/// server's, the cluster's and the one recorded in its newest raft snapshot.
async fn publish_versions(
    client: &Client,
    namespace: &str,
    lease: &str,
    (server, cluster, snapshot): (&str, &str, &str),
) {
    let patch = serde_json::json!({"metadata": {"annotations": {
        "quorate.io/etcd-version": server,
        "quorate.io/etcd-cluster-version": cluster,
        "quorate.io/etcd-snapshot-cluster-version": snapshot,
    }}});
    Api::<Lease>::namespaced(client.clone(), namespace)
        .patch(lease, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("publish the versions");
}

fn version_condition_message(etcd: &Etcd) -> String {
    etcd.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "EtcdVersionCurrent")
        })
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// A version change asked for with the reconcile annotation runs step by step over several
/// passes: while a step waits (here for the 3.6 → 3.7 step's raft snapshot, then for the
/// member to run 3.7), each pass ends in Requeue, not Succeeded, so the annotation stays and
/// the next pass takes the next step; only the pass that finds the change done removes it.
#[tokio::test]
async fn a_waiting_version_step_requeues_and_keeps_the_reconcile_annotation_until_done() {
    let Some((client, ns)) = setup("version_step_requeue").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, false);
    let mut etcd = manifest(SINGLE, &ns);
    etcd.metadata
        .annotations
        .get_or_insert_default()
        .insert("quorate.io/etcd-version".into(), "3.6".into());
    let api = create(&client, &etcd).await;
    wait_observed(&api, "etcd-single", 1).await;
    set_ready(&client, &ns, "etcd-single", 1).await;
    renew(&client, &ns, "etcd-single-0", "Leader", false).await;
    publish_versions(&client, &ns, "etcd-single-0", ("3.6.16", "3.6", "3.5.0")).await;

    let annotate = serde_json::json!({"metadata": {"annotations": {
        DRUID_OPERATION: "reconcile",
        "quorate.io/etcd-version": "3.7",
    }}});
    api.patch(
        "etcd-single",
        &PatchParams::default(),
        &Patch::Merge(&annotate),
    )
    .await
    .unwrap();
    let message = eventually("the step to wait for the snapshot", WAIT, || async {
        let message = version_condition_message(&api.get("etcd-single").await.ok()?);
        message
            .contains("waits for a raft snapshot")
            .then_some(message)
    })
    .await;
    assert!(
        message.contains("etcd-single-0's newest raft snapshot records cluster version 3.5"),
        "{message}"
    );
    let note = eventually("an event saying what the step waits for", WAIT, || async {
        let events = Api::<Event>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        events
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("EtcdVersionStepWaitsForSnapshot"))?
            .note
    })
    .await;
    assert!(
        note.contains("etcd-single-0's newest raft snapshot")
            && note.contains("quorate.io/etcd-3.7-without-snapshot=true"),
        "{note}"
    );
    let config = cluster_config(&client, &ns, "etcd-single").await;
    assert_eq!(config["etcdVersion"], "3.6", "no member goes to 3.7 yet");
    assert_eq!(config["etcd"]["snapshotCount"], 10, "etcd snapshots soon");
    // Passes keep coming (every wait period) and none removes the annotation.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let annotations = api.get("etcd-single").await.unwrap().metadata.annotations;
    assert!(
        annotations
            .unwrap_or_default()
            .contains_key(DRUID_OPERATION),
        "a waiting step removed the reconcile annotation"
    );

    // The snapshot is reported: the step to 3.7 is configured, and waits for the member.
    publish_versions(&client, &ns, "etcd-single-0", ("3.6.16", "3.6", "3.6.0")).await;
    eventually("the step to 3.7 to be configured", WAIT, || async {
        let config = cluster_config(&client, &ns, "etcd-single").await;
        (config["etcdVersion"] == "3.7").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let etcd = api.get("etcd-single").await.unwrap();
    assert!(
        etcd.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(DRUID_OPERATION),
        "the last step's wait removed the reconcile annotation"
    );

    // The member runs 3.7 and etcd reports it: the change is done, the annotation goes.
    publish_versions(&client, &ns, "etcd-single-0", ("3.7.3", "3.7", "3.6.0")).await;
    eventually("the reconcile annotation to be removed", WAIT, || async {
        let a = api.get("etcd-single").await.ok()?.metadata.annotations?;
        (!a.contains_key(DRUID_OPERATION)).then_some(())
    })
    .await;
    let etcd = api.get("etcd-single").await.unwrap();
    assert_eq!(
        condition(&etcd, "EtcdVersionCurrent").as_deref(),
        Some("True")
    );
    let config = cluster_config(&client, &ns, "etcd-single").await;
    assert_ne!(config["etcd"]["snapshotCount"], 10, "the count is back");
}

/// Two sharded operators in one API server (`--shard 0/2` and `1/2`): each `Etcd` is reconciled
/// by exactly the replica that owns it. The first runs alone until it has reconciled its share
/// and made further passes, while the other share stays untouched (no finalizer, no status, no
/// StatefulSet); then the second starts and takes its share, and every `Etcd`'s last operation
/// names its owner.
#[tokio::test]
async fn sharded_operators_each_reconcile_only_their_own_share() {
    use quorate_core::shard::Shard;
    let Some((client, namespace)) = setup("sharded_operators").await else {
        return;
    };
    let shards = [Shard::new(0, 2).unwrap(), Shard::new(1, 2).unwrap()];
    let identity = |shard: Shard| format!("shard-{}-{namespace}", shard.index());
    let names: Vec<String> = (0..8).map(|i| format!("etcd-shard-{i}")).collect();
    let owner = |name: &str| *shards.iter().find(|s| s.owns(&namespace, name)).unwrap();
    for shard in shards {
        assert!(
            names.iter().any(|n| owner(n) == shard),
            "the names put nothing in share {shard}"
        );
    }
    let start = |shard: Shard, metrics: Metrics| {
        Operator::run(
            &client,
            Scope {
                namespace: Some(namespace.clone()),
                identity: identity(shard),
                shard,
            },
            false,
            Duration::from_millis(500),
            metrics,
        )
    };
    let first_metrics = Metrics::default();
    let _first = start(shards[0], first_metrics.clone());
    let mut api = None;
    for name in &names {
        let mut etcd = manifest(SINGLE, &namespace);
        etcd.metadata.name = Some(name.clone());
        api = Some(create(&client, &etcd).await);
    }
    let api = api.unwrap();
    let (mine, theirs): (Vec<&String>, Vec<&String>) =
        names.iter().partition(|n| owner(n) == shards[0]);
    for name in &mine {
        wait_observed(&api, name, 1).await;
    }
    // Further passes of the first replica (its 500 ms sync), past those of the first creates.
    let after_first = passes(&first_metrics);
    eventually("the first replica passes again", WAIT, || async {
        (passes(&first_metrics) >= after_first + 2 * mine.len() as u64).then_some(())
    })
    .await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    for name in &theirs {
        let etcd = api.get(name).await.expect("get");
        assert!(etcd.status.is_none(), "{name} got a status from share 0");
        assert!(
            etcd.metadata.finalizers.unwrap_or_default().is_empty(),
            "{name} got a finalizer from share 0"
        );
        assert!(
            statefulsets.get_opt(name).await.expect("get").is_none(),
            "{name} got a StatefulSet from share 0"
        );
    }
    let _second = start(shards[1], Metrics::default());
    for name in &names {
        let etcd = wait_observed(&api, name, 1).await;
        let run_id = etcd
            .status
            .and_then(|s| s.last_operation)
            .map(|op| op.run_id)
            .unwrap_or_default();
        assert_eq!(
            run_id,
            identity(owner(name)),
            "{name}: reconciled by the wrong share"
        );
    }
}

/// Plays the StatefulSet controller: its record of a pod template (ControllerRevision `name`)
/// whose etcd container has CPU request `cpu` and image `image`.
async fn controller_revision(client: &Client, namespace: &str, name: &str, cpu: &str, image: &str) {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let revision: ControllerRevision = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "revision": 1,
        "data": {"spec": {"template": {"$patch": "replace",
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "etcd-druid"}},
            "spec": {"containers": [{"name": "etcd", "image": image,
                "resources": {"requests": {"cpu": cpu}}}]}}}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &revision)
        .await
        .expect("create the ControllerRevision");
}

/// Plays the StatefulSet controller and the kubelet: a ready member pod of `revision`, its
/// etcd container asking for 100m of CPU.
async fn sized_member_pod(client: &Client, namespace: &str, pod: &str, revision: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let new: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pod, "labels": {
            "app.kubernetes.io/managed-by": "etcd-druid",
            "controller-revision-hash": revision,
        }},
        "spec": {
            "serviceAccountName": "etcd-main",
            "automountServiceAccountToken": false,
            "containers": [{"name": "etcd", "image": "quorate:test",
                "resources": {"requests": {"cpu": "100m"}}}],
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &new)
        .await
        .expect("create the pod");
    kubelet_reports(client, namespace, pod, None).await;
}

/// Plays the kubelet: pod `pod` is ready, its spec seen (`observedGeneration`) and its etcd
/// container running with the spec's resources (a kubelet that supports resize reports them;
/// the API server refuses a resize otherwise), or a resize pending with `pending` (reason,
/// message) when given.
async fn kubelet_reports(
    client: &Client,
    namespace: &str,
    pod: &str,
    pending: Option<(&str, &str)>,
) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let current = api.get(pod).await.unwrap();
    let generation = current.metadata.generation;
    let resources = current
        .spec
        .and_then(|s| s.containers.into_iter().find(|c| c.name == "etcd"))
        .and_then(|c| c.resources);
    let mut conditions = vec![serde_json::json!({"type": "Ready", "status": "True"})];
    if let Some((reason, message)) = pending {
        conditions.push(
            serde_json::json!({"type": "PodResizePending", "status": "True",
            "reason": reason, "message": message}),
        );
    }
    let patch = serde_json::json!({"status": {
        "observedGeneration": generation,
        "conditions": conditions,
        "containerStatuses": [{"name": "etcd", "ready": true, "restartCount": 0,
            "image": "quorate:test", "imageID": "", "state": {"running": {}},
            "resources": resources}],
    }});
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("pod status");
}

/// The etcd container's CPU request in pod `pod`'s spec.
async fn cpu_request(client: &Client, namespace: &str, pod: &str) -> Option<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = api.get_opt(pod).await.ok()??;
    let etcd = pod
        .spec?
        .containers
        .into_iter()
        .find(|c| c.name == "etcd")?;
    Some(etcd.resources?.requests?.get("cpu")?.0.clone())
}

/// A change of the containers' resources only: the member pod chosen next is resized through
/// `pods/resize` (same pod, same UID) and, once the kubelet reports it done, labelled with the
/// new revision, with a `RollingUpdate` event saying so; the next one, whose resize the kubelet
/// reports `Infeasible`, is replaced instead.
#[tokio::test]
async fn a_resources_only_change_resizes_pods_in_place_and_replaces_one_that_cannot() {
    let Some((client, ns)) = setup("in_place_resize").await else {
        return;
    };
    let _operator = Operator::start(&client, &ns, true);
    let api = create(&client, &manifest(CLUSTER, &ns)).await;
    wait_observed(&api, "etcd-main", 1).await;
    for (i, role) in ["Member", "Member", "Leader"].iter().enumerate() {
        renew(&client, &ns, &format!("etcd-main-{i}"), role, false).await;
    }
    controller_revision(&client, &ns, "etcd-main-1", "100m", "quorate:test").await;
    controller_revision(&client, &ns, "etcd-main-2", "200m", "quorate:test").await;
    set_revision(&client, &ns, "etcd-main", "etcd-main-1", 3).await;
    for i in 0..3 {
        sized_member_pod(&client, &ns, &format!("etcd-main-{i}"), "etcd-main-1").await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let uid_before = pods.get("etcd-main-0").await.unwrap().metadata.uid;

    let more_cpu =
        serde_json::json!({"spec": {"etcd": {"resources": {"requests": {"cpu": "200m"}}}}});
    api.patch(
        "etcd-main",
        &PatchParams::default(),
        &Patch::Merge(&more_cpu),
    )
    .await
    .unwrap();
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), &ns);
    eventually("the new template applied", WAIT, || async {
        let sts = statefulsets.get("etcd-main").await.ok()?;
        (sts.metadata.generation? > 1).then_some(())
    })
    .await;
    set_revision(&client, &ns, "etcd-main", "etcd-main-2", 0).await;

    // The first follower is resized, not deleted; nothing else is touched meanwhile.
    eventually("etcd-main-0 resized", WAIT, || async {
        (cpu_request(&client, &ns, "etcd-main-0").await?.as_str() == "200m").then_some(())
    })
    .await;
    assert_eq!(
        pods.get("etcd-main-0").await.unwrap().metadata.uid,
        uid_before
    );
    assert_eq!(
        cpu_request(&client, &ns, "etcd-main-1").await.as_deref(),
        Some("100m")
    );
    let label =
        |pod: Pod| pod.metadata.labels.unwrap_or_default()["controller-revision-hash"].clone();
    assert_eq!(label(pods.get("etcd-main-0").await.unwrap()), "etcd-main-1");

    // Once the kubelet has seen it and reports nothing pending, it counts as updated.
    kubelet_reports(&client, &ns, "etcd-main-0", None).await;
    eventually(
        "etcd-main-0 labelled with the new revision",
        WAIT,
        || async { (label(pods.get("etcd-main-0").await.ok()?) == "etcd-main-2").then_some(()) },
    )
    .await;
    let events = Api::<Event>::namespaced(client.clone(), &ns);
    eventually("a RollingUpdate event for the resize", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("RollingUpdate")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.starts_with("resized etcd-main-0 in place"))
            })
            .then_some(())
    })
    .await;

    // The next follower's resize is Infeasible on its node: it is replaced.
    set_revision(&client, &ns, "etcd-main", "etcd-main-2", 1).await;
    eventually("etcd-main-1 resized", WAIT, || async {
        (cpu_request(&client, &ns, "etcd-main-1").await?.as_str() == "200m").then_some(())
    })
    .await;
    kubelet_reports(
        &client,
        &ns,
        "etcd-main-1",
        Some(("Infeasible", "Node didn't have enough capacity: cpu")),
    )
    .await;
    deleted(&client, &ns, "etcd-main-1").await;
    assert_eq!(
        pods.get("etcd-main-0").await.unwrap().metadata.uid,
        uid_before
    );
}
