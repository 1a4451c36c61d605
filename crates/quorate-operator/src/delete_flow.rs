//! The delete flow, in order: the StatefulSet and its member pods first; once no member pod
//! is left, every other component (ConfigMap, Services, PDB, leases, RBAC), which the pods use
//! while they stop (their agents read the configuration and write their leases until the
//! end); then the finalizer. PVCs stay (as in druid), so data outlives an accidental delete.
//! Passes are started by the StatefulSet's and the pods' watch events (see `controller.rs`).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use quorate_api::names::selector_string;
use quorate_core::last_operation::ErrorCode;

use crate::apply::delete_if_present;
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

/// The kinds of managed components, as `(group, version, kind, plural)`: the StatefulSet
/// first (deleted before the others).
fn component_kinds() -> Vec<ApiResource> {
    [
        (
            GroupVersionKind::gvk("apps", "v1", "StatefulSet"),
            "statefulsets",
        ),
        (GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps"),
        (GroupVersionKind::gvk("", "v1", "Service"), "services"),
        (
            GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget"),
            "poddisruptionbudgets",
        ),
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
    let kinds = component_kinds();
    let (members, others) = kinds.split_at(1);
    let mut remaining = delete_and_confirm(etcd, ctx, members)
        .await
        .map_err(StepError::tag(ErrorCode::DeleteResources))?;
    remaining.extend(
        delete_member_pods(etcd, ctx, remaining.is_empty())
            .await
            .map_err(StepError::tag(ErrorCode::DeleteResources))?,
    );
    if remaining.is_empty() {
        remaining = delete_and_confirm(etcd, ctx, others)
            .await
            .map_err(StepError::tag(ErrorCode::DeleteResources))?;
    }
    if !remaining.is_empty() {
        return Ok(DeleteProgress::Waiting(remaining));
    }
    finalizer::remove(etcd, ctx)
        .await
        .map_err(StepError::tag(ErrorCode::RemoveFinalizer))?;
    Ok(DeleteProgress::Done)
}

/// Deletes the components of `kinds` and lists them once more: an object without finalizers
/// is gone as soon as its deletion is accepted, so one pass usually confirms it, and only the
/// ones still there (finalizers, foreground deletions) wait for their watch events.
async fn delete_and_confirm(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    kinds: &[ApiResource],
) -> Result<Vec<String>, Error> {
    let requested = delete_components(etcd, ctx, kinds).await?;
    if requested.is_empty() {
        return Ok(requested);
    }
    delete_components(etcd, ctx, kinds).await
}

/// The member pods still there, as `Pod/name`. Once the StatefulSet is gone
/// (`statefulset_gone`), the ones not yet being deleted are deleted too: the garbage collector
/// would do so, this is sooner.
async fn delete_member_pods(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    statefulset_gone: bool,
) -> Result<Vec<String>, Error> {
    let namespace = etcd.namespace();
    let selector = selector_string(etcd.name());
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let listed = api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .map_err(Error::kube("list", "Pod", namespace, &selector))?;
    let mut remaining = Vec::new();
    for pod in listed.items {
        let Some(name) = pod.metadata.name else {
            continue;
        };
        if statefulset_gone && pod.metadata.deletion_timestamp.is_none() {
            delete_if_present(&api, "Pod", &name).await?;
        }
        remaining.push(format!("Pod/{name}"));
    }
    Ok(remaining)
}

/// Asks for the deletion of every component of `kinds` the `Etcd` owns; the ones still there,
/// as `Kind/name`.
async fn delete_components(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    kinds: &[ApiResource],
) -> Result<Vec<String>, Error> {
    let namespace = etcd.namespace();
    let uid = etcd.etcd().metadata.uid.clone().unwrap_or_default();
    let selector = selector_string(etcd.name());
    let mut remaining = Vec::new();
    for resource in kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, resource);
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
