//! The project's `Etcd` CRD installed on a test API server, once per server, waited for until
//! it is Established; every Kubernetes test needs it before its first `Etcd`.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};

/// The committed CRD.
pub const ETCD_CRD_YAML: &str =
    include_str!("../../../deploy/crds/druid.gardener.cloud_etcds.yaml");
/// Its name.
pub const ETCD_CRD_NAME: &str = "etcds.druid.gardener.cloud";

/// Creates the CRD (a server shared by tests may have it already) and waits until it is
/// Established. Created, not server-side applied: v1.20 refuses SSA of a CRD with CEL rules.
/// Panics with the reason on failure: this is test setup.
pub async fn install_etcd_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(ETCD_CRD_YAML).expect("the committed CRD parses");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("creating CRD {ETCD_CRD_NAME}: {e}"),
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let current = crds.get(ETCD_CRD_NAME).await.expect("read back the CRD");
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
            "CRD {ETCD_CRD_NAME} not Established after 60s: {conditions:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
