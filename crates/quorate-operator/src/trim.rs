//! What the controller's watch caches keep of each object: the objects as served, less what no
//! pass ever reads. Every cached object is trimmed as it arrives, before it enters its store,
//! so the caches hold only these slimmer copies.
//!
//! Dropped everywhere: `metadata.managedFields` (server-side apply's field owners, often more
//! than half of an object) and kubectl's `last-applied-configuration` annotation (a second
//! copy of the object as last applied). Pods keep only their metadata, their Ready condition and
//! their containers' names, readiness, restarts and waiting reason. `Etcd` objects,
//! StatefulSets and Leases keep everything else: the spec flow reads the `Etcd` whole, the
//! StatefulSet's pod volumes, selector, claim templates and rollout status, and the leases'
//! holder, renewal, annotations and creation time.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use quorate_api::Etcd;

/// kubectl's copy of the object as last applied client-side.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops `managedFields` and the last-applied annotation.
pub fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// An `Etcd` as the controller caches it.
pub fn etcd(etcd: &mut Etcd) {
    metadata(&mut etcd.metadata);
}

/// A StatefulSet as the controller caches it.
pub fn statefulset(sts: &mut StatefulSet) {
    metadata(&mut sts.metadata);
}

/// A Lease as the controller caches it.
pub fn lease(lease: &mut Lease) {
    metadata(&mut lease.metadata);
}

/// A Pod as the controller caches it: its metadata, its Ready condition, and each
/// container's name, readiness, restart count and waiting reason (what the status flow and the
/// rolling update read); no spec, no other status.
pub fn pod(pod: &mut Pod) {
    metadata(&mut pod.metadata);
    pod.spec = None;
    pod.status = pod.status.take().map(|status| PodStatus {
        // Pending: the pod waits for a node or for its containers (the status's `MemberStopped`).
        phase: status.phase,
        // The Ready condition: a rolling update goes on only while every member pod is ready.
        conditions: status
            .conditions
            .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
        container_statuses: status.container_statuses.map(|statuses| {
            statuses
                .into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    ready: c.ready,
                    // A restart or a crash loop stops a rolling update at this member.
                    restart_count: c.restart_count,
                    state: c.state.map(|s| ContainerState {
                        waiting: s.waiting,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use std::collections::BTreeMap;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("etcd-main-0".into()),
            namespace: Some("ns".into()),
            annotations: Some(BTreeMap::from([
                (LAST_APPLIED_ANNOTATION.to_string(), "{}".to_string()),
                ("keep".to_string(), "me".to_string()),
            ])),
            managed_fields: Some(vec![ManagedFieldsEntry::default()]),
            ..Default::default()
        }
    }

    #[test]
    fn metadata_loses_field_owners_and_last_applied_only() {
        let mut m = meta();
        metadata(&mut m);
        assert_eq!(m.managed_fields, None);
        assert_eq!(
            m.annotations,
            Some(BTreeMap::from([("keep".to_string(), "me".to_string())]))
        );
        assert_eq!(m.name.as_deref(), Some("etcd-main-0"));
    }

    #[test]
    fn a_pod_keeps_its_phase_and_its_containers_readiness() {
        let mut p = Pod {
            metadata: meta(),
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "etcd".into(),
                    ready: true,
                    image: "quorate:0.1.0".into(),
                    restart_count: 2,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        pod(&mut p);
        assert_eq!(p.spec, None);
        let status = p.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let c = &status.container_statuses.unwrap()[0];
        assert_eq!((c.name.as_str(), c.ready), ("etcd", true));
        assert_eq!(c.image, "");
    }
}
