//! Which member pods run while `spec.replicas` changes (core `scale_plan`, from the
//! StatefulSet and the member leases as cached), and the clean-up after a scale-in: the volumes
//! and member leases of members that left etcd's membership and whose pods are gone.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams};
use quorate_api::Etcd;
use quorate_api::annotations::KEEP_REMOVED_MEMBER_VOLUMES;
use quorate_api::names::{member_lease_name, pod_name, volume_claim_template_name};
use quorate_coord::kube::lease_map::member_lease;
use quorate_core::components::cluster_config::annotation;
use quorate_core::scale_plan::{ScaleEvidence, ScalePlan, plan};

use crate::apply::delete_if_present;
use crate::context::Context;
use crate::error::Error;

/// The StatefulSet's `spec.replicas` as cached (0 without one).
fn statefulset_replicas(etcd: &Etcd, ctx: &Context) -> i32 {
    let namespace = etcd.metadata.namespace.as_deref().unwrap_or_default();
    let name = etcd.metadata.name.as_deref().unwrap_or_default();
    ctx.caches
        .statefulset(namespace, name)
        .and_then(|s| s.spec.as_ref()?.replicas)
        .unwrap_or(0)
}

/// The pods to run now, from what the caches hold. Member leases exist for ordinals `0..n`
/// (one per pod that ran, kept while hibernated), so they are read until the first missing one.
pub fn scale_plan(etcd: &Etcd, ctx: &Context) -> ScalePlan {
    let namespace = etcd.metadata.namespace.as_deref().unwrap_or_default();
    let statefulset_replicas = statefulset_replicas(etcd, ctx);
    let leases: Vec<_> = (0u32..)
        .map_while(|i| ctx.caches.lease(namespace, &member_lease_name(etcd, i)))
        .map(|l| member_lease(&l))
        .collect();
    plan(&ScaleEvidence {
        etcd,
        leases: &leases,
        statefulset_replicas,
        now: jiff::Timestamp::now(),
    })
}

/// After a scale-in: deletes the PersistentVolumeClaims and member leases of the ordinals at
/// and above the running size, once the StatefulSet runs no pod there (never while
/// hibernating, and not with [`KEEP_REMOVED_MEMBER_VOLUMES`]). Whether there is anything to do
/// is read from the lease cache, so a settled cluster costs no API call. `Some(why)` when it
/// must wait for the StatefulSet to shrink first (the pass is requeued).
pub async fn remove_departed(
    etcd: &Etcd,
    ctx: &Context,
    plan: &ScalePlan,
) -> Result<Option<String>, Error> {
    let running = plan.running.replicas;
    if etcd.spec.replicas <= 0
        || annotation(etcd, KEEP_REMOVED_MEMBER_VOLUMES).as_deref() == Some("true")
    {
        return Ok(None);
    }
    let namespace = etcd.metadata.namespace.as_deref().unwrap_or_default();
    let name = etcd.metadata.name.as_deref().unwrap_or_default();
    // Leases are created one per running ordinal, so the first missing one ends the range.
    let departed: Vec<u32> = (running.max(0) as u32..)
        .take_while(|i| {
            ctx.caches
                .lease(namespace, &member_lease_name(etcd, *i))
                .is_some()
        })
        .collect();
    if departed.is_empty() {
        return Ok(None);
    }
    if statefulset_replicas(etcd, ctx) > running {
        return Ok(Some(format!(
            "waiting for the StatefulSet to shrink to {running} before deleting the volumes of \
             the members that left"
        )));
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let template = volume_claim_template_name(etcd);
    let listed = claims
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("list", "PersistentVolumeClaim", namespace, ""))?;
    for i in &departed {
        let claim = format!("{template}-{}", pod_name(name, *i));
        if listed
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(&claim))
        {
            tracing::info!(%namespace, %claim, "deleting the volume of a member that left");
            delete_if_present(&claims, "PersistentVolumeClaim", &claim).await?;
        }
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ctx.client.clone(), namespace);
    for i in departed {
        delete_if_present(&leases, "Lease", &member_lease_name(etcd, i)).await?;
    }
    Ok(None)
}
