//! The `EtcdCopyBackupsTask` controller, as druid's: a finalizer, then the Job `<task>-worker`
//! (core `tasks::copy_job`, running `quorate backups copy`) created once, and the task's status
//! mirrored from the Job's conditions; on deletion the Job goes first (foreground), then the
//! finalizer. The Job's changes trigger a pass (it is owned by the task).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use quorate_api::StoreSpec;
use quorate_api::names::{LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use quorate_api::provider::StorageProvider;
use quorate_api::tasks::{COPY_TASK_FINALIZER, EtcdCopyBackupsTask, copy_job_name};
use quorate_core::components::paths::DEFAULT_LOCAL_BACKUP_HOST_PATH;
use quorate_core::tasks::copy_job::{COMPONENT, CopyJobInputs, copy_job, copy_task_status};
use serde_json::json;
use tokio::sync::watch;

use super::{TaskContext, TaskError, TaskRef, set_finalizers};

/// Runs the controller until `shutdown` turns true.
pub async fn run(
    ctx: Arc<TaskContext>,
    namespace: Option<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (tasks, jobs): (Api<EtcdCopyBackupsTask>, Api<Job>) = match &namespace {
        Some(ns) => (
            Api::namespaced(ctx.client.clone(), ns),
            Api::namespaced(ctx.client.clone(), ns),
        ),
        None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
    };
    let jobs_config = watcher::Config::default().labels(&format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_COMPONENT}={COMPONENT}"
    ));
    Controller::new(tasks, watcher::Config::default())
        .owns(jobs, jobs_config)
        .graceful_shutdown_on(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .run(reconcile, super::error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(
    task: Arc<EtcdCopyBackupsTask>,
    ctx: Arc<TaskContext>,
) -> Result<Action, TaskError> {
    // Sharded, a copy task belongs to the replica that owns its own `namespace/name`.
    if !ctx.shard.owns(
        task.metadata.namespace.as_deref().unwrap_or_default(),
        task.metadata.name.as_deref().unwrap_or_default(),
    ) {
        return Ok(Action::await_change());
    }
    let me = TaskRef::of("EtcdCopyBackupsTask", &task.metadata);
    let (namespace, name) = (me.namespace.clone(), me.name.clone());
    let fail = |action| me.failed(action);
    let tasks: Api<EtcdCopyBackupsTask> = Api::namespaced(ctx.client.clone(), &namespace);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let job_name = copy_job_name(&name);
    let finalizers = task.metadata.finalizers.clone().unwrap_or_default();
    let has_finalizer = finalizers.iter().any(|f| f == COPY_TASK_FINALIZER);
    let job = jobs
        .get_opt(&job_name)
        .await
        .map_err(fail("read the Job"))?;

    if task.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        if let Some(job) = &job {
            if job.metadata.deletion_timestamp.is_none() {
                let foreground = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Foreground),
                    ..DeleteParams::default()
                };
                match jobs.delete(&job_name, &foreground).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(fail("delete the Job")(e)),
                }
            }
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        let kept: Vec<String> = finalizers
            .iter()
            .filter(|f| *f != COPY_TASK_FINALIZER)
            .cloned()
            .collect();
        set_finalizers(&tasks, &name, &kept)
            .await
            .map_err(fail("remove the finalizer"))?;
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut with = finalizers.clone();
        with.push(COPY_TASK_FINALIZER.to_string());
        set_finalizers(&tasks, &name, &with)
            .await
            .map_err(fail("add the finalizer"))?;
    }

    let (job, error) = match job {
        Some(job) => (Some(job), None),
        None => match create_job(&task, &ctx, &namespace, &jobs).await {
            Ok(job) => {
                ctx.event(
                    &*task,
                    EventType::Normal,
                    "CopyJobCreated",
                    format!(
                        "Job {job_name} copies the backups of {} into {}",
                        describe(&task.spec.source_store),
                        describe(&task.spec.target_store)
                    ),
                )
                .await;
                (Some(job), None)
            }
            Err(e) => (None, Some(e)),
        },
    };
    let status = copy_task_status(&task, job.as_ref(), error.clone());
    if task.status.as_ref() != Some(&status) {
        let before = task
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        tasks
            .patch_status(
                &name,
                &PatchParams::default(),
                // Every field named, `null` included, so a cleared error is cleared.
                &Patch::Merge(json!({"status": {
                    "conditions": status.conditions,
                    "observedGeneration": status.observed_generation,
                    "lastError": status.last_error,
                }})),
            )
            .await
            .map_err(fail("write the status"))?;
        for condition in status.conditions.iter().flatten() {
            if condition.status == quorate_api::ConditionStatus::True
                && !before
                    .iter()
                    .any(|b| b.type_ == condition.type_ && b.status == condition.status)
            {
                let (type_, reason) = match condition.type_.as_str() {
                    "Succeeded" => (EventType::Normal, "CopySucceeded"),
                    _ => (EventType::Warning, "CopyFailed"),
                };
                let note = format!("Job {job_name}: {} {}", condition.reason, condition.message);
                ctx.event(&*task, type_, reason, note.trim_end().to_string())
                    .await;
            }
        }
    }
    Ok(match error {
        Some(_) => Action::requeue(Duration::from_secs(10)),
        None => Action::await_change(),
    })
}

/// Makes the Job, reading each `Local` store's Secret for its `hostPath`.
async fn create_job(
    task: &EtcdCopyBackupsTask,
    ctx: &TaskContext,
    namespace: &str,
    jobs: &Api<Job>,
) -> Result<Job, String> {
    let source_host_path = local_host_path(ctx, namespace, &task.spec.source_store).await?;
    let target_host_path = local_host_path(ctx, namespace, &task.spec.target_store).await?;
    let inputs = CopyJobInputs {
        task,
        image: &ctx.settings.images.member,
        init_image: &ctx.settings.images.init,
        source_host_path: &source_host_path,
        target_host_path: &target_host_path,
    };
    let job = copy_job(&inputs).map_err(|e| e.to_string())?;
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let created = match jobs.create(&PostParams::default(), &job).await {
        Err(kube::Error::Api(s)) if s.code == 409 => jobs.get(&job_name).await,
        other => other,
    };
    created.map_err(|e| format!("creating the Job {job_name}: {e}"))
}

/// The host directory of a `Local` store's buckets: its Secret's `hostPath`, else druid's
/// default. Other providers have none.
async fn local_host_path(
    ctx: &TaskContext,
    namespace: &str,
    store: &StoreSpec,
) -> Result<String, String> {
    if store.provider_kind() != Some(StorageProvider::Local) {
        return Ok(String::new());
    }
    let Some(secret) = store.secret_ref.as_ref().and_then(|s| s.name.as_deref()) else {
        return Ok(DEFAULT_LOCAL_BACKUP_HOST_PATH.to_string());
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let name = secret;
    let secret = secrets.get(name).await.map_err(|e| {
        format!("reading the Local store's Secret {namespace}/{name} for its hostPath: {e}")
    })?;
    let path = crate::spec_flow::references::host_path(&secret)
        .unwrap_or_else(|| DEFAULT_LOCAL_BACKUP_HOST_PATH.to_string());
    crate::spec_flow::references::check_host_path(
        &path,
        namespace,
        name,
        &ctx.settings.allowed_host_paths,
    )
    .map_err(|e| e.to_string())?;
    Ok(path)
}

fn describe(store: &StoreSpec) -> String {
    format!(
        "{}:{}/{}",
        store.provider.as_deref().unwrap_or("?"),
        store.container.as_deref().unwrap_or_default(),
        store.prefix
    )
}
