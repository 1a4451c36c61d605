//! StatefulSet `<name>`: the member pods, each with its own data volume and a stable DNS name
//! through the peer Service. Pods start in parallel (the agents, not the StatefulSet, order
//! joins), and the pod template carries the ConfigMap checksum so a configuration change
//! rolls the pods.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use quorate_api::Etcd;
use quorate_api::annotations::CHECKSUM_ETCD_CONFIGMAP;
use quorate_api::defaults::DEFAULT_STORAGE_CAPACITY;
use quorate_api::names::{
    component, default_labels, peer_service_name, service_account_name, statefulset_name,
    volume_claim_template_name,
};

use crate::last_operation::ErrorCode;

use super::context::ComponentContext;
use super::error::ComponentError;
use super::member_container;
use super::meta::{EtcdIdentity, merged};
use super::volumes::{init_containers, pod_volumes};

/// The `lastErrors` code when the StatefulSet cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncStatefulSet;

/// The StatefulSet with `replicas` pods. `replicas` is the controller's choice, not always
/// `spec.replicas`: while a TLS change rolls out it keeps the current size. `config_checksum`
/// is the [`super::config_map::config_map_checksum`] of the ConfigMap the pods should run
/// with; `None` leaves the annotation off.
///
/// The selector, `serviceName`, `podManagementPolicy` and `volumeClaimTemplates` cannot change
/// on an existing StatefulSet; the controller sets them only on create.
pub fn build(
    etcd: &Etcd,
    ctx: &ComponentContext,
    replicas: i32,
    config_checksum: Option<&str>,
) -> Result<StatefulSet, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    let name = statefulset_name(&id.name);
    let metadata = id.object_meta(component::STATEFULSET, &name);
    let own_labels = metadata.labels.clone().unwrap_or_default();
    let volumes = pod_volumes(etcd, ctx);
    let mut annotations = etcd.spec.annotations.clone().unwrap_or_default();
    if let Some(sum) = config_checksum {
        annotations.insert(CHECKSUM_ETCD_CONFIGMAP.to_string(), sum.to_string());
    }
    let scheduling = etcd.spec.scheduling_constraints.as_ref();
    let init = init_containers(etcd, ctx);
    let pod = PodSpec {
        service_account_name: Some(service_account_name(&id.name)),
        security_context: Some(super::security::pod(etcd.spec.run_as_root())),
        affinity: scheduling.and_then(|s| s.affinity.clone()),
        topology_spread_constraints: scheduling.and_then(|s| s.topology_spread_constraints.clone()),
        priority_class_name: etcd
            .spec
            .priority_class_name
            .clone()
            .filter(|p| !p.is_empty()),
        init_containers: (!init.is_empty()).then_some(init),
        containers: vec![member_container::build(etcd, &id.name, ctx, volumes.mounts)],
        volumes: (!volumes.volumes.is_empty()).then_some(volumes.volumes),
        // Exactly what the agent's stop takes at most (last delta, etcd's stop, exit), not
        // the kubelet's default 30 s.
        termination_grace_period_seconds: Some(
            crate::agent_exit::termination_grace_seconds() as i64
        ),
        ..PodSpec::default()
    };
    Ok(StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(default_labels(&id.name)),
                ..LabelSelector::default()
            },
            service_name: Some(peer_service_name(&id.name)),
            pod_management_policy: Some("Parallel".to_string()),
            // quorate replaces the pods itself, one member at a time by etcd's health, the
            // leader last (`crate::pod_rollout`); the StatefulSet controller only recreates.
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_string()),
                ..StatefulSetUpdateStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(merged(&etcd.spec.labels, &own_labels)),
                    annotations: (!annotations.is_empty()).then_some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            volume_claim_templates: Some(vec![volume_claim_template(etcd)]),
            ..StatefulSetSpec::default()
        }),
        status: None,
    })
}

/// The StatefulSet `built` for `spec.replicas`, with `replicas` pods instead: the size is the
/// only thing [`build`] takes from its `replicas`, so a controller that holds a smaller size
/// (a TLS change rolls out at the current size) does not need to build the object again.
pub fn resized(built: &StatefulSet, replicas: i32) -> StatefulSet {
    let mut sts = built.clone();
    if let Some(spec) = sts.spec.as_mut() {
        spec.replicas = Some(replicas);
    }
    sts
}

/// The data volume of each member: `spec.storageCapacity` (16Gi when unset), read-write by one
/// node, of `spec.storageClass` when set.
fn volume_claim_template(etcd: &Etcd) -> PersistentVolumeClaim {
    let capacity = etcd
        .spec
        .storage_capacity
        .clone()
        .unwrap_or_else(|| Quantity(DEFAULT_STORAGE_CAPACITY.to_string()));
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(volume_claim_template_name(etcd)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_string(), capacity)])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: etcd.spec.storage_class.clone().filter(|c| !c.is_empty()),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use k8s_openapi::api::core::v1::{Affinity, TopologySpreadConstraint};
    use quorate_api::SchedulingConstraints;

    fn ctx() -> ComponentContext {
        ComponentContext::new("quorate:test", "alpine:test")
    }

    fn pod_spec(sts: &StatefulSet) -> &PodSpec {
        sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    #[test]
    fn shape_follows_druid() {
        let sts = build(&etcd("etcd-main", 3), &ctx(), 3, Some("abc")).unwrap();
        assert_eq!(sts.metadata.name.as_deref(), Some("etcd-main"));
        assert_eq!(
            sts.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"],
            "etcd-statefulset"
        );
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(spec.service_name.as_deref(), Some("etcd-main-peer"));
        assert_eq!(
            spec.selector.match_labels.as_ref().unwrap(),
            &default_labels("etcd-main")
        );
        let template = spec.template.metadata.as_ref().unwrap();
        assert_eq!(
            template.annotations.as_ref().unwrap()["checksum/etcd-configmap"],
            "abc"
        );
        let pod = pod_spec(&sts);
        assert_eq!(pod.service_account_name.as_deref(), Some("etcd-main"));
        assert_eq!(pod.termination_grace_period_seconds, Some(25));
        assert_eq!(pod.containers.len(), 1);
        assert!(pod.init_containers.is_none());
        let volumes: Vec<&str> = pod
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["tls"], "only the TLS directory the agent fills");
        let security = pod.security_context.as_ref().unwrap();
        assert_eq!(security.run_as_user, Some(65532));
        assert_eq!(security.run_as_non_root, Some(true));
        // Kubernetes' restricted profile: what the member writes is on its volumes.
        assert_eq!(
            security.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        let container = pod.containers[0].security_context.as_ref().unwrap();
        assert_eq!(container.read_only_root_filesystem, Some(true));
        assert_eq!(container.allow_privilege_escalation, Some(false));
        assert_eq!(
            container.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        let pvc = &spec.volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(pvc.metadata.name.as_deref(), Some("etcd-main"));
        let pvc_spec = pvc.spec.as_ref().unwrap();
        assert_eq!(
            pvc_spec.access_modes.as_deref(),
            Some(&["ReadWriteOnce".to_string()][..])
        );
        assert_eq!(
            pvc_spec
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["storage"],
            Quantity("16Gi".into())
        );
        assert_eq!(pvc_spec.storage_class_name, None);
    }

    #[test]
    fn resizing_equals_building_at_that_size() {
        let e = etcd("etcd-main", 3);
        let built = build(&e, &ctx(), 3, Some("abc")).unwrap();
        assert_eq!(
            resized(&built, 1),
            build(&e, &ctx(), 1, Some("abc")).unwrap()
        );
    }

    #[test]
    fn replicas_are_the_callers_choice() {
        let sts = build(&etcd("etcd-main", 3), &ctx(), 1, None).unwrap();
        assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(1));
        assert!(
            sts.spec
                .unwrap()
                .template
                .metadata
                .unwrap()
                .annotations
                .is_none(),
            "no checksum, no spec annotations"
        );
    }

    #[test]
    fn pod_labels_and_annotations_merge_the_spec() {
        let mut e = etcd("etcd-main", 3);
        e.spec.labels = BTreeMap::from([
            ("app".into(), "etcd".into()),
            ("app.kubernetes.io/component".into(), "mine".into()),
        ]);
        e.spec.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
        let sts = build(&e, &ctx(), 3, Some("sum")).unwrap();
        let meta = sts.spec.unwrap().template.metadata.unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels["app"], "etcd");
        // The managed labels win, so the selector and Services keep matching.
        assert_eq!(labels["app.kubernetes.io/component"], "etcd-statefulset");
        assert_eq!(labels["app.kubernetes.io/part-of"], "etcd-main");
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations["note"], "x");
        assert_eq!(annotations["checksum/etcd-configmap"], "sum");
    }

    #[test]
    fn scheduling_storage_and_root_come_from_the_spec() {
        let mut e = etcd("etcd-main", 3);
        e.spec.scheduling_constraints = Some(SchedulingConstraints {
            affinity: Some(Affinity::default()),
            topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "zone".into(),
                when_unsatisfiable: "DoNotSchedule".into(),
                ..TopologySpreadConstraint::default()
            }]),
        });
        e.spec.priority_class_name = Some("etcd-critical".into());
        e.spec.storage_class = Some("fast".into());
        e.spec.storage_capacity = Some(Quantity("25Gi".into()));
        e.spec.volume_claim_template = Some("main-etcd".into());
        e.spec.run_as_root = Some(true);
        let sts = build(&e, &ctx(), 3, None).unwrap();
        let pod = pod_spec(&sts);
        assert!(pod.affinity.is_some());
        assert_eq!(pod.topology_spread_constraints.as_ref().unwrap().len(), 1);
        assert_eq!(pod.priority_class_name.as_deref(), Some("etcd-critical"));
        assert_eq!(pod.security_context.as_ref().unwrap().run_as_user, Some(0));
        let mounts = pod.containers[0].volume_mounts.as_ref().unwrap();
        assert_eq!(mounts[0].name, "main-etcd");
        let pvc = &sts
            .spec
            .as_ref()
            .unwrap()
            .volume_claim_templates
            .as_ref()
            .unwrap()[0];
        assert_eq!(pvc.metadata.name.as_deref(), Some("main-etcd"));
        let pvc_spec = pvc.spec.as_ref().unwrap();
        assert_eq!(pvc_spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            pvc_spec
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["storage"],
            Quantity("25Gi".into())
        );
    }
}
