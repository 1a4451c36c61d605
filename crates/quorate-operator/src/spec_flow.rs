//! The spec flow: make every component of an `Etcd` what its spec says, in druid's order
//! (ServiceAccount → Role → RoleBinding → member leases → snapshot leases → PDB → client
//! Service → peer Service → ConfigMap → StatefulSet), stopping at the first failure. The
//! StatefulSet goes one safe step per pass ([`next_statefulset_step`]): peer TLS first, at
//! the current size, then growth. Nothing here waits; a step that must wait asks for a requeue.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use quorate_api::Etcd;
use quorate_api::annotations::ETCD_FINALIZER;
use quorate_api::names::{config_map_name, delta_snapshot_lease_name, full_snapshot_lease_name};
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::components::config_map::{CLUSTER_CONFIG_KEY, template_checksum};
use quorate_core::components::paths::volume;
use quorate_core::components::{
    ComponentContext, DesiredObject, PdbApiVersion, desired_components, statefulset,
};
use quorate_core::last_operation::ErrorCode;
use quorate_core::statefulset_step::{
    ObservedStatefulSet, StatefulSetInputs, StatefulSetStep, next_statefulset_step,
};

use crate::apply::{apply, apply_manifest, delete_if_present};
use crate::context::Context;
use crate::error::Error;
use crate::status::PassOutcome;

/// Runs the spec flow once.
pub async fn sync(etcd: &Etcd, ctx: &Context) -> PassOutcome {
    match try_sync(etcd, ctx).await {
        Ok(outcome) => outcome,
        Err((code, error)) => PassOutcome::Failed(vec![(code, error.to_string())]),
    }
}

type Failure = (ErrorCode, Error);

async fn try_sync(etcd: &Etcd, ctx: &Context) -> Result<PassOutcome, Failure> {
    let (namespace, name) = names(etcd).map_err(|e| (ErrorCode::InvalidSpec, e))?;
    ensure_finalizer(etcd, ctx)
        .await
        .map_err(|e| (ErrorCode::AddFinalizer, e))?;
    let component_ctx = component_context(etcd, ctx, &namespace, &name)
        .await
        .map_err(|e| (ErrorCode::SyncConfigMap, e))?;
    let desired =
        desired_components(etcd, &component_ctx).map_err(|e| (ErrorCode::InvalidSpec, e.into()))?;
    for object in desired.in_sync_order() {
        let code = error_code(&object, &name);
        if let DesiredObject::PodDisruptionBudget(_) = object
            && desired.snapshot_leases.is_empty()
        {
            // Backups were turned off: their leases go, in their place in the order.
            delete_snapshot_leases(ctx, &namespace, &name)
                .await
                .map_err(|e| (ErrorCode::SyncSnapshotLease, e))?;
        }
        apply_object(ctx, &object).await.map_err(|e| (code, e))?;
    }
    sync_statefulset(
        etcd,
        ctx,
        &component_ctx,
        &desired.statefulset,
        &namespace,
        &name,
    )
    .await
    .map_err(|e| (ErrorCode::SyncStatefulSet, e))
}

/// Applies one desired object; the StatefulSet is left to [`sync_statefulset`].
async fn apply_object(ctx: &Context, object: &DesiredObject<'_>) -> Result<(), Error> {
    let client = &ctx.client;
    match object {
        DesiredObject::StatefulSet(_) => Ok(()),
        DesiredObject::PodDisruptionBudget(_) => {
            let manifest = object.to_manifest(ctx.pdb_version)?;
            let gvk = pdb_gvk(ctx.pdb_version);
            apply_manifest(client, &gvk, "poddisruptionbudgets", &manifest).await
        }
        DesiredObject::ServiceAccount(o) => apply(client, *o).await.map(drop),
        DesiredObject::Role(o) => apply(client, *o).await.map(drop),
        DesiredObject::RoleBinding(o) => apply(client, *o).await.map(drop),
        DesiredObject::Lease(o) => apply(client, *o).await.map(drop),
        DesiredObject::Service(o) => apply(client, *o).await.map(drop),
        DesiredObject::ConfigMap(o) => apply(client, *o).await.map(drop),
    }
}

/// Name and namespace of the `Etcd`.
pub fn names(etcd: &Etcd) -> Result<(String, String), Error> {
    let namespace = etcd
        .metadata
        .namespace
        .clone()
        .ok_or(Error::Incomplete("a namespace"))?;
    let name = etcd
        .metadata
        .name
        .clone()
        .ok_or(Error::Incomplete("a name"))?;
    Ok((namespace, name))
}

fn error_code(object: &DesiredObject<'_>, etcd_name: &str) -> ErrorCode {
    match object {
        DesiredObject::ServiceAccount(_) => ErrorCode::SyncServiceAccount,
        DesiredObject::Role(_) => ErrorCode::SyncRole,
        DesiredObject::RoleBinding(_) => ErrorCode::SyncRoleBinding,
        DesiredObject::Lease(_)
            if object.name() == full_snapshot_lease_name(etcd_name)
                || object.name() == delta_snapshot_lease_name(etcd_name) =>
        {
            ErrorCode::SyncSnapshotLease
        }
        DesiredObject::Lease(_) => ErrorCode::SyncMemberLease,
        DesiredObject::PodDisruptionBudget(_) => ErrorCode::SyncPodDisruptionBudget,
        DesiredObject::Service(_) if object.name().ends_with("-peer") => ErrorCode::SyncPeerService,
        DesiredObject::Service(_) => ErrorCode::SyncClientService,
        DesiredObject::ConfigMap(_) => ErrorCode::SyncConfigMap,
        DesiredObject::StatefulSet(_) => ErrorCode::SyncStatefulSet,
    }
}

/// The group/version/kind of the PodDisruptionBudget API in use.
pub fn pdb_gvk(version: PdbApiVersion) -> GroupVersionKind {
    GroupVersionKind::gvk(
        "policy",
        version.as_str().trim_start_matches("policy/"),
        "PodDisruptionBudget",
    )
}

async fn ensure_finalizer(etcd: &Etcd, ctx: &Context) -> Result<(), Error> {
    let finalizers = etcd.metadata.finalizers.clone().unwrap_or_default();
    if finalizers.iter().any(|f| f == ETCD_FINALIZER) {
        return Ok(());
    }
    let (namespace, name) = names(etcd)?;
    let mut wanted = finalizers;
    wanted.push(ETCD_FINALIZER.to_string());
    // The resourceVersion makes the merge patch fail rather than drop someone else's
    // finalizer added meanwhile.
    let patch = serde_json::json!({"metadata": {
        "finalizers": wanted,
        "resourceVersion": etcd.metadata.resource_version,
    }});
    let api: Api<Etcd> = Api::namespaced(ctx.client.clone(), &namespace);
    let written = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(
            "add the finalizer to",
            "Etcd",
            &namespace,
            &name,
        ))?;
    ctx.newer.record(
        written.metadata.uid.as_deref(),
        written.metadata.resource_version.as_deref(),
    );
    Ok(())
}

/// What the builders need beyond the `Etcd`: images, and the facts observed in the cluster
/// (which members bootstrapped it, where `Local` buckets live on the host).
async fn component_context(
    etcd: &Etcd,
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<ComponentContext, Error> {
    let mut component_ctx = ComponentContext::new(
        ctx.settings.images.member.clone(),
        ctx.settings.images.init.clone(),
    );
    component_ctx.disable_service_account_automount =
        ctx.settings.disable_service_account_automount;
    component_ctx.bootstrap_members =
        recorded_bootstrap_members(etcd, ctx, namespace, name).await?;
    component_ctx.local_backup_host_path = local_backup_host_path(etcd, ctx, namespace).await?;
    Ok(component_ctx)
}

/// The bootstrap set written into the existing ConfigMap; `None` for a cluster that never
/// ran; an empty set (never bootstrap, only join or start from data) when the cluster ran
/// before but its ConfigMap is gone or was written by druid.
async fn recorded_bootstrap_members(
    etcd: &Etcd,
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<Vec<String>>, Error> {
    let cm_name = config_map_name(name);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let existing = api.get_opt(&cm_name).await.map_err(Error::kube(
        "get",
        "ConfigMap",
        namespace,
        &cm_name,
    ))?;
    let recorded = existing
        .and_then(|cm| cm.data)
        .and_then(|data| data.get(CLUSTER_CONFIG_KEY).cloned())
        .and_then(|json| serde_json::from_str::<ClusterConfig>(&json).ok())
        .map(|config| config.bootstrap_members);
    let ran_before = etcd
        .status
        .as_ref()
        .is_some_and(|s| s.observed_generation.is_some())
        || ctx.caches.statefulset(namespace, name).is_some();
    Ok(match recorded {
        Some(members) => Some(members),
        None if ran_before => Some(Vec::new()),
        None => None,
    })
}

/// The `hostPath` key of a `Local` store's Secret (druid's way to place buckets on the host).
async fn local_backup_host_path(
    etcd: &Etcd,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<String>, Error> {
    let Some(store) = &etcd.spec.backup.store else {
        return Ok(None);
    };
    let local = store.provider.as_deref() == Some("Local");
    let Some(secret) = store.secret_ref.as_ref().filter(|_| local) else {
        return Ok(None);
    };
    let secret_name = secret.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let found = api.get_opt(&secret_name).await.map_err(Error::kube(
        "get",
        "Secret",
        namespace,
        &secret_name,
    ))?;
    Ok(found
        .and_then(|s| s.data)
        .and_then(|d| d.get("hostPath").cloned())
        .and_then(|b| String::from_utf8(b.0).ok()))
}

async fn delete_snapshot_leases(ctx: &Context, namespace: &str, name: &str) -> Result<(), Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
        "leases",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    for lease in [
        full_snapshot_lease_name(name),
        delta_snapshot_lease_name(name),
    ] {
        if ctx.caches.lease(namespace, &lease).is_some() {
            delete_if_present(&api, "Lease", &lease).await?;
        }
    }
    Ok(())
}

async fn sync_statefulset(
    etcd: &Etcd,
    ctx: &Context,
    component_ctx: &ComponentContext,
    desired: &StatefulSet,
    namespace: &str,
    name: &str,
) -> Result<PassOutcome, Error> {
    let existing = ctx.caches.statefulset(namespace, name);
    let observed = existing.as_deref().map(|sts| ObservedStatefulSet {
        replicas: sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
        ready_replicas: sts
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        tls_mounts_match: tls_mounts(sts) == tls_mounts(desired),
    });
    let member_tls = quorate_api::names::member_lease_names(etcd)
        .into_iter()
        .map(|lease| {
            let tls = ctx
                .caches
                .lease(namespace, &lease)
                .map(|l| quorate_coord::kube::lease_map::member_lease(&l))
                .and_then(|l| l.tls_enabled());
            (lease, tls)
        })
        .collect();
    let inputs = StatefulSetInputs {
        desired_replicas: etcd.spec.replicas,
        desired_peer_tls: etcd.peer_tls_enabled(),
        observed,
        member_tls,
    };
    match next_statefulset_step(&inputs) {
        StatefulSetStep::Apply { replicas } => {
            let checksum = template_checksum(etcd, component_ctx)?;
            let mut sts = statefulset::build(etcd, component_ctx, replicas, Some(&checksum))?;
            if let Some(existing) = existing.as_deref() {
                keep_immutable_fields(&mut sts, existing);
            }
            apply(&ctx.client, &sts).await?;
            if replicas < etcd.spec.replicas {
                Ok(PassOutcome::Requeue(format!(
                    "peer TLS is being enabled at {replicas} member(s) before the cluster grows to {}",
                    etcd.spec.replicas
                )))
            } else {
                Ok(PassOutcome::Succeeded)
            }
        }
        StatefulSetStep::WaitForPeerTls { pending } => Ok(PassOutcome::Requeue(format!(
            "waiting for {} to report peer TLS {} on their member leases before growing",
            pending.join(", "),
            if inputs.desired_peer_tls {
                "enabled"
            } else {
                "disabled"
            }
        ))),
        StatefulSetStep::WaitForReadyPods { ready, replicas } => Ok(PassOutcome::Requeue(format!(
            "the TLS mounts change, but only {ready} of {replicas} pods are ready; \
             rolling them now could cost quorum"
        ))),
    }
}

/// The TLS Secret volumes of a StatefulSet's pod template: (volume name, Secret name).
fn tls_mounts(sts: &StatefulSet) -> BTreeSet<(String, String)> {
    const TLS_VOLUMES: [&str; 5] = [
        volume::CLIENT_CA,
        volume::CLIENT_SERVER_TLS,
        volume::CLIENT_CLIENT_TLS,
        volume::PEER_CA,
        volume::PEER_SERVER_TLS,
    ];
    sts.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter(|v| TLS_VOLUMES.contains(&v.name.as_str()))
        .map(|v| {
            let secret = v
                .secret
                .as_ref()
                .and_then(|s| s.secret_name.clone())
                .unwrap_or_default();
            (v.name.clone(), secret)
        })
        .collect()
}

/// Fields the API refuses to change on an existing StatefulSet are kept as they are, as druid
/// sets them only on create; everything else follows the spec.
fn keep_immutable_fields(desired: &mut StatefulSet, existing: &StatefulSet) {
    let (Some(d), Some(e)) = (desired.spec.as_mut(), existing.spec.as_ref()) else {
        return;
    };
    d.selector = e.selector.clone();
    d.service_name = e.service_name.clone();
    d.pod_management_policy = e.pod_management_policy.clone();
    d.volume_claim_templates = e.volume_claim_templates.clone();
}
