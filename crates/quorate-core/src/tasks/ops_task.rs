//! The life of an `EtcdOpsTask`, as druid runs it: finalizer → Pending → Admit (the `Etcd`
//! exists, has backups, is ready, and no earlier task for it is unfinished) → InProgress →
//! Execution (through the member agents) → Succeeded or Failed → deleted once
//! `ttlSecondsAfterFinished` has passed. One step per call; the caller writes what the step
//! says and calls again.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use quorate_api::LastError;
use quorate_api::tasks::{
    EtcdOpsTask, EtcdOpsTaskStatus, OPS_TASK_FINALIZER, TaskOperation, TaskPhase, TaskPhaseState,
    TaskState,
};

/// Most errors kept in `status.lastErrors` (the CRD's limit).
pub const MAX_LAST_ERRORS: usize = 10;
/// How soon an execution that could not reach an agent is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// Error codes in `status.lastErrors`, druid's where druid has one.
pub mod codes {
    /// The `Etcd` the task names does not exist.
    pub const GET_ETCD: &str = "ERR_GET_ETCD";
    /// Another unfinished task for the same `Etcd` came first.
    pub const DUPLICATE_TASK: &str = "ERR_DUPLICATE_TASK";
    /// The `Etcd` has no `spec.backup.store`.
    pub const BACKUP_NOT_ENABLED: &str = "ERR_BACKUP_NOT_ENABLED";
    /// The `Etcd` is not ready.
    pub const ETCD_NOT_READY: &str = "ERR_ETCD_NOT_READY";
    /// No agent could be reached (retried until the task's timeout).
    pub const EXECUTE_HTTP_REQUEST: &str = "ERR_EXECUTE_HTTP_REQUEST";
    /// The agent answered that the snapshot failed.
    pub const CREATE_SNAPSHOT: &str = "ERR_CREATE_SNAPSHOT";
    /// The task names no operation quorate knows.
    pub const UNSUPPORTED_TASK: &str = "ERR_UNSUPPORTED_TASK";
}

/// What the operator knows of the `Etcd` a task names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdFacts {
    /// It does not exist.
    Missing,
    /// It exists.
    Found {
        /// `status.ready`.
        ready: bool,
        /// It has a backup store.
        backups: bool,
    },
}

/// The snapshot to ask the agents for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// Full (else delta).
    pub full: bool,
    /// Marked final (full only).
    pub is_final: bool,
    /// How long the agent may take.
    pub timeout: Duration,
}

/// The one next thing to do with a task.
#[derive(Clone, Debug, PartialEq)]
pub enum OpsStep {
    /// Add [`OPS_TASK_FINALIZER`].
    AddFinalizer,
    /// Write this status, then decide again.
    WriteStatus(Box<EtcdOpsTaskStatus>),
    /// Ask the agents for this snapshot; report with [`after_execution`].
    Execute(SnapshotRequest),
    /// Finished; look again when the TTL has run out.
    WaitForTtl(Duration),
    /// Remove the finalizer and delete the task (its TTL ran out, or it is being deleted).
    Delete,
}

/// How asking the agents went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecutionOutcome {
    /// The snapshot is in the bucket (or, for a delta, there was nothing new); in words.
    Done(String),
    /// No agent answered (no route, no backup leader yet); worth trying again.
    Unreachable(String),
    /// An agent answered that the snapshot failed.
    Failed(String),
}

/// What one pass needs to decide.
pub struct OpsTaskView<'a> {
    /// The task as read.
    pub task: &'a EtcdOpsTask,
    /// The `Etcd` it names.
    pub etcd: EtcdFacts,
    /// An unfinished task for the same `Etcd` created before this one, by name.
    pub earlier_unfinished: Option<String>,
    /// Now.
    pub now: Timestamp,
    /// This operator run (`lastOperation.runID`).
    pub run_id: &'a str,
}

/// The next step for the task.
pub fn next_step(view: &OpsTaskView) -> OpsStep {
    let task = view.task;
    let status = task.status.clone().unwrap_or_default();
    if task.metadata.deletion_timestamp.is_some() {
        return OpsStep::Delete;
    }
    if let Some(state) = status.state
        && state.is_final()
    {
        let ttl = Duration::from_secs(task.spec.ttl_seconds().max(1) as u64);
        let since = status
            .last_transition_time
            .as_ref()
            .map_or(Duration::ZERO, |t| elapsed(t.0, view.now));
        return match ttl.checked_sub(since) {
            Some(left) if !left.is_zero() => OpsStep::WaitForTtl(left),
            _ => OpsStep::Delete,
        };
    }
    let has_finalizer = task
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == OPS_TASK_FINALIZER));
    if !has_finalizer {
        return OpsStep::AddFinalizer;
    }
    let mut next = status.clone();
    match status.state {
        None => {
            transition(&mut next, TaskState::Pending, view.now);
            operation(
                &mut next,
                TaskPhase::Admit,
                TaskPhaseState::InProgress,
                "admitting the task",
                view,
            );
        }
        Some(TaskState::Pending) => match admit(view) {
            Err((code, why)) => {
                transition(&mut next, TaskState::Rejected, view.now);
                operation(
                    &mut next,
                    TaskPhase::Admit,
                    TaskPhaseState::Failed,
                    &why,
                    view,
                );
                push_error(&mut next, code, &why, view.now);
            }
            Ok(()) => {
                transition(&mut next, TaskState::InProgress, view.now);
                next.started_at = Some(Time(view.now));
                operation(
                    &mut next,
                    TaskPhase::Execution,
                    TaskPhaseState::InProgress,
                    "asking the backup leader's agent for the snapshot",
                    view,
                );
            }
        },
        Some(_) => {
            let Some(snapshot) = &task.spec.config.on_demand_snapshot else {
                return fail(
                    next,
                    codes::UNSUPPORTED_TASK,
                    "the task names no operation quorate runs (spec.config.onDemandSnapshot is unset)",
                    view,
                );
            };
            if let Err((code, why)) = prerequisites(view.etcd) {
                return fail(next, code, &why, view);
            }
            return OpsStep::Execute(SnapshotRequest {
                full: snapshot.is_full(),
                is_final: snapshot.is_full() && snapshot.is_final == Some(true),
                timeout: Duration::from_secs(snapshot.timeout_seconds().max(1) as u64),
            });
        }
    }
    OpsStep::WriteStatus(Box::new(next))
}

/// The status after an execution, and how soon to look again (`None`: decide again at once).
pub fn after_execution(
    view: &OpsTaskView,
    outcome: ExecutionOutcome,
) -> (EtcdOpsTaskStatus, Option<Duration>) {
    let mut next = view.task.status.clone().unwrap_or_default();
    match outcome {
        ExecutionOutcome::Done(what) => {
            transition(&mut next, TaskState::Succeeded, view.now);
            operation(
                &mut next,
                TaskPhase::Execution,
                TaskPhaseState::Completed,
                &what,
                view,
            );
            (next, None)
        }
        ExecutionOutcome::Failed(why) => {
            mark_failed(&mut next, &why, view);
            push_error(&mut next, codes::CREATE_SNAPSHOT, &why, view.now);
            (next, None)
        }
        ExecutionOutcome::Unreachable(why) => {
            let limit = view
                .task
                .spec
                .config
                .on_demand_snapshot
                .as_ref()
                .map_or(0, |s| s.timeout_seconds().max(1) as u64);
            let running = next
                .started_at
                .as_ref()
                .map_or(Duration::ZERO, |t| elapsed(t.0, view.now));
            push_error(&mut next, codes::EXECUTE_HTTP_REQUEST, &why, view.now);
            if running >= Duration::from_secs(limit) {
                let why = format!(
                    "no agent answered within the task's timeout of {limit} s; last: {why}"
                );
                mark_failed(&mut next, &why, view);
                (next, None)
            } else {
                operation(
                    &mut next,
                    TaskPhase::Execution,
                    TaskPhaseState::InProgress,
                    &format!("retrying in {} s: {why}", RETRY_AFTER.as_secs()),
                    view,
                );
                (next, Some(RETRY_AFTER))
            }
        }
    }
}

fn admit(view: &OpsTaskView) -> Result<(), (&'static str, String)> {
    if let Some(other) = &view.earlier_unfinished {
        return Err((
            codes::DUPLICATE_TASK,
            format!(
                "the task {other} for the same Etcd is not finished yet; create this one again when it is"
            ),
        ));
    }
    prerequisites(view.etcd)
}

fn prerequisites(etcd: EtcdFacts) -> Result<(), (&'static str, String)> {
    match etcd {
        EtcdFacts::Missing => Err((
            codes::GET_ETCD,
            "the Etcd named by spec.etcdName does not exist in the task's namespace".to_string(),
        )),
        EtcdFacts::Found { backups: false, .. } => Err((
            codes::BACKUP_NOT_ENABLED,
            "the Etcd has no spec.backup.store, so there is nothing to take a snapshot into"
                .to_string(),
        )),
        EtcdFacts::Found { ready: false, .. } => Err((
            codes::ETCD_NOT_READY,
            "the Etcd is not ready (status.ready is not true); create the task again once it is"
                .to_string(),
        )),
        EtcdFacts::Found { .. } => Ok(()),
    }
}

fn fail(mut next: EtcdOpsTaskStatus, code: &str, why: &str, view: &OpsTaskView) -> OpsStep {
    mark_failed(&mut next, why, view);
    push_error(&mut next, code, why, view.now);
    OpsStep::WriteStatus(Box::new(next))
}

/// The task failed in execution, for `why`.
fn mark_failed(status: &mut EtcdOpsTaskStatus, why: &str, view: &OpsTaskView) {
    transition(status, TaskState::Failed, view.now);
    operation(
        status,
        TaskPhase::Execution,
        TaskPhaseState::Failed,
        why,
        view,
    );
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

fn transition(status: &mut EtcdOpsTaskStatus, state: TaskState, now: Timestamp) {
    if status.state != Some(state) {
        status.state = Some(state);
        status.last_transition_time = Some(Time(now));
    }
}

fn operation(
    status: &mut EtcdOpsTaskStatus,
    phase: TaskPhase,
    state: TaskPhaseState,
    description: &str,
    view: &OpsTaskView,
) {
    status.last_operation = Some(TaskOperation {
        type_: phase,
        state,
        description: description.to_string(),
        run_id: view.run_id.to_string(),
        last_update_time: Time(view.now),
    });
}

fn push_error(status: &mut EtcdOpsTaskStatus, code: &str, description: &str, now: Timestamp) {
    status.last_errors.push(LastError {
        code: code.to_string(),
        description: description.to_string(),
        observed_at: Time(now),
    });
    let excess = status.last_errors.len().saturating_sub(MAX_LAST_ERRORS);
    status.last_errors.drain(..excess);
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_api::tasks::{EtcdOpsTaskSpec, OnDemandSnapshotConfig};

    const READY: EtcdFacts = EtcdFacts::Found {
        ready: true,
        backups: true,
    };

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn task(type_: &str) -> EtcdOpsTask {
        let mut t = EtcdOpsTask::new(
            "snap",
            EtcdOpsTaskSpec {
                etcd_name: Some("etcd-main".into()),
                ttl_seconds_after_finished: Some(60),
                ..EtcdOpsTaskSpec::default()
            },
        );
        t.spec.config.on_demand_snapshot = Some(OnDemandSnapshotConfig {
            type_: type_.into(),
            is_final: Some(true),
            ..OnDemandSnapshotConfig::default()
        });
        t
    }

    fn view(task: &EtcdOpsTask, etcd: EtcdFacts, now: Timestamp) -> OpsTaskView<'_> {
        OpsTaskView {
            task,
            etcd,
            earlier_unfinished: None,
            now,
            run_id: "test",
        }
    }

    /// Applies steps until one is not a status write or finalizer, as the controller does.
    fn run(task: &mut EtcdOpsTask, etcd: EtcdFacts, now: Timestamp) -> OpsStep {
        for _ in 0..10 {
            match next_step(&view(task, etcd, now)) {
                OpsStep::AddFinalizer => {
                    task.metadata.finalizers = Some(vec![OPS_TASK_FINALIZER.to_string()])
                }
                OpsStep::WriteStatus(s) => task.status = Some(*s),
                other => return other,
            }
        }
        panic!("no settled step");
    }

    fn state(task: &EtcdOpsTask) -> Option<TaskState> {
        task.status.as_ref().and_then(|s| s.state)
    }

    #[test]
    fn a_full_snapshot_task_runs_succeeds_and_is_deleted_after_its_ttl() {
        let mut t = task("full");
        let step = run(&mut t, READY, at(0));
        assert_eq!(
            step,
            OpsStep::Execute(SnapshotRequest {
                full: true,
                is_final: true,
                timeout: Duration::from_secs(900)
            })
        );
        assert_eq!(state(&t), Some(TaskState::InProgress));
        assert_eq!(t.status.as_ref().unwrap().started_at, Some(Time(at(0))));
        let (status, again) =
            after_execution(&view(&t, READY, at(5)), ExecutionOutcome::Done("ok".into()));
        assert_eq!(again, None);
        t.status = Some(status);
        assert_eq!(state(&t), Some(TaskState::Succeeded));
        let op = t.status.as_ref().unwrap().last_operation.clone().unwrap();
        assert_eq!(
            (op.type_, op.state),
            (TaskPhase::Execution, TaskPhaseState::Completed)
        );
        assert_eq!(
            run(&mut t, READY, at(6)),
            OpsStep::WaitForTtl(Duration::from_secs(59))
        );
        assert_eq!(run(&mut t, READY, at(65)), OpsStep::Delete);
    }

    #[test]
    fn a_delta_is_never_final() {
        let mut t = task("delta");
        let OpsStep::Execute(request) = run(&mut t, READY, at(0)) else {
            panic!("not executed")
        };
        assert!(!request.full && !request.is_final);
        assert_eq!(request.timeout, Duration::from_secs(60));
    }

    #[test]
    fn admission_rejects_with_druids_codes() {
        let cases = [
            (EtcdFacts::Missing, codes::GET_ETCD),
            (
                EtcdFacts::Found {
                    ready: true,
                    backups: false,
                },
                codes::BACKUP_NOT_ENABLED,
            ),
            (
                EtcdFacts::Found {
                    ready: false,
                    backups: true,
                },
                codes::ETCD_NOT_READY,
            ),
        ];
        for (etcd, code) in cases {
            let mut t = task("full");
            let step = run(&mut t, etcd, at(0));
            assert_eq!(step, OpsStep::WaitForTtl(Duration::from_secs(60)), "{code}");
            assert_eq!(state(&t), Some(TaskState::Rejected));
            assert_eq!(t.status.as_ref().unwrap().last_errors[0].code, code);
        }
    }

    #[test]
    fn a_later_task_for_the_same_etcd_is_rejected_while_an_earlier_one_runs() {
        let mut t = task("full");
        t.metadata.finalizers = Some(vec![OPS_TASK_FINALIZER.to_string()]);
        let mut v = view(&t, READY, at(0));
        let OpsStep::WriteStatus(pending) = next_step(&v) else {
            panic!()
        };
        t.status = Some(*pending);
        v = view(&t, READY, at(0));
        v.earlier_unfinished = Some("first".into());
        let OpsStep::WriteStatus(rejected) = next_step(&v) else {
            panic!()
        };
        assert_eq!(rejected.state, Some(TaskState::Rejected));
        assert_eq!(rejected.last_errors[0].code, codes::DUPLICATE_TASK);
        assert!(rejected.last_errors[0].description.contains("first"));
    }

    #[test]
    fn an_unreachable_agent_is_retried_until_the_timeout_then_fails() {
        let mut t = task("delta");
        run(&mut t, READY, at(0));
        let (status, again) = after_execution(
            &view(&t, READY, at(30)),
            ExecutionOutcome::Unreachable("connection refused".into()),
        );
        assert_eq!(again, Some(RETRY_AFTER));
        assert_eq!(status.state, Some(TaskState::InProgress));
        assert_eq!(status.last_errors[0].code, codes::EXECUTE_HTTP_REQUEST);
        t.status = Some(status);
        let (status, again) = after_execution(
            &view(&t, READY, at(61)),
            ExecutionOutcome::Unreachable("connection refused".into()),
        );
        assert_eq!((again, status.state), (None, Some(TaskState::Failed)));
        assert_eq!(status.last_errors.len(), 2);
    }

    #[test]
    fn a_failed_snapshot_fails_the_task_and_a_lost_etcd_fails_execution() {
        let mut t = task("full");
        run(&mut t, READY, at(0));
        let (status, _) = after_execution(
            &view(&t, READY, at(1)),
            ExecutionOutcome::Failed("etcd: no leader".into()),
        );
        assert_eq!(status.state, Some(TaskState::Failed));
        assert_eq!(status.last_errors[0].code, codes::CREATE_SNAPSHOT);

        let mut t = task("full");
        run(&mut t, READY, at(0));
        let lost = EtcdFacts::Found {
            ready: false,
            backups: true,
        };
        assert_eq!(
            run(&mut t, lost, at(1)),
            OpsStep::WaitForTtl(Duration::from_secs(60))
        );
        assert_eq!(state(&t), Some(TaskState::Failed));
    }

    #[test]
    fn errors_are_bounded_and_deletion_wins() {
        let mut s = EtcdOpsTaskStatus::default();
        for i in 0..15 {
            push_error(&mut s, "X", &i.to_string(), at(i));
        }
        assert_eq!(s.last_errors.len(), MAX_LAST_ERRORS);
        assert_eq!(s.last_errors[0].description, "5");
        let mut t = task("full");
        t.metadata.deletion_timestamp = Some(Time(at(0)));
        assert_eq!(next_step(&view(&t, READY, at(0))), OpsStep::Delete);
    }
}
