//! The delete flow: delete every component of the `Etcd`, confirm none is left, then drop the
//! finalizer. PVCs stay (as in druid), so data outlives an accidental delete.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use quorate_api::Etcd;
use quorate_api::annotations::ETCD_FINALIZER;
use quorate_api::names::selector_string;

use crate::apply::delete_if_present;
use crate::context::Context;
use crate::error::Error;
use crate::spec_flow::{names, pdb_gvk};

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
pub async fn delete(etcd: &Etcd, ctx: &Context) -> Result<DeleteProgress, Error> {
    let (namespace, name) = names(etcd)?;
    let uid = etcd.metadata.uid.clone().unwrap_or_default();
    let selector = selector_string(&name);
    let mut remaining = Vec::new();
    for resource in component_kinds(ctx) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
        let listed = api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .map_err(Error::kube(
                "list",
                resource.kind.clone(),
                &namespace,
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
    if !remaining.is_empty() {
        return Ok(DeleteProgress::Waiting(remaining));
    }
    remove_finalizer(etcd, ctx, &namespace, &name).await?;
    Ok(DeleteProgress::Done)
}

async fn remove_finalizer(
    etcd: &Etcd,
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<(), Error> {
    let finalizers = etcd.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == ETCD_FINALIZER) {
        return Ok(());
    }
    let kept: Vec<_> = finalizers
        .into_iter()
        .filter(|f| f != ETCD_FINALIZER)
        .collect();
    let patch = serde_json::json!({"metadata": {
        "finalizers": kept,
        "resourceVersion": etcd.metadata.resource_version,
    }});
    let api: Api<Etcd> = Api::namespaced(ctx.client.clone(), namespace);
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(
            "remove the finalizer from",
            "Etcd",
            namespace,
            name,
        )(e)),
    }
}
