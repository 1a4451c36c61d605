//! The testkit's kube-apiserver against the real server (v1.37.2): the `Etcd` CRD installs and
//! serves the example manifest unchanged, kubectl prints druid's columns, RBAC is enforced, the
//! API groups the operator falls back on are what we expect, and the processes die with their
//! guard, also on panic.

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams};
use quorate_testkit::{KubeApiServer, install_etcd_crd};
use serde_json::Value;

const EXAMPLE: &str = include_str!("../../../examples/etcd-cluster.yaml");

fn etcd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
        "etcds",
    )
}

/// Every field of `expected` is in `actual` with the same value (the server may add defaults).
fn assert_contains(expected: &Value, actual: &Value, path: &str) {
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, value) in want {
                let field = format!("{path}.{key}");
                let got = got
                    .get(key)
                    .unwrap_or_else(|| panic!("{field} was dropped by the server"));
                assert_contains(value, got, &field);
            }
        }
        _ => assert_eq!(expected, actual, "{path} changed on the server"),
    }
}

#[tokio::test]
async fn etcd_crd_serves_the_example_and_kubectl_prints_druids_columns() {
    let Some(server) = KubeApiServer::shared_or_skip(
        "etcd_crd_serves_the_example_and_kubectl_prints_druids_columns",
    )
    .await
    else {
        return;
    };
    let client = server.client().await.expect("kube client");
    install_etcd_crd(&client).await;
    let namespace = server
        .create_namespace(&client, "crd")
        .await
        .expect("create namespace");

    let mut etcd: DynamicObject = serde_saphyr::from_str(EXAMPLE).expect("the example parses");
    etcd.metadata.namespace = Some(namespace.clone());
    let etcds: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &etcd_resource());
    etcds
        .create(&PostParams::default(), &etcd)
        .await
        .expect("create the example Etcd");
    let stored = etcds.get("etcd-main").await.expect("read the Etcd back");
    assert_eq!(stored.metadata.labels, etcd.metadata.labels);
    // Nothing of the example's spec is pruned or changed by the CRD's schema.
    assert_contains(&etcd.data["spec"], &stored.data["spec"], "spec");

    let output = server
        .kubectl()
        .args(["get", "etcd", "-n", &namespace, "-o", "wide"])
        .output()
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl get etcd failed: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("kubectl get etcd -o wide:\n{stdout}");
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header.join(" "),
        "NAME READY QUORATE ALL MEMBERS READY BACKUP READY SCALE AGE CLUSTER SIZE CURRENT REPLICAS \
         READY REPLICAS"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row.first(), Some(&"etcd-main"), "{stdout}");
    assert!(row.contains(&"3"), "CLUSTER SIZE 3 missing: {stdout}");
}

/// The server is the pinned release, and serves PodDisruptionBudgets only as `policy/v1` (the
/// only version the operator writes; `v1beta1` was removed in 1.25).
#[tokio::test]
async fn the_server_is_v1_37_and_serves_poddisruptionbudgets_as_policy_v1() {
    let Some(server) = KubeApiServer::shared_or_skip(
        "the_server_is_v1_37_and_serves_poddisruptionbudgets_as_policy_v1",
    )
    .await
    else {
        return;
    };
    let client = server.client().await.expect("kube client");
    let version = client.apiserver_version().await.expect("GET /version");
    assert!(version.git_version.starts_with("v1.37."), "{version:?}");
    let groups = client.list_api_groups().await.expect("GET /apis");
    let policy = groups
        .groups
        .iter()
        .find(|g| g.name == "policy")
        .expect("the policy group is served");
    let versions: Vec<&str> = policy.versions.iter().map(|v| v.version.as_str()).collect();
    assert_eq!(versions, ["v1"]);
    let resources = client
        .list_api_group_resources("policy/v1")
        .await
        .expect("policy/v1 resources");
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "poddisruptionbudgets"),
        "{:?}",
        resources.resources
    );
}

#[tokio::test]
async fn rbac_is_enforced() {
    let Some(server) = KubeApiServer::shared_or_skip("rbac_is_enforced").await else {
        return;
    };
    let client = server.client().await.expect("kube client");
    let namespace = server
        .create_namespace(&client, "rbac")
        .await
        .expect("create namespace");
    let user = "system:serviceaccount:rbac-test:reader";
    let can_list = |verb: &'static str| {
        let output = server
            .kubectl()
            .args(["auth", "can-i", verb, "configmaps", "-n", &namespace])
            .arg(format!("--as={user}"))
            .output()
            .expect("run kubectl auth can-i");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    assert_eq!(can_list("list"), "no", "RBAC must deny what no role grants");

    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.clone()),
        ..ObjectMeta::default()
    };
    let role = Role {
        metadata: meta("configmap-reader"),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..PolicyRule::default()
        }]),
    };
    Api::<Role>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &role)
        .await
        .expect("create Role");
    let binding = RoleBinding {
        metadata: meta("configmap-reader"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "configmap-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.into(),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create RoleBinding");
    assert_eq!(can_list("list"), "yes", "the RoleBinding grants list");
    assert_eq!(can_list("delete"), "no", "but nothing more");
}

fn gone(pid: u32) -> bool {
    // Reaped processes have no /proc entry; a zombie would mean nobody reaped it.
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn a_private_server_dies_with_its_guard_also_on_panic() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let Some(server) =
            KubeApiServer::start_or_skip("a_private_server_dies_with_its_guard_also_on_panic")
                .await
        else {
            let _ = tx.send(None);
            return;
        };
        let client = server.client().await.expect("kube client");
        client
            .apiserver_version()
            .await
            .expect("the server answers");
        let (apiserver, etcd) = server.pids();
        assert!(!gone(apiserver) && !gone(etcd));
        let _ = tx.send(Some((apiserver, etcd, server.dir().to_path_buf())));
        panic!("the test body fails while the server runs");
    });
    let joined = task.await;
    let Some((apiserver, etcd, dir)) = rx.await.expect("the task reports") else {
        return; // skipped: binaries missing outside CI
    };
    assert!(joined.is_err_and(|e| e.is_panic()));
    assert!(gone(apiserver), "kube-apiserver {apiserver} survived");
    assert!(gone(etcd), "its etcd {etcd} survived");
    assert!(!dir.exists(), "{} was not removed", dir.display());
}
