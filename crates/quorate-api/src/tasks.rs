//! etcd-druid's task resources (`druid.gardener.cloud/v1alpha1`), shaped like druid's so its
//! manifests apply unchanged: `EtcdOpsTask` (an operation on one `Etcd`, today an on-demand
//! snapshot) and `EtcdCopyBackupsTask` (copy a bucket's backups into another, run as a Job).
//! Defaults live in the schema (the API server fills them) and in the accessors here (for
//! objects written before the schema had them).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backup::StoreSpec;
use crate::status::{Condition, LastError};

/// Finalizer the operator keeps on an `EtcdOpsTask` until its cleanup ran (druid's).
pub const OPS_TASK_FINALIZER: &str = "druid.gardener.cloud/etcd-ops-task";
/// Finalizer on an `EtcdCopyBackupsTask` until its Job is gone (druid's, shared with `Etcd`).
pub const COPY_TASK_FINALIZER: &str = "druid.gardener.cloud/etcd-druid";
/// `ttlSecondsAfterFinished` when unset (druid's).
pub const DEFAULT_TTL_SECONDS_AFTER_FINISHED: i32 = 3600;
/// `timeoutSecondsFull` when unset (druid's).
pub const DEFAULT_TIMEOUT_SECONDS_FULL: i32 = 900;
/// `timeoutSecondsDelta` when unset (druid's).
pub const DEFAULT_TIMEOUT_SECONDS_DELTA: i32 = 60;
/// The smallest `timeoutSecondsFull` (druid's).
pub const MIN_TIMEOUT_SECONDS_FULL: i32 = 120;
/// The smallest `timeoutSecondsDelta` (druid's).
pub const MIN_TIMEOUT_SECONDS_DELTA: i32 = 10;

/// An operation on one `Etcd`, carried out once; the spec is immutable.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "druid.gardener.cloud",
    version = "v1alpha1",
    kind = "EtcdOpsTask",
    plural = "etcdopstasks",
    singular = "etcdopstask",
    shortname = "eot",
    namespaced,
    status = "EtcdOpsTaskStatus",
    derive = "PartialEq",
    doc = "EtcdOpsTask represents a task to perform operations on an Etcd cluster.",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Etcd", type_ = "string", json_path = ".spec.etcdName"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.lastOperation.type",
        priority = "1"
    ),
    printcolumn(
        name = "TTL",
        type_ = "integer",
        json_path = ".spec.ttlSecondsAfterFinished",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOpsTaskSpec {
    /// The operation; exactly one member is set.
    pub config: EtcdOpsTaskConfig,
    /// Seconds after the task finished (Succeeded, Failed or Rejected) until it is deleted;
    /// 3600 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = 3600))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// The `Etcd` (in the task's namespace) the operation acts on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_name: Option<String>,
}

/// The operation of an `EtcdOpsTask`: exactly one of its members.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct EtcdOpsTaskConfig {
    /// Take a full or delta snapshot now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand_snapshot: Option<OnDemandSnapshotConfig>,
}

/// An on-demand snapshot through the backup leader's agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnDemandSnapshotConfig {
    /// `full` or `delta`.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["full", "delta"]))]
    pub type_: String,
    /// Mark the full snapshot final (as a hibernation's); only with `type: full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_final: Option<bool>,
    /// How long a delta snapshot may take, in seconds; 60 when unset, at least 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10), extend("default" = 60))]
    pub timeout_seconds_delta: Option<i32>,
    /// How long a full snapshot may take, in seconds; 900 when unset, at least 120.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 120), extend("default" = 900))]
    pub timeout_seconds_full: Option<i32>,
}

impl OnDemandSnapshotConfig {
    /// Whether a full snapshot is asked for (anything else is a delta).
    pub fn is_full(&self) -> bool {
        self.type_ == "full"
    }

    /// How long the snapshot may take, in seconds, with druid's defaults.
    pub fn timeout_seconds(&self) -> i32 {
        if self.is_full() {
            self.timeout_seconds_full
                .unwrap_or(DEFAULT_TIMEOUT_SECONDS_FULL)
        } else {
            self.timeout_seconds_delta
                .unwrap_or(DEFAULT_TIMEOUT_SECONDS_DELTA)
        }
    }
}

impl EtcdOpsTaskSpec {
    /// `ttlSecondsAfterFinished` with druid's default.
    pub fn ttl_seconds(&self) -> i32 {
        self.ttl_seconds_after_finished
            .unwrap_or(DEFAULT_TTL_SECONDS_AFTER_FINISHED)
    }
}

/// What the operator last did with an `EtcdOpsTask`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOpsTaskStatus {
    /// Where the task is: Pending, InProgress, Succeeded, Failed or Rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// When `state` last changed (the TTL counts from the final one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// When the task went from Pending to InProgress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// The most recent errors, oldest first (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub last_errors: Vec<LastError>,
    /// The phase the task is in, and how it went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<TaskOperation>,
}

/// The state of a task (druid's `TaskState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaskState {
    /// Accepted by the operator, not admitted yet.
    Pending,
    /// Admitted; the operation runs.
    InProgress,
    /// The operation completed.
    Succeeded,
    /// The operation failed; `lastErrors` says why.
    Failed,
    /// Not admitted (the `Etcd` is missing, not ready, has no backups, or another task for it
    /// runs); `lastErrors` says why.
    Rejected,
}

impl TaskState {
    /// Whether the task is over (its TTL runs).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Rejected
        )
    }
}

/// A phase of a task and how it went (druid's `lastOperation` of tasks).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskOperation {
    /// `Admit`, `Execution` or `Cleanup`.
    #[serde(rename = "type")]
    pub type_: TaskPhase,
    /// `InProgress`, `Completed` or `Failed`.
    pub state: TaskPhaseState,
    /// What happened, in words.
    pub description: String,
    /// The operator run that wrote it, to correlate with logs.
    #[serde(rename = "runID")]
    pub run_id: String,
    /// When this was last written.
    pub last_update_time: Time,
}

/// A phase of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaskPhase {
    /// Checking that the task may run.
    Admit,
    /// Running the operation.
    Execution,
    /// Cleaning up before deletion.
    Cleanup,
}

/// How a phase went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaskPhaseState {
    /// Running.
    InProgress,
    /// Done.
    Completed,
    /// Failed; `lastErrors` says why.
    Failed,
}

/// Copies the backups of one store into another, once, as a Job.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "druid.gardener.cloud",
    version = "v1alpha1",
    kind = "EtcdCopyBackupsTask",
    plural = "etcdcopybackupstasks",
    singular = "etcdcopybackupstask",
    namespaced,
    status = "EtcdCopyBackupsTaskStatus",
    derive = "PartialEq",
    doc = "EtcdCopyBackupsTask is a task for copying etcd backups from a source to a target store.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdCopyBackupsTaskSpec {
    /// Labels put on the Job's pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// The store to copy from.
    pub source_store: StoreSpec,
    /// The store to copy into.
    pub target_store: StoreSpec,
    /// Copy only backups whose full snapshot is at most this many days old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backup_age: Option<u32>,
    /// Copy only the newest this many backups (a full snapshot with its deltas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backups: Option<u32>,
    /// First wait for a final full snapshot in the source (a hibernation's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_final_snapshot: Option<WaitForFinalSnapshotSpec>,
}

/// Waiting for the source's final full snapshot before copying.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitForFinalSnapshotSpec {
    /// Wait at all.
    pub enabled: bool,
    /// How long (Go duration); unset or 0 waits without limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub timeout: Option<String>,
}

/// How the copy went, from its Job's conditions (druid's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdCopyBackupsTaskStatus {
    /// `Succeeded` or `Failed`, taken from the Job's `Complete` and `Failed` conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The last error making or reading the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Name of the Job that runs an `EtcdCopyBackupsTask` (druid's `<task>-worker`).
pub fn copy_job_name(task_name: &str) -> String {
    format!("{task_name}-worker")
}
