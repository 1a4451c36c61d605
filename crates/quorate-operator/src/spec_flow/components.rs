//! Apply: every component but the StatefulSet, in druid's order (ServiceAccount → Role →
//! RoleBinding → member leases → snapshot leases → PDB → client Service → peer Service →
//! ConfigMap), stopping at the first failure with the code its component declares. The
//! StatefulSet, last, has its own step ([`super::statefulset`]).

use kube::Api;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use quorate_api::names::{delta_snapshot_lease_name, full_snapshot_lease_name};
use quorate_core::components::{DesiredComponents, DesiredObject, snapshot_leases};

use crate::apply::{apply_component, delete_if_present};
use crate::context::Context;
use crate::error::{Error, StepError};
use crate::validated::ValidatedEtcd;

/// Applies the components before the StatefulSet. Snapshot leases of a cluster whose backups
/// were turned off are deleted in their place in the order.
pub async fn apply_in_order(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    desired: &DesiredComponents,
) -> Result<(), StepError> {
    for object in desired.in_sync_order() {
        match object {
            DesiredObject::StatefulSet(_) => continue,
            DesiredObject::PodDisruptionBudget(_) if desired.snapshot_leases.is_empty() => {
                delete_snapshot_leases(etcd, ctx)
                    .await
                    .map_err(StepError::tag(snapshot_leases::SYNC_ERROR))?;
            }
            _ => {}
        }
        apply_component(&ctx.client, object)
            .await
            .map_err(StepError::tag(object.sync_error_code()))?;
    }
    Ok(())
}

/// Deletes the snapshot leases the cache still shows.
async fn delete_snapshot_leases(etcd: &ValidatedEtcd, ctx: &Context) -> Result<(), Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
        "leases",
    );
    let namespace = etcd.namespace();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    for lease in [
        full_snapshot_lease_name(etcd.name()),
        delta_snapshot_lease_name(etcd.name()),
    ] {
        if ctx.caches.lease(namespace, &lease).is_some() {
            delete_if_present(&api, "Lease", &lease).await?;
        }
    }
    Ok(())
}
