//! Every component of an `Etcd` at once, in the order druid syncs them (ServiceAccount → Role
//! → RoleBinding → member leases → snapshot leases → PDB → client Service → peer Service →
//! ConfigMap → StatefulSet): the pod's permissions exist before the pods, and the ConfigMap
//! before the StatefulSet whose pod template carries its checksum.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use quorate_api::Etcd;

use crate::last_operation::ErrorCode;

use super::context::ComponentContext;
use super::error::ComponentError;
use super::pod_disruption_budget::to_manifest;
use super::{
    client_service, config_map, member_leases, peer_service, pod_disruption_budget, role,
    role_binding, service_account, snapshot_leases, statefulset,
};

/// The desired objects of one `Etcd`.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredComponents {
    /// ServiceAccount `<name>`.
    pub service_account: ServiceAccount,
    /// Role `druid.gardener.cloud:etcd:<name>`.
    pub role: Role,
    /// RoleBinding `druid.gardener.cloud:etcd:<name>`.
    pub role_binding: RoleBinding,
    /// One lease per desired member.
    pub member_leases: Vec<Lease>,
    /// Full and delta snapshot leases; empty without backups.
    pub snapshot_leases: Vec<Lease>,
    /// PodDisruptionBudget `<name>` (`policy/v1`).
    pub pod_disruption_budget: PodDisruptionBudget,
    /// Service `<name>-client`.
    pub client_service: Service,
    /// Headless Service `<name>-peer`.
    pub peer_service: Service,
    /// ConfigMap `<name>-config`.
    pub config_map: ConfigMap,
    /// StatefulSet `<name>`, with [`config_map::template_checksum`] on its pod template.
    pub statefulset: StatefulSet,
}

/// One desired object, borrowed, for code that handles all components alike (apply loops,
/// dumps). One variant per component, not per kind, so each knows its own sync error code.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DesiredObject<'a> {
    /// The ServiceAccount.
    ServiceAccount(&'a ServiceAccount),
    /// The Role.
    Role(&'a Role),
    /// The RoleBinding.
    RoleBinding(&'a RoleBinding),
    /// A member lease.
    MemberLease(&'a Lease),
    /// The full or delta snapshot lease.
    SnapshotLease(&'a Lease),
    /// The PodDisruptionBudget.
    PodDisruptionBudget(&'a PodDisruptionBudget),
    /// The client Service.
    ClientService(&'a Service),
    /// The headless peer Service.
    PeerService(&'a Service),
    /// The ConfigMap.
    ConfigMap(&'a ConfigMap),
    /// The StatefulSet.
    StatefulSet(&'a StatefulSet),
}

impl DesiredObject<'_> {
    /// The object's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            DesiredObject::ServiceAccount(_) => "ServiceAccount",
            DesiredObject::Role(_) => "Role",
            DesiredObject::RoleBinding(_) => "RoleBinding",
            DesiredObject::MemberLease(_) | DesiredObject::SnapshotLease(_) => "Lease",
            DesiredObject::PodDisruptionBudget(_) => "PodDisruptionBudget",
            DesiredObject::ClientService(_) | DesiredObject::PeerService(_) => "Service",
            DesiredObject::ConfigMap(_) => "ConfigMap",
            DesiredObject::StatefulSet(_) => "StatefulSet",
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        let meta = match self {
            DesiredObject::ServiceAccount(o) => &o.metadata,
            DesiredObject::Role(o) => &o.metadata,
            DesiredObject::RoleBinding(o) => &o.metadata,
            DesiredObject::MemberLease(o) | DesiredObject::SnapshotLease(o) => &o.metadata,
            DesiredObject::PodDisruptionBudget(o) => &o.metadata,
            DesiredObject::ClientService(o) | DesiredObject::PeerService(o) => &o.metadata,
            DesiredObject::ConfigMap(o) => &o.metadata,
            DesiredObject::StatefulSet(o) => &o.metadata,
        };
        meta.name.as_deref().unwrap_or_default()
    }

    /// The `lastErrors` code when this object cannot be created or updated, as its component
    /// declares it.
    pub fn sync_error_code(&self) -> ErrorCode {
        match self {
            DesiredObject::ServiceAccount(_) => service_account::SYNC_ERROR,
            DesiredObject::Role(_) => role::SYNC_ERROR,
            DesiredObject::RoleBinding(_) => role_binding::SYNC_ERROR,
            DesiredObject::MemberLease(_) => member_leases::SYNC_ERROR,
            DesiredObject::SnapshotLease(_) => snapshot_leases::SYNC_ERROR,
            DesiredObject::PodDisruptionBudget(_) => pod_disruption_budget::SYNC_ERROR,
            DesiredObject::ClientService(_) => client_service::SYNC_ERROR,
            DesiredObject::PeerService(_) => peer_service::SYNC_ERROR,
            DesiredObject::ConfigMap(_) => config_map::SYNC_ERROR,
            DesiredObject::StatefulSet(_) => statefulset::SYNC_ERROR,
        }
    }

    /// The object as a manifest (with `apiVersion` and `kind`).
    pub fn to_manifest(&self) -> Result<serde_json::Value, ComponentError> {
        let value = match self {
            DesiredObject::PodDisruptionBudget(o) => return to_manifest(o),
            DesiredObject::ServiceAccount(o) => serde_json::to_value(o),
            DesiredObject::Role(o) => serde_json::to_value(o),
            DesiredObject::RoleBinding(o) => serde_json::to_value(o),
            DesiredObject::MemberLease(o) | DesiredObject::SnapshotLease(o) => {
                serde_json::to_value(o)
            }
            DesiredObject::ClientService(o) | DesiredObject::PeerService(o) => {
                serde_json::to_value(o)
            }
            DesiredObject::ConfigMap(o) => serde_json::to_value(o),
            DesiredObject::StatefulSet(o) => serde_json::to_value(o),
        };
        value.map_err(|e| ComponentError::Serialize {
            what: self.kind(),
            name: self.name().to_string(),
            detail: e.to_string(),
        })
    }
}

impl DesiredComponents {
    /// All objects in druid's sync order.
    pub fn in_sync_order(&self) -> Vec<DesiredObject<'_>> {
        let mut out = vec![
            DesiredObject::ServiceAccount(&self.service_account),
            DesiredObject::Role(&self.role),
            DesiredObject::RoleBinding(&self.role_binding),
        ];
        out.extend(self.member_leases.iter().map(DesiredObject::MemberLease));
        out.extend(
            self.snapshot_leases
                .iter()
                .map(DesiredObject::SnapshotLease),
        );
        out.extend([
            DesiredObject::PodDisruptionBudget(&self.pod_disruption_budget),
            DesiredObject::ClientService(&self.client_service),
            DesiredObject::PeerService(&self.peer_service),
            DesiredObject::ConfigMap(&self.config_map),
            DesiredObject::StatefulSet(&self.statefulset),
        ]);
        out
    }
}

/// Every component of `etcd`, each built once, with a StatefulSet of the pods that run (see
/// [`ComponentContext::running`]).
/// When the controller needs another size (a TLS change rolls out at the current size), it
/// resizes that one with [`statefulset::resized`].
pub fn desired_components(
    etcd: &Etcd,
    ctx: &ComponentContext,
) -> Result<DesiredComponents, ComponentError> {
    let config_map = config_map::build(etcd, ctx)?;
    let checksum = config_map::template_checksum(etcd, ctx)?;
    let running = ctx.run_replicas(etcd);
    Ok(DesiredComponents {
        service_account: service_account::build(etcd, ctx)?,
        role: role::build(etcd, running)?,
        role_binding: role_binding::build(etcd)?,
        member_leases: member_leases::build(etcd, running)?,
        snapshot_leases: snapshot_leases::build(etcd)?,
        pod_disruption_budget: pod_disruption_budget::build(etcd, running)?,
        client_service: client_service::build(etcd)?,
        peer_service: peer_service::build(etcd)?,
        statefulset: statefulset::build(etcd, ctx, running, Some(&checksum))?,
        config_map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use quorate_api::StoreSpec;

    /// Every component of `etcd-main` with `replicas` members and backups to a `Local` store.
    fn with_backups(replicas: i32) -> DesiredComponents {
        let mut e = etcd("etcd-main", replicas);
        e.spec.backup.store = Some(StoreSpec {
            provider: Some("Local".into()),
            container: Some("bucket".into()),
            prefix: "p".into(),
            ..StoreSpec::default()
        });
        desired_components(&e, &ComponentContext::new("q", "a")).unwrap()
    }

    #[test]
    fn sync_order_is_druids() {
        let all = with_backups(2);
        let order: Vec<_> = all
            .in_sync_order()
            .iter()
            .map(|o| format!("{}/{}", o.kind(), o.name()))
            .collect();
        assert_eq!(
            order,
            [
                "ServiceAccount/etcd-main",
                "Role/druid.gardener.cloud:etcd:etcd-main",
                "RoleBinding/druid.gardener.cloud:etcd:etcd-main",
                "Lease/etcd-main-0",
                "Lease/etcd-main-1",
                "Lease/etcd-main-full-snap",
                "Lease/etcd-main-delta-snap",
                "PodDisruptionBudget/etcd-main",
                "Service/etcd-main-client",
                "Service/etcd-main-peer",
                "ConfigMap/etcd-main-config",
                "StatefulSet/etcd-main",
            ]
        );
    }

    #[test]
    fn each_component_has_its_own_sync_error_code() {
        let all = with_backups(1);
        let codes: Vec<_> = all
            .in_sync_order()
            .iter()
            .map(|o| format!("{} {}", o.name(), o.sync_error_code()))
            .collect();
        assert_eq!(
            codes,
            [
                "etcd-main ERR_SYNC_SERVICE_ACCOUNT",
                "druid.gardener.cloud:etcd:etcd-main ERR_SYNC_ROLE",
                "druid.gardener.cloud:etcd:etcd-main ERR_SYNC_ROLE_BINDING",
                "etcd-main-0 ERR_SYNC_MEMBER_LEASE",
                "etcd-main-full-snap ERR_SYNC_SNAPSHOT_LEASE",
                "etcd-main-delta-snap ERR_SYNC_SNAPSHOT_LEASE",
                "etcd-main ERR_SYNC_POD_DISRUPTION_BUDGET",
                "etcd-main-client ERR_SYNC_CLIENT_SERVICE",
                "etcd-main-peer ERR_SYNC_PEER_SERVICE",
                "etcd-main-config ERR_SYNC_CONFIGMAP",
                "etcd-main ERR_SYNC_STATEFULSET",
            ]
        );
    }

    #[test]
    fn every_object_is_owned_by_the_etcd_and_labelled() {
        let ctx = ComponentContext::new("q", "a");
        let all = desired_components(&etcd("etcd-main", 3), &ctx).unwrap();
        for object in all.in_sync_order() {
            let m = object.to_manifest().unwrap();
            let what = format!("{}/{}", object.kind(), object.name());
            assert_eq!(m["kind"], object.kind(), "{what}");
            assert_eq!(m["metadata"]["namespace"], "shoot", "{what}");
            let owner = &m["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "Etcd", "{what}");
            assert_eq!(owner["controller"], true, "{what}");
            let labels = &m["metadata"]["labels"];
            assert_eq!(
                labels["app.kubernetes.io/managed-by"], "etcd-druid",
                "{what}"
            );
            assert_eq!(labels["app.kubernetes.io/part-of"], "etcd-main", "{what}");
            assert!(labels["app.kubernetes.io/component"].is_string(), "{what}");
            assert!(labels["app.kubernetes.io/name"].is_string(), "{what}");
        }
    }

    #[test]
    fn statefulset_carries_the_size_independent_config_checksum() {
        let ctx = ComponentContext::new("q", "a");
        let e = etcd("etcd-main", 3);
        let all = desired_components(&e, &ctx).unwrap();
        let annotations = all
            .statefulset
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.clone())
            .unwrap();
        assert_eq!(
            annotations["checksum/etcd-configmap"],
            config_map::template_checksum(&e, &ctx).unwrap()
        );
    }
}
