//! `--install-crds`: at start the operator applies the CRDs that fit the API server it talks
//! to — the `Etcd` CRD with druid's CEL rules from Kubernetes 1.29, without them before (as
//! Gardener installs druid's) — and waits until the server reports each Established.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

/// The field manager of the applied CRDs.
const FIELD_MANAGER: &str = "quorate-operator";

/// How long a CRD may take to become Established before the start fails (an API server
/// normally reports it within a second; this only bounds a broken one).
const ESTABLISHED_WITHIN: Duration = Duration::from_secs(60);

/// Why the CRDs could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum CrdInstallError {
    /// The server's version could not be read.
    #[error("reading the API server's version to choose the Etcd CRD: {0}")]
    Version(#[source] kube::Error),
    /// The server refused the CRD.
    #[error(
        "applying CustomResourceDefinition {name}: {source}; the operator's ClusterRole needs \
         create on customresourcedefinitions and patch on {name} (or start without --install-crds \
         and apply `quorate crd --kubernetes-version` yourself)"
    )]
    Apply {
        /// The CRD.
        name: String,
        /// The server's answer.
        source: kube::Error,
    },
    /// The CRD was applied but the server did not report it Established.
    #[error("CustomResourceDefinition {name} was applied but is not Established: {why}")]
    NotEstablished {
        /// The CRD.
        name: String,
        /// What the wait ended with.
        why: String,
    },
}

/// Applies every CRD for the server's version; returns that version (`1.37`) for the log.
pub async fn install_crds(client: &Client) -> Result<String, CrdInstallError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(CrdInstallError::Version)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for crd in quorate_api::crd::crds_for_server(&info.major, &info.minor) {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &apply, &Patch::Apply(&crd))
            .await
            .map_err(|source| CrdInstallError::Apply {
                name: name.clone(),
                source,
            })?;
        let established = await_condition(crds.clone(), &name, conditions::is_crd_established());
        let why = match tokio::time::timeout(ESTABLISHED_WITHIN, established).await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "no Established condition within {ESTABLISHED_WITHIN:?}"
            )),
        };
        if let Some(why) = why {
            return Err(CrdInstallError::NotEstablished { name, why });
        }
    }
    Ok(format!("{}.{}", info.major, info.minor))
}
