//! `status.lastOperation` and `status.lastErrors`: what the controller last did and what went
//! wrong, with stable error codes so alerts can match on them.

use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use quorate_api::status::{LastError, LastOperation, LastOperationState, LastOperationType};

/// The kind of a spec reconcile: `Create` until the first success (no `observedGeneration`
/// yet), `Reconcile` after.
pub fn reconcile_type(observed_generation: Option<i64>) -> LastOperationType {
    match observed_generation {
        None => LastOperationType::Create,
        Some(_) => LastOperationType::Reconcile,
    }
}

/// A `lastOperation` for a spec reconcile in the given state.
pub fn reconcile_operation(
    observed_generation: Option<i64>,
    state: LastOperationState,
    description: impl Into<String>,
    run_id: impl Into<String>,
    now: Timestamp,
) -> LastOperation {
    operation(
        reconcile_type(observed_generation),
        state,
        description,
        run_id,
        now,
    )
}

/// A `lastOperation` for the deletion of the cluster.
pub fn delete_operation(
    state: LastOperationState,
    description: impl Into<String>,
    run_id: impl Into<String>,
    now: Timestamp,
) -> LastOperation {
    operation(LastOperationType::Delete, state, description, run_id, now)
}

fn operation(
    type_: LastOperationType,
    state: LastOperationState,
    description: impl Into<String>,
    run_id: impl Into<String>,
    now: Timestamp,
) -> LastOperation {
    LastOperation {
        type_,
        state,
        description: description.into(),
        run_id: run_id.into(),
        last_update_time: Time(now),
    }
}

/// Stable codes for `lastErrors`. Component codes follow druid's `ERR_<VERB>_<COMPONENT>`
/// pattern (`ERR_SYNC_STATEFULSET` and `ERR_SYNC_POD_DISRUPTION_BUDGET` are druid's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Not a failure: a component asked to try again later.
    RequeueAfter,
    /// The spec cannot be acted on as written.
    InvalidSpec,
    /// Reading the `Etcd` afresh failed.
    GetEtcd,
    /// Adding the finalizer failed.
    AddFinalizer,
    /// Removing the finalizer failed.
    RemoveFinalizer,
    /// Creating or updating the ServiceAccount failed.
    SyncServiceAccount,
    /// Creating or updating the Role failed.
    SyncRole,
    /// Creating or updating the RoleBinding failed.
    SyncRoleBinding,
    /// Creating the agents' token Secret failed.
    SyncAgentToken,
    /// Creating or updating the member Leases failed.
    SyncMemberLease,
    /// Creating or updating the snapshot Leases failed.
    SyncSnapshotLease,
    /// Creating or updating the PodDisruptionBudget failed.
    SyncPodDisruptionBudget,
    /// Creating or updating the client Service failed.
    SyncClientService,
    /// Creating or updating the peer Service failed.
    SyncPeerService,
    /// Creating or updating the ConfigMap failed.
    SyncConfigMap,
    /// Creating or updating the StatefulSet failed.
    SyncStatefulSet,
    /// Deleting the cluster's resources failed.
    DeleteResources,
    /// A membership change (add, promote, remove, move leader) failed.
    MembershipChange,
    /// Writing the status failed.
    UpdateStatus,
    /// A member's process (its agent) could not be started; local mode's counterpart of a pod
    /// that cannot be created, kept apart from `ERR_SYNC_STATEFULSET` because no StatefulSet
    /// is involved.
    StartMember,
}

impl ErrorCode {
    /// The code as written to `lastErrors[].code`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::RequeueAfter => "ERR_REQUEUE_AFTER",
            ErrorCode::InvalidSpec => "ERR_INVALID_SPEC",
            ErrorCode::GetEtcd => "ERR_GET_ETCD",
            ErrorCode::AddFinalizer => "ERR_ADD_FINALIZER",
            ErrorCode::RemoveFinalizer => "ERR_REMOVE_FINALIZER",
            ErrorCode::SyncServiceAccount => "ERR_SYNC_SERVICE_ACCOUNT",
            ErrorCode::SyncRole => "ERR_SYNC_ROLE",
            ErrorCode::SyncRoleBinding => "ERR_SYNC_ROLE_BINDING",
            ErrorCode::SyncAgentToken => "ERR_SYNC_AGENT_TOKEN",
            ErrorCode::SyncMemberLease => "ERR_SYNC_MEMBER_LEASE",
            ErrorCode::SyncSnapshotLease => "ERR_SYNC_SNAPSHOT_LEASE",
            ErrorCode::SyncPodDisruptionBudget => "ERR_SYNC_POD_DISRUPTION_BUDGET",
            ErrorCode::SyncClientService => "ERR_SYNC_CLIENT_SERVICE",
            ErrorCode::SyncPeerService => "ERR_SYNC_PEER_SERVICE",
            ErrorCode::SyncConfigMap => "ERR_SYNC_CONFIGMAP",
            ErrorCode::SyncStatefulSet => "ERR_SYNC_STATEFULSET",
            ErrorCode::DeleteResources => "ERR_DELETE_RESOURCES",
            ErrorCode::MembershipChange => "ERR_MEMBERSHIP_CHANGE",
            ErrorCode::UpdateStatus => "ERR_UPDATE_STATUS",
            ErrorCode::StartMember => "ERR_START_MEMBER",
        }
    }

    /// Every code, for documentation and uniqueness checks.
    pub const ALL: &[ErrorCode] = &[
        ErrorCode::RequeueAfter,
        ErrorCode::InvalidSpec,
        ErrorCode::GetEtcd,
        ErrorCode::AddFinalizer,
        ErrorCode::RemoveFinalizer,
        ErrorCode::SyncServiceAccount,
        ErrorCode::SyncRole,
        ErrorCode::SyncRoleBinding,
        ErrorCode::SyncAgentToken,
        ErrorCode::SyncMemberLease,
        ErrorCode::SyncSnapshotLease,
        ErrorCode::SyncPodDisruptionBudget,
        ErrorCode::SyncClientService,
        ErrorCode::SyncPeerService,
        ErrorCode::SyncConfigMap,
        ErrorCode::SyncStatefulSet,
        ErrorCode::DeleteResources,
        ErrorCode::MembershipChange,
        ErrorCode::UpdateStatus,
        ErrorCode::StartMember,
    ];
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `lastErrors` entry.
pub fn last_error(code: ErrorCode, description: impl Into<String>, now: Timestamp) -> LastError {
    LastError {
        code: code.as_str().to_string(),
        description: description.into(),
        observed_at: Time(now),
    }
}

/// The state a reconcile ends in: `Succeeded` without errors, `Requeue` when every error only
/// asks to try again later, `Error` otherwise.
pub fn outcome_state(errors: &[LastError]) -> LastOperationState {
    if errors.is_empty() {
        LastOperationState::Succeeded
    } else if errors
        .iter()
        .all(|e| e.code == ErrorCode::RequeueAfter.as_str())
    {
        LastOperationState::Requeue
    } else {
        LastOperationState::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn now() -> Timestamp {
        "2024-02-02T02:02:02Z".parse().unwrap()
    }

    #[test]
    fn first_reconcile_is_create_later_ones_reconcile() {
        assert_eq!(reconcile_type(None), LastOperationType::Create);
        assert_eq!(reconcile_type(Some(0)), LastOperationType::Reconcile);
        assert_eq!(reconcile_type(Some(7)), LastOperationType::Reconcile);
    }

    #[test]
    fn reconcile_operation_carries_everything() {
        let op = reconcile_operation(
            Some(3),
            LastOperationState::Processing,
            "reconciling",
            "run-1",
            now(),
        );
        assert_eq!(op.type_, LastOperationType::Reconcile);
        assert_eq!(op.state, LastOperationState::Processing);
        assert_eq!(op.description, "reconciling");
        assert_eq!(op.run_id, "run-1");
        assert_eq!(op.last_update_time, Time(now()));
        let create = reconcile_operation(None, LastOperationState::Succeeded, "", "r", now());
        assert_eq!(create.type_, LastOperationType::Create);
    }

    #[test]
    fn delete_operation_is_delete() {
        let op = delete_operation(LastOperationState::Error, "x", "r", now());
        assert_eq!(
            (op.type_, op.state),
            (LastOperationType::Delete, LastOperationState::Error)
        );
    }

    #[test]
    fn codes_are_stable_unique_and_prefixed() {
        assert_eq!(ErrorCode::SyncStatefulSet.as_str(), "ERR_SYNC_STATEFULSET");
        assert_eq!(ErrorCode::RequeueAfter.to_string(), "ERR_REQUEUE_AFTER");
        assert_eq!(
            ErrorCode::SyncPodDisruptionBudget.as_str(),
            "ERR_SYNC_POD_DISRUPTION_BUDGET"
        );
        let codes: HashSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes.len(), ErrorCode::ALL.len());
        for c in codes {
            assert!(c.starts_with("ERR_") && c == c.to_uppercase(), "{c}");
        }
    }

    #[test]
    fn last_error_records_code_and_time() {
        let e = last_error(
            ErrorCode::SyncConfigMap,
            "configmap etcd-config: conflict",
            now(),
        );
        assert_eq!(e.code, "ERR_SYNC_CONFIGMAP");
        assert_eq!(e.description, "configmap etcd-config: conflict");
        assert_eq!(e.observed_at, Time(now()));
    }

    #[test]
    fn outcome_distinguishes_requeue_from_error() {
        assert_eq!(outcome_state(&[]), LastOperationState::Succeeded);
        let requeue = last_error(ErrorCode::RequeueAfter, "waiting for leases", now());
        assert_eq!(
            outcome_state(std::slice::from_ref(&requeue)),
            LastOperationState::Requeue
        );
        let failed = last_error(ErrorCode::SyncStatefulSet, "boom", now());
        assert_eq!(outcome_state(&[requeue, failed]), LastOperationState::Error);
    }
}
