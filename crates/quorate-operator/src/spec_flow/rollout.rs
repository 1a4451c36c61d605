//! The rollout step: the StatefulSet is `OnDelete`, so a changed pod template reaches the pods
//! only as quorate deletes them, one per pass, in the order core's `pod_rollout` decides from
//! the pods and the member leases (etcd's health as the agents report it). The StatefulSet
//! and the pods are read from the API, not the caches (the StatefulSet as this pass's apply
//! returned it, or a GET): a cache that has not seen the template just applied, or a deletion
//! just made, would let a second pod go.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use quorate_api::names::member_lease_names;
use quorate_api::status::EtcdRole;
use quorate_coord::kube::lease_map::member_lease;
use quorate_core::pod_rollout::{MemberPod, RolloutStep, next_step};

use super::in_place;
use crate::context::Context;
use crate::error::Error;
use crate::status::PassOutcome;
use crate::validated::ValidatedEtcd;

/// Label the StatefulSet controller puts on each pod: the revision it was created from.
pub(crate) const REVISION_LABEL: &str = "controller-revision-hash";

/// Replaces the next outdated member pod, or says why not. `stored` is the StatefulSet as
/// this pass's apply returned it (read from the API server then, so no GET is needed); without
/// it the StatefulSet is read afresh.
pub async fn sync(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    stored: Option<StatefulSet>,
) -> Result<PassOutcome, Error> {
    let sts = match stored {
        Some(sts) => sts,
        None => {
            let statefulsets: Api<StatefulSet> =
                Api::namespaced(ctx.client.clone(), etcd.namespace());
            let read = statefulsets
                .get_opt(etcd.name())
                .await
                .map_err(Error::kube(
                    "get",
                    "StatefulSet",
                    etcd.namespace(),
                    etcd.name(),
                ))?;
            let Some(sts) = read else {
                return Ok(PassOutcome::Succeeded);
            };
            sts
        }
    };
    let status = sts.status.as_ref();
    match status.and_then(|s| s.observed_generation) {
        // A new StatefulSet: its pods are created from the current template.
        None => return Ok(PassOutcome::Succeeded),
        Some(seen) if Some(seen) != sts.metadata.generation => {
            return Ok(PassOutcome::Requeue(
                "the StatefulSet controller has not seen the new pod template yet".into(),
            ));
        }
        Some(_) => {}
    }
    let Some(revision) = status.and_then(|s| s.update_revision.clone()) else {
        return Ok(PassOutcome::Succeeded);
    };
    let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let (pods, objects): (Vec<MemberPod>, Vec<Pod>) = member_pods(etcd, ctx, &sts, &revision)
        .await?
        .into_iter()
        .unzip();
    match next_step(&pods, usize::try_from(replicas).unwrap_or(0)) {
        RolloutStep::Complete => Ok(PassOutcome::Succeeded),
        RolloutStep::Wait(why) => Ok(PassOutcome::Requeue(format!("rolling update: {why}"))),
        RolloutStep::Stopped { pod, why } => {
            announce(
                etcd,
                ctx,
                EventType::Warning,
                "RolloutStopped",
                &why,
                &pod,
                None,
            )
            .await;
            Err(Error::RolloutStopped { pod, why })
        }
        RolloutStep::Replace { pod, why } => {
            let object = objects
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(pod.as_str()));
            let uid = object.and_then(|p| p.metadata.uid.clone());
            let mut why = why;
            let mut resized = None;
            if let Some(object) = object {
                match in_place::sync(etcd, ctx, object, &revision).await? {
                    in_place::Outcome::NotPossible(None) => {}
                    in_place::Outcome::NotPossible(Some(reason)) => {
                        why = format!("{why}; not in place: {reason}")
                    }
                    in_place::Outcome::Progress(note) => {
                        return Ok(PassOutcome::Requeue(format!("rolling update: {note}")));
                    }
                    in_place::Outcome::Done(note) => resized = Some(note),
                }
            }
            let note = match resized {
                Some(note) => note,
                None => {
                    replace(etcd, ctx, &pod, uid.clone()).await?;
                    format!("replacing {pod} with the new pod template: {why}")
                }
            };
            announce(
                etcd,
                ctx,
                EventType::Normal,
                "RollingUpdate",
                &note,
                &pod,
                uid,
            )
            .await;
            Ok(PassOutcome::Requeue(format!("rolling update: {note}")))
        }
    }
}

/// The member pods of ordinals `0..replicas` that exist, as the rollout sees them.
async fn member_pods(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    sts: &StatefulSet,
    revision: &str,
) -> Result<Vec<(MemberPod, Pod)>, Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), etcd.namespace());
    let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let mut pods = Vec::new();
    for name in member_lease_names(etcd.etcd())
        .into_iter()
        .take(usize::try_from(replicas).unwrap_or(0))
    {
        let pod =
            api.get_opt(&name)
                .await
                .map_err(Error::kube("get", "Pod", etcd.namespace(), &name))?;
        pods.extend(pod.map(|pod| (name, pod)));
    }
    Ok(pods
        .into_iter()
        .map(|(name, pod)| {
            let lease = ctx
                .caches
                .lease(etcd.namespace(), &name)
                .map(|l| member_lease(&l));
            let identity = lease.as_ref().and_then(|l| l.holder()).and_then(Result::ok);
            let waiting = lease.as_ref().and_then(|l| {
                l.annotations
                    .get(quorate_core::membership::data_state::WAITING_ANNOTATION)
                    .cloned()
            });
            let member = MemberPod {
                updated: pod.labels().get(REVISION_LABEL).map(String::as_str) == Some(revision),
                ready: pod_ready(&pod),
                terminating: pod.metadata.deletion_timestamp.is_some(),
                leader: identity.is_some_and(|i| i.role == EtcdRole::Leader),
                failure: failure(&pod, waiting),
                name,
            };
            (member, pod)
        })
        .collect())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Positive evidence that the pod failed since it started: a container restarted or waits in
/// a crash loop. The member's own word (its lease's waiting message) is added when there is.
fn failure(pod: &Pod, waiting: Option<String>) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let failed = statuses.iter().find_map(|c| {
        let crash = c
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone())
            .filter(|r| r == "CrashLoopBackOff" || r.ends_with("Error"));
        match (crash, c.restart_count) {
            (Some(reason), _) => Some(format!("container {} is in {reason}", c.name)),
            (None, n) if n > 0 => Some(format!("container {} restarted {n} time(s)", c.name)),
            _ => None,
        }
    })?;
    Some(match waiting {
        Some(w) => format!("{failed}; its member says: {w}"),
        None => failed,
    })
}

/// Deletes `pod`, only the one the decision saw (its uid), so a pod already recreated in the
/// meantime is left alone.
async fn replace(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    pod: &str,
    uid: Option<String>,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), etcd.namespace());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(pod, &params).await {
        Ok(_) => Ok(()),
        // Gone or already replaced: the next pass sees the new pod.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(Error::kube("delete", "Pod", etcd.namespace(), pod)(e)),
    }
}

/// An event on the `Etcd` about member pod `pod`, which it names as the related object (so
/// each pod's event stands on its own instead of being folded into the first one's series).
async fn announce(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    type_: EventType,
    reason: &str,
    note: &str,
    pod: &str,
    uid: Option<String>,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "RollingUpdate".to_string(),
        secondary: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.to_string()),
            namespace: Some(etcd.namespace().to_string()),
            uid,
            ..ObjectReference::default()
        }),
    };
    if let Err(e) = ctx
        .recorder
        .publish(&event, &etcd.etcd().object_ref(&()))
        .await
    {
        tracing::debug!("could not publish event {reason}: {e}");
    }
}
