//! The delete flow: delete every component of the `Etcd`, confirm none is left, then drop the
//! finalizer. PVCs stay (as in druid), so data outlives an accidental delete.

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use quorate_api::names::selector_string;
use quorate_core::last_operation::ErrorCode;

use crate::apply::{delete_if_present, pdb_gvk};
use crate::context::Context;
use crate::error::{Error, StepError};
use crate::finalizer;
use crate::validated::ValidatedEtcd;

/// What a delete pass found.
#[derive(Debug, PartialEq, Eq)]
pub enum DeleteProgress {
    /// Components were still there (their deletion was requested); look again soon.
    Waiting(Vec<String>),
    /// Nothing is left and the finalizer is gone.
    Done,
}

/// The kinds of managed components, as `(group, version, kind, plural)`.
fn component_kinds(ctx: &Context) -> Vec<ApiResource> {
    let pdb = pdb_gvk(ctx.pdb_version);
    [
        (
            GroupVersionKind::gvk("apps", "v1", "StatefulSet"),
            "statefulsets",
        ),
        (GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps"),
        (GroupVersionKind::gvk("", "v1", "Service"), "services"),
        (pdb, "poddisruptionbudgets"),
        (
            GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
            "leases",
        ),
        (
            GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            "rolebindings",
        ),
        (
            GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "Role"),
            "roles",
        ),
        (
            GroupVersionKind::gvk("", "v1", "ServiceAccount"),
            "serviceaccounts",
        ),
    ]
    .iter()
    .map(|(gvk, plural)| ApiResource::from_gvk_with_plural(gvk, plural))
    .collect()
}

/// One delete pass.
pub async fn delete(etcd: &ValidatedEtcd, ctx: &Context) -> Result<DeleteProgress, StepError> {
    let remaining = delete_components(etcd, ctx)
        .await
        .map_err(StepError::tag(ErrorCode::DeleteResources))?;
    if !remaining.is_empty() {
        return Ok(DeleteProgress::Waiting(remaining));
    }
    finalizer::remove(etcd, ctx)
        .await
        .map_err(StepError::tag(ErrorCode::RemoveFinalizer))?;
    Ok(DeleteProgress::Done)
}

/// Asks for the deletion of every component the `Etcd` owns; the ones still there, as
/// `Kind/name`.
async fn delete_components(etcd: &ValidatedEtcd, ctx: &Context) -> Result<Vec<String>, Error> {
    let namespace = etcd.namespace();
    let uid = etcd.etcd().metadata.uid.clone().unwrap_or_default();
    let selector = selector_string(etcd.name());
    let mut remaining = Vec::new();
    for resource in component_kinds(ctx) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), namespace, &resource);
        let listed = api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .map_err(Error::kube(
                "list",
                resource.kind.clone(),
                namespace,
                &selector,
            ))?;
        for object in listed.items {
            let owned = object
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid);
            let Some(object_name) = object.metadata.name.filter(|_| owned) else {
                continue;
            };
            remaining.push(format!("{}/{object_name}", resource.kind));
            if object.metadata.deletion_timestamp.is_none() {
                delete_if_present(&api, &resource.kind, &object_name).await?;
            }
        }
    }
    Ok(remaining)
}
