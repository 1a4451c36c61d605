//! The project's CRDs (`Etcd` and the task resources) installed on a test API server, once
//! it is Established; every Kubernetes test needs it before its first `Etcd`.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::KubeApiServer;

/// The committed CRD.
pub const ETCD_CRD_YAML: &str =
    include_str!("../../../deploy/crds/druid.gardener.cloud_etcds.yaml");
/// Its name.
pub const ETCD_CRD_NAME: &str = "etcds.druid.gardener.cloud";

/// The committed CRDs of druid's task resources, with their names.
pub const TASK_CRDS: [(&str, &str); 2] = [
    (
        include_str!("../../../deploy/crds/druid.gardener.cloud_etcdopstasks.yaml"),
        "etcdopstasks.druid.gardener.cloud",
    ),
    (
        include_str!("../../../deploy/crds/druid.gardener.cloud_etcdcopybackupstasks.yaml"),
        "etcdcopybackupstasks.druid.gardener.cloud",
    ),
];

/// Creates the `Etcd` CRD (a server shared by tests may have it already) and waits until it is
/// Established. Created, not server-side applied (as the tests have always done it).
/// Panics with the reason on failure: this is test setup.
pub async fn install_etcd_crd(client: &Client) {
    install_crd(client, ETCD_CRD_YAML, ETCD_CRD_NAME).await;
}

/// What most tests of `Etcd` handling start from: the shared API server (a skip outside CI
/// when it cannot run, see [`KubeApiServer::shared_or_skip`]), an admin client, the `Etcd` CRD
/// installed and a fresh namespace named after `test`.
pub async fn etcd_test_namespace(test: &str) -> Option<(&'static KubeApiServer, Client, String)> {
    let server = KubeApiServer::shared_or_skip(test).await?;
    let client = server.client().await.expect("client");
    install_etcd_crd(&client).await;
    let namespace = server
        .create_namespace(&client, &test.replace('_', "-"))
        .await
        .expect("namespace");
    Some((server, client, namespace))
}

/// Creates the task CRDs ([`TASK_CRDS`]) like [`install_etcd_crd`].
pub async fn install_task_crds(client: &Client) {
    for (yaml, name) in TASK_CRDS {
        install_crd(client, yaml, name).await;
    }
}

/// Installs the `Etcd` CRD the operator picks for this server, with druid's CEL rules from
/// Kubernetes 1.29 on (`quorate_api::crd::etcd_crd_for_server`); returns the server's
/// `major.minor` and whether the CRD carries CEL rules. Use a private server: a shared one may
/// hold the CEL-free CRD already.
pub async fn install_etcd_crd_for_server(client: &Client) -> (String, bool) {
    let info = client
        .apiserver_version()
        .await
        .expect("the server's version");
    let crd = quorate_api::crd::etcd_crd_for_server(&info.major, &info.minor);
    let cel = quorate_api::crd::server_supports_cel(&info.major, &info.minor) == Some(true);
    let yaml = serde_saphyr::to_string(&crd).expect("the CRD serializes");
    install_crd(client, &yaml, ETCD_CRD_NAME).await;
    (info.git_version, cel)
}

async fn install_crd(client: &Client, yaml: &str, name: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(yaml).expect("the committed CRD parses");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("creating CRD {name}: {e}"),
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let current = crds.get(name).await.expect("read back the CRD");
        let conditions = current
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default();
        if conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "CRD {name} not Established after 60s: {conditions:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
