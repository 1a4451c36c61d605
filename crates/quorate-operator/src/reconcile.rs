//! One reconcile pass of an `Etcd`: the delete flow when it is being deleted; otherwise the
//! spec flow when the reconcile controls allow it, then — always — the status flow, which is
//! what keeps `kubectl get etcd` true even while the spec flow is suspended or waiting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use quorate_api::Etcd;
use quorate_api::annotations::{DRUID_OPERATION, GARDENER_OPERATION, has_reconcile_operation};
use quorate_api::names::{
    delta_snapshot_lease_name, full_snapshot_lease_name, member_lease_name, pod_name,
};
use quorate_coord::kube::lease_map::{member_lease, snapshot_lease};
use quorate_core::backup_ready::BackupLeases;
use quorate_core::etcd_version::VersionDecision;
use quorate_core::last_operation::ErrorCode;
use quorate_core::reconcile_control::{SpecDecision, spec_decision};
use quorate_core::status::{MemberObservation, Presence};

use crate::context::Context;
use crate::delete_flow::{self, DeleteProgress};
use crate::error::{Error, StepError};
use crate::spec_flow;
use crate::status::{PassOutcome, StatusInputs, compute_status, needs_write, status_patch};
use crate::validated::ValidatedEtcd;

/// How soon a deletion that is still removing components looks again if no watch event
/// (the StatefulSet's, a member pod's) started a pass before: a safety net, not the pace.
const DELETE_RECHECK: Duration = Duration::from_secs(30);

/// The controller's reconcile function.
pub async fn reconcile(cached: Arc<Etcd>, ctx: Arc<Context>) -> Result<Action, StepError> {
    let started = Instant::now();
    let cached = ValidatedEtcd::new(cached).map_err(StepError::tag(ErrorCode::InvalidSpec))?;
    let cluster = cached.cluster();
    let Some(etcd) = current(cached, &ctx)
        .await
        .map_err(StepError::tag(ErrorCode::GetEtcd))?
    else {
        // Deleted meanwhile: nothing to do.
        return Ok(Action::await_change());
    };
    if etcd.etcd().metadata.deletion_timestamp.is_some() {
        let progress = delete_flow::delete(&etcd, &ctx).await?;
        return Ok(match progress {
            DeleteProgress::Waiting(left) => {
                tracing::info!(%cluster, ?left, "waiting for components to be deleted");
                ctx.metrics.pass("deleting", started.elapsed());
                Action::requeue(DELETE_RECHECK)
            }
            DeleteProgress::Done => {
                tracing::info!(%cluster, "every component is deleted; finalizer removed");
                ctx.metrics.pass("deleted", started.elapsed());
                ctx.metrics.cluster_conditions(&cluster, None);
                if let Some(uid) = etcd.etcd().metadata.uid.as_deref() {
                    ctx.newer.forget(uid);
                }
                Action::await_change()
            }
        });
    }
    let (outcome, etcd_version) = match spec_decision(etcd.etcd(), ctx.settings.auto_reconcile) {
        SpecDecision::Run => spec_flow::sync(&etcd, &ctx).await,
        SpecDecision::Suspended => (PassOutcome::Suspended, None),
        SpecDecision::AwaitingAnnotation | SpecDecision::UpToDate => (PassOutcome::NotRun, None),
    };
    let (namespace, name) = (etcd.namespace(), etcd.name());
    let etcd = etcd.etcd();
    announce(etcd, &ctx, &outcome).await;
    let status = update_status(etcd, &ctx, &outcome, etcd_version.as_ref(), namespace, name)
        .await
        .map_err(StepError::tag(ErrorCode::UpdateStatus))?;
    announce_waits(etcd, &ctx, &status).await;
    crate::defrag_events::announce(etcd, &ctx, jiff::Timestamp::now()).await;
    if outcome == PassOutcome::Succeeded
        && has_reconcile_operation(etcd.metadata.annotations.as_ref())
    {
        // Part of recording the pass as complete, as the status write is.
        remove_operation_annotation(&ctx, namespace, name)
            .await
            .map_err(StepError::tag(ErrorCode::UpdateStatus))?;
    }
    let conditions = status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), format!("{:?}", c.status)))
        .collect();
    ctx.metrics.cluster_conditions(&cluster, Some(conditions));
    let (result, next) = match &outcome {
        PassOutcome::Succeeded => ("succeeded", ctx.settings.status_sync_period),
        PassOutcome::Requeue(_) => ("requeue", ctx.settings.wait_period),
        PassOutcome::Failed(failures) => {
            for (code, message) in failures {
                ctx.metrics.error(code.as_str());
                tracing::warn!(%cluster, code = code.as_str(), "{message}");
            }
            ("error", ctx.settings.wait_period)
        }
        PassOutcome::Suspended => ("suspended", ctx.settings.status_sync_period),
        PassOutcome::NotRun => ("not_run", ctx.settings.status_sync_period),
    };
    ctx.metrics.pass(result, started.elapsed());
    Ok(Action::requeue(next))
}

/// The `Etcd` this pass works from: the cached one, unless this process knows of a newer
/// version than the cache shows (it wrote one, see [`crate::context::NewerVersions`]); then
/// the object as the API server has it now. `None` when it is gone.
async fn current(cached: ValidatedEtcd, ctx: &Context) -> Result<Option<ValidatedEtcd>, Error> {
    let Some(uid) = cached.etcd().metadata.uid.clone() else {
        return Ok(Some(cached));
    };
    let cached_version = cached.etcd().metadata.resource_version.as_deref();
    match ctx.newer.get(&uid) {
        None => return Ok(Some(cached)),
        Some(newer) if Some(newer.as_str()) == cached_version => {
            ctx.newer.forget(&uid);
            return Ok(Some(cached));
        }
        Some(_) => {}
    }
    let (namespace, name) = (cached.namespace(), cached.name());
    let api: Api<Etcd> = Api::namespaced(ctx.client.clone(), namespace);
    let fresh = api
        .get_opt(name)
        .await
        .map_err(Error::kube("get", "Etcd", namespace, name))?;
    match fresh {
        Some(mut fresh) if fresh.metadata.uid.as_deref() == Some(uid.as_str()) => {
            let version = fresh.metadata.resource_version.as_deref();
            if version == cached_version {
                ctx.newer.forget(&uid);
            } else {
                ctx.newer.record(Some(&uid), version);
            }
            crate::trim::etcd(&mut fresh);
            Ok(Some(cached.with_version(Arc::new(fresh))))
        }
        _ => {
            ctx.newer.forget(&uid);
            Ok(None)
        }
    }
}

/// What the controller does when a pass returns an error (the status could not be written,
/// the deletion could not list or delete): log, count by the failed step's code, try again
/// after a short pause.
pub fn error_policy(etcd: Arc<Etcd>, error: &StepError, ctx: Arc<Context>) -> Action {
    let cluster = ValidatedEtcd::new(etcd).map_or_else(|e| e.to_string(), |e| e.cluster());
    tracing::warn!(%cluster, "reconcile failed: {}", error.error);
    ctx.metrics.error(error.code.as_str());
    ctx.metrics.pass("error", Duration::ZERO);
    Action::requeue(ctx.settings.wait_period)
}

/// Events a person looking at the `Etcd` should see: a Warning while the spec is suspended or
/// a sync fails, a Normal one when a spec change has been applied.
async fn announce(etcd: &Etcd, ctx: &Context, outcome: &PassOutcome) {
    let (type_, reason, note) = match outcome {
        PassOutcome::Suspended => (
            EventType::Warning,
            "SpecReconcileSuspended",
            format!(
                "spec reconciliation is suspended by the annotation {}; only the status is updated",
                quorate_api::annotations::SUSPEND_ETCD_SPEC_RECONCILE
            ),
        ),
        PassOutcome::Failed(failures) => (
            EventType::Warning,
            "ReconcileError",
            failures
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
        PassOutcome::Succeeded => {
            let observed = etcd.status.as_ref().and_then(|s| s.observed_generation);
            let asked = has_reconcile_operation(etcd.metadata.annotations.as_ref());
            if observed == etcd.metadata.generation && !asked {
                return;
            }
            (
                EventType::Normal,
                "ReconcileSucceeded",
                "every component is as the spec asks".to_string(),
            )
        }
        PassOutcome::Requeue(_) | PassOutcome::NotRun => return,
    };
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &etcd.object_ref(&())).await {
        tracing::debug!("could not publish event {reason}: {e}");
    }
}

/// Warning events for what members decide about data, each when its condition reaches the
/// state below or its message changes: members waiting for evidence (`MembersWaiting`: what is
/// missing, what overrides it), a quorum-loss recovery (`LastQuorumRecovery`: which member, at
/// which revision), a hibernation held back because the final snapshot failed, and one that
/// went ahead without a final snapshot, where `kubectl describe etcd` shows them.
async fn announce_waits(etcd: &Etcd, ctx: &Context, new: &quorate_api::status::EtcdStatus) {
    use quorate_api::status::ConditionStatus::{False, True};
    use quorate_core::conditions::{
        ETCD_VERSION_CURRENT, LAST_QUORUM_RECOVERY, MEMBERS_WAITING, SCALE_OPERATION_COMPLETE,
    };
    for (type_, status, only_reason, reason) in [
        (MEMBERS_WAITING, True, None, "MembersWaiting"),
        // Says which members lack the snapshot and the annotation that overrides the wait.
        (
            ETCD_VERSION_CURRENT,
            False,
            Some("VersionStepWaitsForSnapshot"),
            "EtcdVersionStepWaitsForSnapshot",
        ),
        (LAST_QUORUM_RECOVERY, True, None, "QuorumRecovered"),
        (
            SCALE_OPERATION_COMPLETE,
            False,
            Some("FinalSnapshotFailed"),
            "HibernationBlocked",
        ),
        (
            SCALE_OPERATION_COMPLETE,
            True,
            Some("HibernatedWithoutFinalSnapshot"),
            "HibernatedWithoutFinalSnapshot",
        ),
    ] {
        let message_of = |s: Option<&quorate_api::status::EtcdStatus>| {
            s?.conditions
                .iter()
                .find(|c| c.type_ == type_)
                .filter(|c| c.status == status)
                .filter(|c| only_reason.is_none_or(|r| c.reason == r))
                .map(|c| c.message.clone())
        };
        let Some(message) = message_of(Some(new)) else {
            continue;
        };
        if message_of(etcd.status.as_ref()).as_ref() == Some(&message) {
            continue;
        }
        // An event's note holds at most 1 kB; the condition keeps the whole text.
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_string(),
            note: Some(message.chars().take(1000).collect()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &etcd.object_ref(&())).await {
            tracing::debug!("could not publish event {reason}: {e}");
        }
    }
}

/// Computes the status from the caches and writes it when it changed.
async fn update_status(
    etcd: &Etcd,
    ctx: &Context,
    outcome: &PassOutcome,
    etcd_version: Option<&VersionDecision>,
    namespace: &str,
    name: &str,
) -> Result<quorate_api::status::EtcdStatus, Error> {
    let caches = &ctx.caches;
    let leases: Vec<_> = quorate_api::names::member_lease_names(etcd)
        .iter()
        .filter_map(|l| caches.lease(namespace, l))
        .map(|l| member_lease(&l))
        .collect();
    let backup = etcd.spec.backup.store.as_ref().map(|_| {
        let full = caches.lease(namespace, &full_snapshot_lease_name(name));
        BackupLeases {
            full_created: full
                .as_ref()
                .and_then(|l| l.metadata.creation_timestamp.as_ref())
                .map(|t| t.0),
            full: full.map(|l| snapshot_lease(&l)),
            delta: caches
                .lease(namespace, &delta_snapshot_lease_name(name))
                .map(|l| snapshot_lease(&l)),
        }
    });
    let members: BTreeMap<String, MemberObservation> = (0..etcd.spec.replicas.max(0) as u32)
        .map(|i| {
            let pod = caches.pod(namespace, &pod_name(name, i));
            let observed = MemberObservation {
                presence: pod.as_deref().map_or(Presence::Unknown, presence),
                ready: pod.is_some_and(|p| container_ready(&p)),
            };
            (member_lease_name(etcd, i), observed)
        })
        .collect();
    let statefulset = caches.statefulset(namespace, name);
    let now = jiff::Timestamp::now();
    let scale = crate::spec_flow::scale::scale_plan(etcd, ctx);
    let status = compute_status(StatusInputs {
        etcd,
        leases: &leases,
        backup,
        statefulset: statefulset.as_deref(),
        members: &members,
        scale: Some(&scale),
        outcome,
        etcd_version,
        run_id: &ctx.run_id,
        now,
    });
    if needs_write(etcd.status.as_ref(), &status, now, ctx.backlog.waiting()) {
        let api: Api<Etcd> = Api::namespaced(ctx.client.clone(), namespace);
        let patch = status_patch(etcd.status.as_ref(), &status);
        let written = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("update the status of", "Etcd", namespace, name))?;
        ctx.newer.record(
            written.metadata.uid.as_deref(),
            written.metadata.resource_version.as_deref(),
        );
    }
    Ok(status)
}

/// Whether the pod's etcd container is ready (druid reads the same for member health).
/// What a member's pod says for certain about its etcd: not running (`Stopped`) while the pod
/// waits to be scheduled or its etcd container is not running (waiting to start, or ended),
/// which a lease renewed moments before must not hide; otherwise the pod cannot tell (a
/// container the API server lists as running may be on a node that is gone), and the lease
/// rules decide.
fn presence(pod: &Pod) -> Presence {
    let Some(status) = pod.status.as_ref() else {
        return Presence::Unknown;
    };
    // The cached pod keeps only the phase and a container's `waiting` state (`trim::pod`).
    let etcd_waits = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == "etcd")
        .is_none_or(|c| c.state.as_ref().is_some_and(|s| s.waiting.is_some()));
    if status.phase.as_deref() == Some("Pending") && etcd_waits {
        Presence::Stopped
    } else {
        Presence::Unknown
    }
}

fn container_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == "etcd" && c.ready))
}

/// The reconcile the annotation asked for is done: remove it, as druid does.
async fn remove_operation_annotation(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<(), Error> {
    let patch = serde_json::json!({"metadata": {"annotations": {
        DRUID_OPERATION: null,
        GARDENER_OPERATION: null,
    }}});
    let api: Api<Etcd> = Api::namespaced(ctx.client.clone(), namespace);
    let written = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(
            "remove the operation annotation from",
            "Etcd",
            namespace,
            name,
        ))?;
    ctx.newer.record(
        written.metadata.uid.as_deref(),
        written.metadata.resource_version.as_deref(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod with `status`, as the operator's cache keeps it (`trim::pod`).
    fn pod(status: serde_json::Value) -> Pod {
        let mut pod: Pod = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "e-0"}, "status": status}),
        )
        .expect("a pod");
        crate::trim::pod(&mut pod);
        pod
    }

    #[test]
    fn a_pod_that_waits_for_a_node_or_for_etcd_to_start_says_its_member_is_stopped() {
        // Evicted by a drain, its replacement waits for the node that holds its volume.
        let unscheduled = pod(serde_json::json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}));
        assert_eq!(presence(&unscheduled), Presence::Stopped);
        let starting = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [
            {"name": "etcd", "ready": false, "restartCount": 0, "image": "q", "imageID": "",
             "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(presence(&starting), Presence::Stopped);
    }

    #[test]
    fn a_running_pod_leaves_the_judgement_to_the_leases() {
        // A node that is gone leaves its pods "Running" in the API server.
        let running = pod(
            serde_json::json!({"phase": "Running", "containerStatuses": [
            {"name": "etcd", "ready": false, "restartCount": 0, "image": "q", "imageID": "",
             "state": {"running": {}}}]}),
        );
        assert_eq!(presence(&running), Presence::Unknown);
        assert_eq!(presence(&pod(serde_json::Value::Null)), Presence::Unknown);
    }
}
