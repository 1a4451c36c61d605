//! What the controller's watch caches keep of each object: the objects as served, less what no
//! pass ever reads. Every cached object is trimmed as it arrives, before it enters its store,
//! so the caches hold only these slimmer copies.
//!
//! Dropped everywhere: `metadata.managedFields` (server-side apply's field owners, often more
//! than half of an object) and kubectl's `last-applied-configuration` annotation (a second
//! copy of the object as last applied). The objects quorate makes for an `Etcd` (StatefulSets,
//! Leases, Pods) also lose every label but the one naming their `Etcd` (Pods keep the
//! StatefulSet's revision label too), and Leases and Pods their owner references: nothing reads
//! them from a cache. (A StatefulSet keeps its owner reference: the controller maps its
//! changes to the `Etcd` by it.)
//! Pods keep only their metadata, their Ready and in-place resize conditions, the generation
//! their kubelet has seen, and their containers' names, readiness, restarts and waiting reason.
//! StatefulSets keep their metadata, status, replicas, immutable fields and the TLS Secret
//! volumes of the pod template (name and Secret only).
//! `Etcd` objects and Leases keep everything else: the spec flow reads the `Etcd` whole, and
//! the leases' holder, renewal, annotations and creation time.

use crate::spec_flow::statefulset::TLS_VOLUMES;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStatus, Pod, PodSpec, PodStatus, PodTemplateSpec, SecretVolumeSource,
    Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use quorate_api::Etcd;
use quorate_api::names::LABEL_PART_OF;

/// kubectl's copy of the object as last applied client-side.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops `managedFields` and the last-applied annotation.
pub fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// The metadata of an object quorate made for an `Etcd`: [`metadata`], and of the labels only
/// the `Etcd`'s name (which maps a lease's or pod's watch event to its `Etcd`) and those in
/// `keep`.
fn owned_metadata(meta: &mut ObjectMeta, keep: &[&str]) {
    metadata(meta);
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| key == LABEL_PART_OF || keep.contains(&key.as_str()));
    }
}

/// An `Etcd` as the controller caches it.
pub fn etcd(etcd: &mut Etcd) {
    metadata(&mut etcd.metadata);
}

/// A StatefulSet as the controller caches it: its metadata, status, and of its spec what the
/// passes read — replicas, the fields kept on apply because the API refuses to change them
/// (selector, service name, pod management policy, claim templates) and the pod template's
/// TLS Secret volumes (name and Secret); not the containers, the template's metadata or
/// anything else of the pod spec, most of the object. The rollout reads the StatefulSet from
/// the API, whole. Its owner reference stays: the controller maps a StatefulSet's change to
/// its `Etcd` by it (`owns_stream`).
pub fn statefulset(sts: &mut StatefulSet) {
    owned_metadata(&mut sts.metadata, &[]);
    if let Some(spec) = sts.spec.take() {
        let volumes: Vec<Volume> = (spec.template.spec.and_then(|pod| pod.volumes))
            .into_iter()
            .flatten()
            .filter(|v| TLS_VOLUMES.contains(&v.name.as_str()))
            .map(|v| Volume {
                name: v.name,
                secret: v.secret.map(|s| SecretVolumeSource {
                    secret_name: s.secret_name,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        let claim_templates = spec.volume_claim_templates.map(|claims| {
            claims
                .into_iter()
                .map(|mut claim| {
                    metadata(&mut claim.metadata);
                    claim.status = None;
                    claim
                })
                .collect()
        });
        sts.spec = Some(StatefulSetSpec {
            replicas: spec.replicas,
            selector: spec.selector,
            service_name: spec.service_name,
            pod_management_policy: spec.pod_management_policy,
            volume_claim_templates: claim_templates,
            template: PodTemplateSpec {
                metadata: None,
                spec: (!volumes.is_empty()).then(|| PodSpec {
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        });
    }
}

/// A Lease as the controller caches it.
pub fn lease(lease: &mut Lease) {
    owned_metadata(&mut lease.metadata, &[]);
    lease.metadata.owner_references = None;
}

/// A Pod as the controller caches it: its metadata, its Ready condition, and each
/// container's name, readiness, restart count and waiting reason (what the status flow and the
/// rolling update read); no spec, no other status.
pub fn pod(pod: &mut Pod) {
    owned_metadata(
        &mut pod.metadata,
        &[crate::spec_flow::rollout::REVISION_LABEL],
    );
    pod.metadata.owner_references = None;
    pod.spec = None;
    pod.status = pod.status.take().map(|status| PodStatus {
        // Pending: the pod waits for a node or for its containers (the status's `MemberStopped`).
        phase: status.phase,
        // The Ready condition: a rolling update goes on only while every member pod is ready;
        // the kubelet's resize conditions and the generation it has seen: an in-place resize's
        // progress starts a pass.
        conditions: status.conditions.map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == "Ready" || c.type_.starts_with("PodResize"))
                .collect()
        }),
        observed_generation: status.observed_generation,
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
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
            labels: Some(BTreeMap::from([
                (LABEL_PART_OF.to_string(), "etcd-main".to_string()),
                (
                    "app.kubernetes.io/name".to_string(),
                    "etcd-main".to_string(),
                ),
                ("controller-revision-hash".to_string(), "r1".to_string()),
            ])),
            owner_references: Some(vec![OwnerReference::default()]),
            ..Default::default()
        }
    }

    /// The labels an owned object keeps, by key.
    fn label_keys(meta: &ObjectMeta) -> Vec<&str> {
        meta.labels
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect()
    }

    #[test]
    fn owned_objects_keep_only_the_labels_a_pass_reads_and_no_owner() {
        let mut l = Lease {
            metadata: meta(),
            ..Default::default()
        };
        lease(&mut l);
        assert_eq!(label_keys(&l.metadata), [LABEL_PART_OF]);
        assert_eq!(l.metadata.owner_references, None);
        let mut p = Pod {
            metadata: meta(),
            ..Default::default()
        };
        pod(&mut p);
        assert_eq!(
            label_keys(&p.metadata),
            [LABEL_PART_OF, "controller-revision-hash"]
        );
        // An `Etcd`'s own labels are the user's, and go to its components: kept.
        let mut e = Etcd::new("etcd-main", Default::default());
        e.metadata = meta();
        etcd(&mut e);
        assert_eq!(e.metadata.labels.unwrap().len(), 3);
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
    fn a_statefulset_keeps_what_passes_read_and_loses_its_containers() {
        use k8s_openapi::api::apps::v1::StatefulSetStatus;
        use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
        let claim = PersistentVolumeClaim {
            metadata: meta(),
            ..Default::default()
        };
        let mut sts = StatefulSet {
            metadata: meta(),
            spec: Some(StatefulSetSpec {
                replicas: Some(3),
                selector: LabelSelector::default(),
                service_name: Some("etcd-main-peer".into()),
                pod_management_policy: Some("Parallel".into()),
                volume_claim_templates: Some(vec![claim]),
                min_ready_seconds: Some(5),
                template: PodTemplateSpec {
                    metadata: Some(meta()),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "etcd".into(),
                            ..Default::default()
                        }],
                        volumes: Some(vec![
                            Volume {
                                name: "etcd-peer-ca".into(),
                                secret: Some(SecretVolumeSource {
                                    secret_name: Some("ca".into()),
                                    default_mode: Some(0o640),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            },
                            Volume {
                                name: "etcd-config-file".into(),
                                ..Default::default()
                            },
                        ]),
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                ready_replicas: Some(2),
                ..Default::default()
            }),
        };
        statefulset(&mut sts);
        assert_eq!(sts.metadata.managed_fields, None);
        // The controller's `owns_stream` maps a StatefulSet's change to its `Etcd` by its owner
        // reference: without it, a pod getting ready started no pass (the end-to-end rolling
        // update took 2.2x as long, waiting for requeues).
        assert_eq!(
            sts.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        assert_eq!(label_keys(&sts.metadata), [LABEL_PART_OF]);
        assert_eq!(sts.status.unwrap().ready_replicas, Some(2));
        let spec = sts.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.service_name.as_deref(), Some("etcd-main-peer"));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(spec.min_ready_seconds, None);
        let claims = spec.volume_claim_templates.unwrap();
        assert_eq!(claims[0].metadata.managed_fields, None);
        assert_eq!(claims[0].metadata.name.as_deref(), Some("etcd-main-0"));
        assert_eq!(spec.template.metadata, None);
        let pod = spec.template.spec.unwrap();
        assert!(pod.containers.is_empty());
        let volumes = pod.volumes.unwrap();
        assert_eq!(volumes.len(), 1, "only the TLS Secret volume: {volumes:?}");
        assert_eq!(volumes[0].name, "etcd-peer-ca");
        let secret = volumes[0].secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("ca"));
        assert_eq!(secret.default_mode, None);
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
