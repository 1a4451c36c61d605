//! The `status` of an `Etcd`, field for field as etcd-druid writes it, so that
//! `kubectl get etcd -o wide` and tools that read druid's status work unchanged.

use k8s_openapi::api::autoscaling::v1::CrossVersionObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of an etcd cluster; written by the controller (operator or local runtime).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdStatus {
    /// Generation of the spec last reconciled successfully; absent until the first success,
    /// which is how a brand-new cluster is recognised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The StatefulSet (or local member set) that runs the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<CrossVersionObjectReference>,
    /// Health conditions, sorted by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Members whose pods/processes exist at the current revision.
    #[serde(default)]
    pub current_replicas: i32,
    /// Same value as `currentReplicas`: the scale subresource reads it.
    #[serde(default)]
    pub replicas: i32,
    /// Members whose etcd is ready to serve.
    #[serde(default)]
    pub ready_replicas: i32,
    /// True when every expected member runs the desired configuration and is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Deprecated in druid; kept for compatibility.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Errors of the last reconcile, each with a stable code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<LastError>,
    /// The last operation the controller performed on this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// Per-member health derived from the member leases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<EtcdMemberStatus>,
    /// Declared by druid, never written by it; kept for compatibility.
    #[serde(
        default,
        rename = "peerUrlTLSEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub peer_url_tls_enabled: Option<bool>,
    /// Label selector in string form, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

/// A condition as druid writes it (with `lastUpdateTime`, unlike `metav1.Condition`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `AllMembersReady`, `BackupReady`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// When `status` last changed.
    pub last_transition_time: Time,
    /// When the condition was last computed.
    pub last_update_time: Time,
    /// Machine-readable reason in CamelCase.
    pub reason: String,
    /// What a person should know.
    pub message: String,
}

/// Status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known (yet).
    Unknown,
    /// Deprecated druid value, accepted when read.
    Progressing,
    /// Deprecated druid value, accepted when read.
    ConditionCheckError,
}

impl ConditionStatus {
    /// The string kubectl shows.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
            ConditionStatus::Progressing => "Progressing",
            ConditionStatus::ConditionCheckError => "ConditionCheckError",
        }
    }
}

/// One error of the last reconcile, with a stable code for alerting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Stable code, e.g. `ERR_SYNC_STATEFULSET`.
    pub code: String,
    /// What failed and what to do.
    pub description: String,
    /// When the error was seen.
    pub observed_at: Time,
}

/// The last operation performed on the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// `Create`, `Reconcile` or `Delete`.
    #[serde(rename = "type")]
    pub type_: LastOperationType,
    /// `Processing`, `Succeeded`, `Error` or `Requeue`.
    pub state: LastOperationState,
    /// What happened, in words.
    pub description: String,
    /// Identifier of the reconcile run, to correlate with logs.
    #[serde(rename = "runID")]
    pub run_id: String,
    /// When this was last updated.
    pub last_update_time: Time,
}

/// Kind of operation in `lastOperation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LastOperationType {
    /// First reconcile of a new cluster.
    Create,
    /// Any later spec reconcile.
    Reconcile,
    /// Deletion of the cluster.
    Delete,
}

/// Outcome of the operation in `lastOperation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LastOperationState {
    /// Under way.
    Processing,
    /// Done.
    Succeeded,
    /// Failed; see `lastErrors`.
    Error,
    /// Waiting for something; will be retried.
    Requeue,
}

/// Health of one member, derived from its member lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMemberStatus {
    /// Member name (= member lease name).
    pub name: String,
    /// etcd member ID in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `Leader` or `Member`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<EtcdRole>,
    /// `Ready`, `NotReady` or `Unknown`.
    pub status: EtcdMemberConditionStatus,
    /// Why the member has this status.
    pub reason: String,
    /// When `status` last changed.
    pub last_transition_time: Time,
    /// The etcd server version the member runs, as its agent last published it (quorate's
    /// addition, e.g. `3.5.30`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
}

/// Raft role of a member as recorded in its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EtcdRole {
    /// The raft leader.
    Leader,
    /// A follower (or learner).
    Member,
}

/// Health of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EtcdMemberConditionStatus {
    /// Lease renewed recently.
    Ready,
    /// Lease stale for too long, or its process/pod is not ready.
    NotReady,
    /// Lease stale, but not yet long enough to call the member down.
    Unknown,
}

impl EtcdMemberConditionStatus {
    /// The string kubectl shows.
    pub fn as_str(self) -> &'static str {
        match self {
            EtcdMemberConditionStatus::Ready => "Ready",
            EtcdMemberConditionStatus::NotReady => "NotReady",
            EtcdMemberConditionStatus::Unknown => "Unknown",
        }
    }
}
