//! The one observed-state input of the status computation. Each controller fills it from what
//! it can see — the operator from the StatefulSet, pods and leases, the local supervisor from
//! its processes and lease files — so both compute the same status by the same rules.

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v1::CrossVersionObjectReference;
use quorate_api::Etcd;
use quorate_api::status::EtcdStatus;

use crate::backup_ready::BackupLeases;
use crate::conditions::StatefulSetRollout;
use crate::last_operation::ErrorCode;
use crate::lease::MemberLease;

/// Everything the status of one `Etcd` is computed from, observed in one pass.
#[derive(Clone, Debug)]
pub struct ObservedCluster<'a> {
    /// The `Etcd` as read (spec, generation, name).
    pub etcd: &'a Etcd,
    /// The status computed last time: transition times and first-observed times are kept
    /// from it, and it is what survives a pass that did not run.
    pub previous: &'a EtcdStatus,
    /// Member leases as the agents last renewed them.
    pub leases: &'a [MemberLease],
    /// What the observer knows of each member's process or pod, by member lease name. A member
    /// missing here is [`MemberObservation::default`]: nothing known, not ready.
    pub members: BTreeMap<String, MemberObservation>,
    /// Replica counts and rollout facts of whatever runs the members.
    pub workload: Workload,
    /// Alarms etcd reports (e.g. NOSPACE): the cluster refuses writes while one is active.
    pub alarms: Vec<EtcdAlarm>,
    /// Voting members etcd lists that have never started (added, never run).
    pub unstarted: Vec<UnstartedMember>,
    /// The snapshot leases, when backups are configured.
    pub backup: Option<BackupLeases>,
    /// Names of etcd's voting members as its leader lists them; `None` when not observed.
    pub voters: Option<Vec<String>>,
    /// Where a requested hibernation stands.
    pub hibernation: Option<crate::hibernation::Hibernation>,
    /// The etcd version the members run and where a change of it stands (core
    /// `etcd_version::decide`); `None` when the observer did not decide it.
    pub etcd_version: Option<crate::etcd_version::VersionDecision>,
    /// What the controller's pass did.
    pub outcome: &'a PassOutcome,
    /// Whether the pass itself waits for the members (the operator's spec flow requeues until
    /// pods are ready, so its `Succeeded` means they are). When it does not (the local
    /// supervisor starts members and moves on), a succeeded pass whose members are not all
    /// ready yet is reported as `Processing`.
    pub pass_waits_for_members: bool,
    /// Identifies the controller process, for `lastOperation.runID`.
    pub run_id: &'a str,
    /// Now.
    pub now: Timestamp,
}

impl ObservedCluster<'_> {
    /// What is known of `member` (by lease name).
    pub fn member(&self, member: &str) -> MemberObservation {
        self.members.get(member).copied().unwrap_or_default()
    }
}

/// What the observer knows of one member's process or pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberObservation {
    /// Whether it runs, is known not to, or cannot be told.
    pub presence: Presence,
    /// Whether it reports ready (pod readiness, or the agent's `/healthz` locally).
    pub ready: bool,
}

/// Whether a member's process or pod exists, as far as the observer knows for certain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Presence {
    /// It runs.
    Running,
    /// It is known not to run (stopped, crashed, never started, pod gone). This wins over a
    /// fresh lease: a lease renewed seconds ago does not make a stopped member ready.
    Stopped,
    /// The observer cannot tell; leases decide, as in druid.
    #[default]
    Unknown,
}

/// Replica counts and rollout facts of what runs the members (the StatefulSet, or the local
/// supervisor's agents).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    /// Members created and running (`status.currentReplicas`).
    pub current_replicas: i32,
    /// Members reporting ready (`status.readyReplicas`).
    pub ready_replicas: i32,
    /// Whether every member runs the latest desired configuration; `None` when nothing runs
    /// the members (no StatefulSet).
    pub rollout: Option<StatefulSetRollout>,
    /// The object running the members, for `status.etcd`.
    pub reference: Option<CrossVersionObjectReference>,
}

/// The kind of an alarm etcd raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlarmKind {
    /// The backend quota is exhausted; etcd refuses writes.
    NoSpace,
    /// Members' data diverged.
    Corrupt,
}

impl AlarmKind {
    /// The reason a member with this alarm is NotReady in `status.members`.
    pub fn member_reason(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "NoSpaceAlarm",
            AlarmKind::Corrupt => "CorruptAlarm",
        }
    }
}

impl fmt::Display for AlarmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        })
    }
}

/// One active alarm, as etcd lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EtcdAlarm {
    /// The member that raised it.
    pub member_id: u64,
    /// What is wrong.
    pub kind: AlarmKind,
}

/// A voting member in etcd's member list that has never started (etcd lists it without a
/// name): it counts toward quorum but cannot vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnstartedMember {
    /// Its etcd member ID.
    pub id: u64,
    /// The peer URLs it was added with.
    pub peer_urls: Vec<String>,
}

/// What the controller's pass did, which decides `lastOperation`, `lastErrors` and
/// `observedGeneration`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassOutcome {
    /// Every component is as desired.
    Succeeded,
    /// A component must wait (e.g. for members to report peer TLS); try again soon.
    Requeue(String),
    /// Some components could not be synced, each failure with its own code.
    Failed(Vec<(ErrorCode, String)>),
    /// Spec reconciliation is suspended by annotation.
    Suspended,
    /// The spec flow did not run (up to date, waiting for the reconcile annotation, or no
    /// controller runs the cluster).
    NotRun,
}
