//! The StatefulSet step, last of the spec flow: one safe step per pass
//! ([`next_statefulset_step`]): peer TLS first, at the current size, then growth. A step that
//! must wait asks for a requeue; nothing here waits.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::StatefulSet;
use quorate_api::names::member_lease_names;
use quorate_coord::kube::lease_map::member_lease;
use quorate_core::components::paths::volume;
use quorate_core::components::statefulset;
use quorate_core::statefulset_step::{
    ObservedStatefulSet, StatefulSetInputs, StatefulSetStep, next_statefulset_step,
};

use crate::apply::apply_statefulset;
use crate::context::Context;
use crate::error::Error;
use crate::status::PassOutcome;
use crate::validated::ValidatedEtcd;

/// Takes the next step towards `desired` (built for the `running` member pods); with the
/// StatefulSet as the apply returned it when this step applied it.
pub async fn sync(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    desired: &StatefulSet,
    running: i32,
) -> Result<(PassOutcome, Option<StatefulSet>), Error> {
    let existing = ctx.caches.statefulset(etcd.namespace(), etcd.name());
    let inputs = inputs(etcd, ctx, existing.as_deref(), desired, running);
    match next_statefulset_step(&inputs) {
        StatefulSetStep::Apply { replicas } => {
            let mut sts = statefulset::resized(desired, replicas);
            if let Some(existing) = existing.as_deref() {
                keep_immutable_fields(&mut sts, existing);
            }
            let stored = apply_statefulset(&ctx.client, &sts).await?;
            let outcome = if replicas < running {
                PassOutcome::Requeue(format!(
                    "peer TLS is being enabled at {replicas} member(s) before the cluster grows to {running}"
                ))
            } else {
                PassOutcome::Succeeded
            };
            Ok((outcome, Some(stored)))
        }
        StatefulSetStep::WaitForPeerTls { pending } => Ok((
            PassOutcome::Requeue(format!(
                "waiting for {} to report peer TLS {} on their member leases before growing",
                pending.join(", "),
                if inputs.desired_peer_tls {
                    "enabled"
                } else {
                    "disabled"
                }
            )),
            None,
        )),
        StatefulSetStep::WaitForReadyPods { ready, replicas } => Ok((
            PassOutcome::Requeue(format!(
                "the TLS mounts change, but only {ready} of {replicas} pods are ready; \
                 rolling them now could cost quorum"
            )),
            None,
        )),
    }
}

/// What the step decides from: the spec, the StatefulSet and the member leases as cached.
fn inputs(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    existing: Option<&StatefulSet>,
    desired: &StatefulSet,
    running: i32,
) -> StatefulSetInputs {
    let observed = existing.map(|sts| ObservedStatefulSet {
        replicas: sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
        ready_replicas: sts
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        tls_mounts_match: tls_mounts(sts) == tls_mounts(desired),
    });
    let member_tls = member_lease_names(etcd.etcd())
        .into_iter()
        .map(|lease| {
            let tls = ctx
                .caches
                .lease(etcd.namespace(), &lease)
                .map(|l| member_lease(&l))
                .and_then(|l| l.tls_enabled());
            (lease, tls)
        })
        .collect();
    StatefulSetInputs {
        desired_replicas: running,
        desired_peer_tls: etcd.etcd().peer_tls_enabled(),
        observed,
        member_tls,
    }
}

/// The pod template's TLS Secret volumes, whose Secrets the spec flow compares (and the only
/// volumes the StatefulSet cache keeps, `crate::trim`).
pub(crate) const TLS_VOLUMES: [&str; 5] = [
    volume::CLIENT_CA,
    volume::CLIENT_SERVER_TLS,
    volume::CLIENT_CLIENT_TLS,
    volume::PEER_CA,
    volume::PEER_SERVER_TLS,
];

/// The TLS Secret volumes of a StatefulSet's pod template: (volume name, Secret name).
fn tls_mounts(sts: &StatefulSet) -> BTreeSet<(String, String)> {
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, SecretVolumeSource, Volume};

    use super::*;

    fn with_volumes(volumes: &[(&str, Option<&str>)]) -> StatefulSet {
        let volumes = volumes
            .iter()
            .map(|(name, secret)| Volume {
                name: name.to_string(),
                secret: secret.map(|s| SecretVolumeSource {
                    secret_name: Some(s.to_string()),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            })
            .collect();
        StatefulSet {
            spec: Some(StatefulSetSpec {
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        volumes: Some(volumes),
                        ..PodSpec::default()
                    }),
                    ..PodTemplateSpec::default()
                },
                ..StatefulSetSpec::default()
            }),
            ..StatefulSet::default()
        }
    }

    #[test]
    fn only_tls_secret_volumes_count_as_tls_mounts() {
        let sts = with_volumes(&[
            (volume::PEER_CA, Some("ca")),
            (volume::PEER_SERVER_TLS, Some("peer")),
            ("etcd-config-file", None),
        ]);
        let mounts: Vec<_> = tls_mounts(&sts).into_iter().collect();
        assert_eq!(
            mounts,
            [
                (volume::PEER_CA.to_string(), "ca".to_string()),
                (volume::PEER_SERVER_TLS.to_string(), "peer".to_string()),
            ]
        );
        assert!(tls_mounts(&with_volumes(&[("etcd-config-file", None)])).is_empty());
    }

    #[test]
    fn the_fields_the_api_refuses_to_change_are_kept() {
        let mut existing = with_volumes(&[]);
        let spec = existing.spec.as_mut().unwrap();
        spec.service_name = Some("old-peer".into());
        spec.pod_management_policy = Some("OrderedReady".into());
        spec.replicas = Some(1);
        let mut desired = with_volumes(&[(volume::PEER_CA, Some("ca"))]);
        let spec = desired.spec.as_mut().unwrap();
        spec.service_name = Some("new-peer".into());
        spec.pod_management_policy = Some("Parallel".into());
        spec.replicas = Some(3);
        keep_immutable_fields(&mut desired, &existing);
        let spec = desired.spec.as_ref().unwrap();
        assert_eq!(spec.service_name.as_deref(), Some("old-peer"));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("OrderedReady"));
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(tls_mounts(&desired).len(), 1);
    }
}
