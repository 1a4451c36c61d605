//! The spec flow: make every component of an `Etcd` what its spec says. One pass is a list of
//! steps, each with the `lastErrors` code it fails with, stopping at the first failure:
//!
//! 1. the finalizer, before anything is made ([`crate::finalizer`]);
//! 2. dereference: read what the `Etcd` refers to, its ConfigMap and Secret
//!    ([`references`]);
//! 3. decide which member pods run ([`scale`]: members leaving in a scale-in keep their pods
//!    until etcd's leader says they left; a hibernation keeps them until the final snapshot),
//!    then build every desired component for them, once ([`desired_components`]);
//! 4. apply them in druid's order, each failing with its own code ([`components`]);
//! 5. the StatefulSet, one safe step per pass ([`statefulset`]);
//! 6. the rolling update: the StatefulSet is `OnDelete`, so quorate replaces one outdated
//!    member pod per pass, the leader last, only while every member is ready ([`rollout`]);
//! 7. after a scale-in, delete the volumes and leases of the members that left ([`scale`]).
//!
//! The `Etcd` was validated once, before the pass ([`ValidatedEtcd`]); the status flow runs
//! after it whatever the outcome.

pub(crate) mod agent_token;
mod components;
pub(crate) mod in_place;
pub(crate) mod references;
pub(crate) mod rollout;
pub mod scale;
pub(crate) mod statefulset;

use quorate_core::components::{desired_components, statefulset as statefulset_component};
use quorate_core::last_operation::ErrorCode;

use crate::context::Context;
use crate::error::StepError;
use crate::finalizer;
use crate::status::PassOutcome;
use crate::validated::ValidatedEtcd;
use quorate_core::etcd_version::VersionDecision;
use references::References;

/// Runs the spec flow once: its outcome, and the etcd version decision it configured the
/// members with (`None` when the pass failed before deciding), which the status reports as
/// `EtcdVersionCurrent` the way local mode does.
pub async fn sync(etcd: &ValidatedEtcd, ctx: &Context) -> (PassOutcome, Option<VersionDecision>) {
    let mut version = None;
    let outcome = match steps(etcd, ctx, &mut version).await {
        Ok(outcome) => outcome,
        Err(failed) => PassOutcome::Failed(vec![(failed.code, failed.error.to_string())]),
    };
    (outcome, version)
}

async fn steps(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    version: &mut Option<VersionDecision>,
) -> Result<PassOutcome, StepError> {
    // What the webhook checks, again: an `Etcd` created while the webhook was absent (or by
    // druid) must not reach the cluster. The status flow reports it (`SpecValid`).
    quorate_api::validate(etcd.etcd())
        .map_err(crate::error::Error::Invalid)
        .map_err(StepError::tag(ErrorCode::InvalidSpec))?;
    finalizer::ensure(etcd, ctx)
        .await
        .map_err(StepError::tag(ErrorCode::AddFinalizer))?;
    // The agents' token before anything that starts them.
    agent_token::ensure(etcd, ctx)
        .await
        .map_err(StepError::tag(ErrorCode::SyncAgentToken))?;
    // A failed read of what the ConfigMap is built from fails the ConfigMap's sync.
    let references = References::look_up(etcd, ctx)
        .await
        .map_err(StepError::tag(ErrorCode::SyncConfigMap))?;
    let (mut component_ctx, decision) = references
        .component_context(etcd.etcd(), &ctx.settings)
        .map_err(StepError::tag(ErrorCode::InvalidSpec))?;
    *version = Some(decision);
    let plan = scale::scale_plan(etcd.etcd(), ctx);
    component_ctx.running = Some(plan.running.clone());
    let desired = desired_components(etcd.etcd(), &component_ctx)
        .map_err(StepError::tag(ErrorCode::InvalidSpec))?;
    components::apply_in_order(etcd, ctx, &desired).await?;
    let (outcome, stored) =
        statefulset::sync(etcd, ctx, &desired.statefulset, plan.running.replicas)
            .await
            .map_err(StepError::tag(statefulset_component::SYNC_ERROR))?;
    let rolled = rollout::sync(etcd, ctx, stored)
        .await
        .map_err(StepError::tag(statefulset_component::SYNC_ERROR))?;
    let outcome = match outcome {
        PassOutcome::Succeeded => rolled,
        waiting => waiting,
    };
    let cleanup = scale::remove_departed(etcd.etcd(), ctx, &plan)
        .await
        .map_err(StepError::tag(statefulset_component::SYNC_ERROR))?;
    // A version change under way is not done when its step is configured: the next pass must
    // take the next step once the members' evidence is in, with or without a reconcile
    // annotation (which a Succeeded pass removes).
    let version_change = version.as_ref().and_then(|d| d.progress.clone());
    let waits = plan.waits_for().or(cleanup).or(version_change);
    Ok(match (&outcome, waits) {
        (PassOutcome::Succeeded, Some(why)) => PassOutcome::Requeue(why),
        _ => outcome,
    })
}
