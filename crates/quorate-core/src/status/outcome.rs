//! `lastOperation`, `lastErrors` and `observedGeneration` from what the pass did.

use quorate_api::status::{LastError, LastOperation, LastOperationState};

use super::{ObservedCluster, PassOutcome};
use crate::last_operation::{ErrorCode, last_error, reconcile_operation};

/// The operation fields of the new status.
pub(super) struct Operation {
    pub(super) last_operation: Option<LastOperation>,
    pub(super) last_errors: Vec<LastError>,
    pub(super) observed_generation: Option<i64>,
}

/// The operation fields for `o`, given whether the cluster is `ready` and how many members
/// are. An unchanged operation keeps its time and a persisting error the time it was first
/// seen, so an unchanged cluster yields an equal status and no write.
pub(super) fn operation(o: &ObservedCluster<'_>, ready: bool, ready_replicas: i32) -> Operation {
    let previous = o.previous;
    let replicas = o.etcd.spec.replicas;
    let succeeded = || {
        (
            Some(LastOperationState::Succeeded),
            "every component is as the spec asks".to_string(),
            Vec::new(),
        )
    };
    let (state, description, errors) = match o.outcome {
        PassOutcome::Succeeded if ready || o.pass_waits_for_members => succeeded(),
        PassOutcome::Succeeded => (
            Some(LastOperationState::Processing),
            format!("{ready_replicas} of {replicas} members ready"),
            Vec::new(),
        ),
        PassOutcome::Requeue(why) => (
            Some(LastOperationState::Requeue),
            why.clone(),
            vec![last_error(ErrorCode::RequeueAfter, why.clone(), o.now)],
        ),
        PassOutcome::Failed(failures) => (
            Some(LastOperationState::Error),
            failures
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            failures
                .iter()
                .map(|(code, m)| last_error(*code, m.clone(), o.now))
                .collect(),
        ),
        PassOutcome::Suspended | PassOutcome::NotRun => (None, String::new(), Vec::new()),
    };
    let last_operation = match state {
        None => previous.last_operation.clone(),
        Some(state) => match &previous.last_operation {
            Some(op)
                if op.state == state && op.description == description && op.run_id == o.run_id =>
            {
                Some(op.clone())
            }
            _ => Some(reconcile_operation(
                previous.observed_generation,
                state,
                description,
                o.run_id,
                o.now,
            )),
        },
    };
    let last_errors = match o.outcome {
        PassOutcome::Suspended | PassOutcome::NotRun => previous.last_errors.clone(),
        _ => keep_observed_times(&previous.last_errors, errors),
    };
    let observed_generation = match o.outcome {
        PassOutcome::Succeeded => o.etcd.metadata.generation,
        _ => previous.observed_generation,
    };
    Operation {
        last_operation,
        last_errors,
        observed_generation,
    }
}

/// The same error seen again keeps the time it was first observed, so a persisting error does
/// not rewrite the status every pass.
fn keep_observed_times(previous: &[LastError], errors: Vec<LastError>) -> Vec<LastError> {
    errors
        .into_iter()
        .map(|e| {
            previous
                .iter()
                .find(|p| p.code == e.code && p.description == e.description)
                .cloned()
                .unwrap_or(e)
        })
        .collect()
}
