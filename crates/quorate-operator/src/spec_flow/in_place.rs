//! In-place resize in a rolling update (core `pod_resize`). When the pod's revision and the
//! StatefulSet's update revision differ only in the containers' resources, the member pod
//! chosen next is resized through `pods/resize` instead of being replaced, and once its kubelet
//! reports the resize done it gets the update revision's `controller-revision-hash` (what the
//! StatefulSet controller counts as updated). etcd keeps running: no election, no catch-up.
//! The pod is read from the API (the rollout's GET), never from the cache.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use quorate_core::pod_resize::{
    ContainerResources, ResizeStep, ResizeView, resize_patch, resize_step, resources_only_change,
};

use super::rollout::REVISION_LABEL;
use crate::context::Context;
use crate::error::Error;
use crate::validated::ValidatedEtcd;

/// Where an in-place resize of one pod stands.
pub(crate) enum Outcome {
    /// Replace the pod; with the reason when the change itself could have been in place.
    NotPossible(Option<String>),
    /// Requested, or the kubelet is at it: what, for the requeue.
    Progress(String),
    /// Resized and relabeled: the event's note.
    Done(String),
}

/// Takes the next step of resizing `pod` in place to revision `revision`.
pub(crate) async fn sync(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    pod: &Pod,
    revision: &str,
) -> Result<Outcome, Error> {
    let name = pod.name_any();
    let Some(current) = pod.labels().get(REVISION_LABEL) else {
        return Ok(Outcome::NotPossible(None));
    };
    let (Some(old), Some(new)) = (
        template(etcd, ctx, current).await?,
        template(etcd, ctx, revision).await?,
    ) else {
        return Ok(Outcome::NotPossible(None));
    };
    let Some(wanted) = resources_only_change(&old, &new) else {
        return Ok(Outcome::NotPossible(None));
    };
    let now = resources(pod);
    let view = ResizeView {
        requested: wanted.iter().all(|w| now.contains(w)),
        observed: kubelet_saw_spec(pod),
        pending: condition(pod, "PodResizePending"),
        in_progress: condition(pod, "PodResizeInProgress"),
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), etcd.namespace());
    match resize_step(&view) {
        ResizeStep::Request => {
            let patch = Patch::Strategic(resize_patch(&wanted, &now));
            match api
                .patch_subresource("resize", &name, &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => Ok(Outcome::Progress(format!(
                    "resizing {name} in place (only the containers' resources changed)"
                ))),
                // No resize subresource (Kubernetes < 1.33), or a resize the API server
                // refuses (one that would change the pod's QoS class): a new pod it is.
                Err(kube::Error::Api(e)) if matches!(e.code, 404 | 405 | 422) => {
                    Ok(Outcome::NotPossible(Some(format!(
                        "the API server refused to resize it in place: {}",
                        e.message
                    ))))
                }
                Err(e) => Err(Error::kube("resize", "Pod", etcd.namespace(), &name)(e)),
            }
        }
        ResizeStep::Wait(why) => Ok(Outcome::Progress(format!("{name}: {why}"))),
        ResizeStep::Replace(why) => Ok(Outcome::NotPossible(Some(why))),
        ResizeStep::Done => {
            let label = serde_json::json!({"metadata": {"labels": {REVISION_LABEL: revision}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(label))
                .await
                .map_err(Error::kube("patch", "Pod", etcd.namespace(), &name))?;
            Ok(Outcome::Done(format!(
                "resized {name} in place to the new pod template (only the containers' \
                 resources changed): etcd kept running"
            )))
        }
    }
}

/// Whether the pod's kubelet has seen its current spec (`status.observedGeneration` at least
/// `metadata.generation`): before that, no resize condition speaks of the latest resize.
pub(crate) fn kubelet_saw_spec(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .zip(pod.metadata.generation)
        .is_some_and(|(seen, generation)| seen >= generation)
}

/// The `data` of ControllerRevision `name` (`{"spec": {"template": …}}`), if it exists.
async fn template(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    name: &str,
) -> Result<Option<serde_json::Value>, Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), etcd.namespace());
    let revision = api.get_opt(name).await.map_err(Error::kube(
        "get",
        "ControllerRevision",
        etcd.namespace(),
        name,
    ))?;
    Ok(revision.and_then(|r| r.data).map(|data| data.0))
}

/// Every regular container's resources as the pod's spec has them now.
fn resources(pod: &Pod) -> Vec<ContainerResources> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| ContainerResources {
            name: c.name.clone(),
            resources: c
                .resources
                .as_ref()
                .and_then(|r| serde_json::to_value(r).ok())
                .unwrap_or_else(|| serde_json::json!({})),
        })
        .collect()
}

/// Condition `type_` of the pod when it is true: its reason and message.
fn condition(pod: &Pod, type_: &str) -> Option<(String, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}
