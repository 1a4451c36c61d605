//! The `EtcdOpsTask` controller: reads the task, the `Etcd` it names and the other tasks of
//! the namespace, lets core `tasks::ops_task` decide the one next step, and carries it out
//! (finalizer, status, the snapshot through the agents, deletion after the TTL), with an event
//! for each outcome a person would look for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use quorate_api::Etcd;
use quorate_api::names::{AGENT_TOKEN_KEY, agent_token_secret_name};
use quorate_api::tasks::{EtcdOpsTask, EtcdOpsTaskStatus, OPS_TASK_FINALIZER, TaskState};
use quorate_core::tasks::ops_task::{
    EtcdFacts, ExecutionOutcome, OpsStep, OpsTaskView, after_execution, next_step,
};
use serde_json::json;
use tokio::sync::watch;

use super::agent_client::Credentials;
use super::{TaskContext, TaskError, TaskRef, set_finalizers};

/// Runs the controller until `shutdown` turns true.
pub async fn run(
    ctx: Arc<TaskContext>,
    namespace: Option<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<EtcdOpsTask> = match &namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    Controller::new(api, watcher::Config::default())
        .graceful_shutdown_on(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .run(reconcile, super::error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

/// One pass: steps until one waits.
async fn reconcile(task: Arc<EtcdOpsTask>, ctx: Arc<TaskContext>) -> Result<Action, TaskError> {
    let me = TaskRef::of("EtcdOpsTask", &task.metadata);
    let (namespace, name) = (me.namespace.clone(), me.name.clone());
    // Sharded, a task belongs to the replica that owns its `Etcd` (one without, to the owner
    // of its own name); another replica leaves it alone.
    let target = task.spec.etcd_name.as_deref().filter(|n| !n.is_empty());
    if !ctx.shard.owns(&namespace, target.unwrap_or(&name)) {
        return Ok(Action::await_change());
    }
    let fail = |action| me.failed(action);
    let tasks: Api<EtcdOpsTask> = Api::namespaced(ctx.client.clone(), &namespace);
    let etcds: Api<Etcd> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut task = (*task).clone();
    // Each step changes the task; a handful always reaches one that waits.
    for _ in 0..8 {
        let etcd = match task.spec.etcd_name.as_deref().filter(|n| !n.is_empty()) {
            Some(etcd_name) => etcds
                .get_opt(etcd_name)
                .await
                .map_err(fail("get the Etcd of"))?,
            None => None,
        };
        let facts = match &etcd {
            None => EtcdFacts::Missing,
            Some(etcd) => EtcdFacts::Found {
                ready: etcd.status.as_ref().and_then(|s| s.ready) == Some(true),
                backups: etcd.spec.backup.store.is_some(),
            },
        };
        let earlier_unfinished = if state(&task) == Some(TaskState::Pending) {
            let all = tasks
                .list(&Default::default())
                .await
                .map_err(fail("list the tasks beside"))?;
            earlier_unfinished(&task, &all.items)
        } else {
            None
        };
        let view = OpsTaskView {
            task: &task,
            etcd: facts,
            earlier_unfinished,
            now: jiff::Timestamp::now(),
            run_id: &ctx.run_id,
        };
        match next_step(&view) {
            OpsStep::AddFinalizer => {
                let mut finalizers = task.metadata.finalizers.clone().unwrap_or_default();
                finalizers.push(OPS_TASK_FINALIZER.to_string());
                task = set_finalizers(&tasks, &name, &finalizers)
                    .await
                    .map_err(fail("add the finalizer to"))?;
            }
            OpsStep::WriteStatus(status) => {
                task = write_status(&tasks, &task, *status, &ctx)
                    .await
                    .map_err(fail("write the status of"))?;
            }
            OpsStep::Execute(request) => {
                let Some(etcd) = &etcd else { continue };
                let outcome = match agent_credentials(&ctx, &namespace, etcd).await {
                    Ok(credentials) => ctx.agents.snapshot(etcd, request, credentials).await,
                    Err(why) => ExecutionOutcome::Unreachable(why),
                };
                let (status, again) = after_execution(&view, outcome);
                task = write_status(&tasks, &task, status, &ctx)
                    .await
                    .map_err(fail("write the status of"))?;
                if let Some(again) = again {
                    return Ok(Action::requeue(again));
                }
            }
            OpsStep::WaitForTtl(left) => return Ok(Action::requeue(left)),
            OpsStep::Delete => {
                if let Some(finalizers) = &task.metadata.finalizers
                    && finalizers.iter().any(|f| f == OPS_TASK_FINALIZER)
                {
                    let kept: Vec<String> = finalizers
                        .iter()
                        .filter(|f| *f != OPS_TASK_FINALIZER)
                        .cloned()
                        .collect();
                    set_finalizers(&tasks, &name, &kept)
                        .await
                        .map_err(fail("remove the finalizer from"))?;
                }
                if task.metadata.deletion_timestamp.is_none() {
                    match tasks.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(fail("delete")(e)),
                    }
                }
                return Ok(Action::await_change());
            }
        }
    }
    Ok(Action::requeue(Duration::from_secs(1)))
}

/// What the operator presents to `etcd`'s agents: its token (`None` while it has none) and,
/// with `spec.backup.tls`, HTTPS with its CA and client certificate. `Err` when a Secret
/// cannot be read or holds no usable PEM.
async fn agent_credentials(
    ctx: &TaskContext,
    namespace: &str,
    etcd: &Etcd,
) -> Result<Credentials, String> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let read = async |name: &str| -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        match secrets.get_opt(name).await {
            Ok(secret) => Ok(secret.map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            })),
            Err(e) => Err(format!("reading the Secret {namespace}/{name}: {e}")),
        }
    };
    let token_secret = agent_token_secret_name(etcd.metadata.name.as_deref().unwrap_or_default());
    // Not made yet (an `Etcd` whose spec was not reconciled since tokens came): its agents'
    // configuration names no token either, so they take requests without one.
    let token = read(&token_secret).await?.and_then(|d| {
        d.get(AGENT_TOKEN_KEY)
            .map(|t| String::from_utf8_lossy(t).trim().to_string())
    });
    let Some(tls) = &etcd.spec.backup.tls else {
        return Ok(Credentials { token, tls: None });
    };
    let key = |data: &BTreeMap<String, Vec<u8>>, secret: &str, key: &str| {
        data.get(key)
            .cloned()
            .ok_or_else(|| format!("the Secret {namespace}/{secret} has no key {key:?}"))
    };
    let ca_secret = tls.tls_ca_secret_ref.name.clone().unwrap_or_default();
    let ca_data = read(&ca_secret)
        .await?
        .ok_or_else(|| format!("the Secret {namespace}/{ca_secret} does not exist"))?;
    let ca = key(&ca_data, &ca_secret, tls.tls_ca_secret_ref.data_key())?;
    let client = match tls
        .client_tls_secret_ref
        .as_ref()
        .and_then(|r| r.name.clone())
    {
        Some(secret) => {
            let data = read(&secret)
                .await?
                .ok_or_else(|| format!("the Secret {namespace}/{secret} does not exist"))?;
            Some((
                key(&data, &secret, "tls.crt")?,
                key(&data, &secret, "tls.key")?,
            ))
        }
        None => None,
    };
    let config = quorate_coord::agent_tls::client_config_from_pem(
        &ca,
        client.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
        &format!(
            "spec.backup.tls of {namespace}/{}",
            etcd.metadata.name.as_deref().unwrap_or_default()
        ),
    )
    .map_err(|e| e.to_string())?;
    Ok(Credentials {
        token,
        tls: Some(config),
    })
}

fn state(task: &EtcdOpsTask) -> Option<TaskState> {
    task.status.as_ref().and_then(|s| s.state)
}

/// The first unfinished task for the same `Etcd` created before `task` (by creation time, then
/// name), so of two tasks created together exactly one runs.
fn earlier_unfinished(task: &EtcdOpsTask, all: &[EtcdOpsTask]) -> Option<String> {
    let key = |t: &EtcdOpsTask| {
        (
            t.metadata.creation_timestamp.clone().map(|t| t.0),
            t.metadata.name.clone(),
        )
    };
    all.iter()
        .filter(|other| {
            other.metadata.name != task.metadata.name
                && other.spec.etcd_name == task.spec.etcd_name
                && !state(other).is_some_and(TaskState::is_final)
                && key(other) < key(task)
        })
        .find_map(|other| other.metadata.name.clone())
}

/// Writes the status and announces a state change; returns the task as written.
async fn write_status(
    tasks: &Api<EtcdOpsTask>,
    task: &EtcdOpsTask,
    status: EtcdOpsTaskStatus,
    ctx: &TaskContext,
) -> Result<EtcdOpsTask, kube::Error> {
    let name = task.metadata.name.as_deref().unwrap_or_default();
    let written = tasks
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    if status.state != state(task) {
        let what = status
            .last_operation
            .as_ref()
            .map(|o| o.description.clone())
            .unwrap_or_default();
        let (type_, reason) = match status.state {
            Some(TaskState::Succeeded) => (EventType::Normal, "TaskSucceeded"),
            Some(TaskState::Failed) => (EventType::Warning, "TaskFailed"),
            Some(TaskState::Rejected) => (EventType::Warning, "TaskRejected"),
            Some(TaskState::InProgress) => (EventType::Normal, "TaskStarted"),
            _ => return Ok(written),
        };
        ctx.event(&written, type_, reason, what).await;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use quorate_api::tasks::EtcdOpsTaskSpec;

    fn task(name: &str, etcd: &str, created: i64, state: Option<TaskState>) -> EtcdOpsTask {
        let mut t = EtcdOpsTask::new(
            name,
            EtcdOpsTaskSpec {
                etcd_name: Some(etcd.into()),
                ..EtcdOpsTaskSpec::default()
            },
        );
        t.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(created).unwrap()));
        t.status = Some(EtcdOpsTaskStatus {
            state,
            ..EtcdOpsTaskStatus::default()
        });
        t
    }

    #[test]
    fn only_an_earlier_unfinished_task_for_the_same_etcd_blocks() {
        let me = task("b", "main", 10, Some(TaskState::Pending));
        let all = [
            task("a", "main", 10, Some(TaskState::Pending)),
            task("z", "main", 5, Some(TaskState::Succeeded)),
            task("c", "main", 11, Some(TaskState::InProgress)),
            task("d", "other", 1, None),
        ];
        assert_eq!(earlier_unfinished(&me, &all).as_deref(), Some("a"));
        assert_eq!(earlier_unfinished(&all[0], std::slice::from_ref(&me)), None);
    }
}
