//! The task controllers against a real kube-apiserver v1.37.2, run on their own (no Etcd
//! controller, so an `Etcd`'s status is what the test writes) and scoped to the test's
//! namespace. No kubelet or Job controller runs there: the cluster's agents cannot be reached
//! (their Service name does not resolve), and the test plays the Job controller and the
//! garbage collector where it must. The end-to-end suite runs both tasks for real.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use quorate_api::Etcd;
use quorate_api::tasks::{
    EtcdCopyBackupsTask, EtcdOpsTask, OPS_TASK_FINALIZER, TaskPhase, TaskState,
};
use quorate_core::tasks::ops_task::codes;
use quorate_operator::{OperatorSettings, run_task_controllers};
use quorate_testkit::{eventually, install_task_crds};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(60);

/// The task controllers for one namespace; stopped when dropped.
struct Controllers {
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Controllers {
    fn start(client: &Client, namespace: &str) -> Controllers {
        let (shutdown, stopped) = watch::channel(false);
        let task = tokio::spawn(run_task_controllers(
            client.clone(),
            OperatorSettings::default(),
            Some(namespace.to_string()),
            quorate_core::shard::Shard::ALL,
            format!("test-{namespace}"),
            stopped,
        ));
        Controllers { shutdown, task }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

async fn setup(test: &str) -> Option<(Client, String)> {
    let (_, client, namespace) = quorate_testkit::etcd_test_namespace(test).await?;
    install_task_crds(&client).await;
    Some((client, namespace))
}

/// An `Etcd` named `name`, with a backup store or without, whose status says `ready`.
async fn etcd(client: &Client, namespace: &str, name: &str, backups: bool, ready: bool) {
    let store = if backups {
        "\n    store:\n      provider: Local\n      container: bucket\n      prefix: main\n"
    } else {
        " {}\n"
    };
    let yaml = format!(
        "apiVersion: druid.gardener.cloud/v1alpha1\nkind: Etcd\nmetadata:\n  name: {name}\n  namespace: {namespace}\n\
         spec:\n  replicas: 1\n  labels: {{app: {name}}}\n  etcd: {{}}\n  backup:{store}"
    );
    let etcd: Etcd = serde_saphyr::from_str(&yaml).expect("manifest");
    let api: Api<Etcd> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &etcd)
        .await
        .expect("create the Etcd");
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"ready": ready}})),
    )
    .await
    .expect("status");
}

async fn ops_task(
    client: &Client,
    namespace: &str,
    name: &str,
    etcd: &str,
    extra: serde_json::Value,
) -> Api<EtcdOpsTask> {
    let api: Api<EtcdOpsTask> = Api::namespaced(client.clone(), namespace);
    let mut snapshot = json!({"type": "delta", "timeoutSecondsDelta": 10});
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            snapshot[k] = v.clone();
        }
    }
    let task: EtcdOpsTask = serde_json::from_value(json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "EtcdOpsTask",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"etcdName": etcd, "ttlSecondsAfterFinished": 3, "config": {"onDemandSnapshot": snapshot}},
    }))
    .expect("task");
    api.create(&PostParams::default(), &task)
        .await
        .expect("create the task");
    api
}

async fn state_of(api: &Api<EtcdOpsTask>, name: &str, wanted: TaskState) -> EtcdOpsTask {
    eventually(&format!("{name} {wanted:?}"), WAIT, || async {
        let task = api.get_opt(name).await.ok().flatten()?;
        (task.status.as_ref()?.state == Some(wanted)).then_some(task)
    })
    .await
}

#[tokio::test]
async fn ops_tasks_are_rejected_with_druids_codes_and_deleted_after_their_ttl() {
    let Some((client, ns)) = setup("ops_tasks_are_rejected").await else {
        return;
    };
    etcd(&client, &ns, "nobackup", false, true).await;
    etcd(&client, &ns, "notready", true, false).await;
    let _controllers = Controllers::start(&client, &ns);
    for (task, etcd, code) in [
        ("missing", "absent", codes::GET_ETCD),
        ("nostore", "nobackup", codes::BACKUP_NOT_ENABLED),
        ("unready", "notready", codes::ETCD_NOT_READY),
    ] {
        let api = ops_task(&client, &ns, task, etcd, json!({})).await;
        let rejected = state_of(&api, task, TaskState::Rejected).await;
        let status = rejected.status.unwrap();
        assert_eq!(status.last_errors[0].code, code, "{task}");
        let operation = status.last_operation.unwrap();
        assert_eq!(operation.type_, TaskPhase::Admit);
        assert!(
            rejected
                .metadata
                .finalizers
                .unwrap_or_default()
                .contains(&OPS_TASK_FINALIZER.to_string()),
            "{task}: the finalizer is there while the task lives"
        );
    }
    let api: Api<EtcdOpsTask> = Api::namespaced(client.clone(), &ns);
    eventually(
        "the rejected tasks deleted after ttlSecondsAfterFinished (3 s)",
        WAIT,
        || async {
            api.list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn an_admitted_task_retries_unreachable_agents_until_its_timeout_and_blocks_later_tasks() {
    let Some((client, ns)) = setup("ops_task_unreachable").await else {
        return;
    };
    etcd(&client, &ns, "main", true, true).await;
    let _controllers = Controllers::start(&client, &ns);
    let api = ops_task(&client, &ns, "first", "main", json!({})).await;
    let running = eventually("first retried after an unreachable agent", WAIT, || async {
        let task = api.get_opt("first").await.ok().flatten()?;
        let status = task.status.clone()?;
        (status.state == Some(TaskState::InProgress)
            && status
                .last_errors
                .iter()
                .any(|e| e.code == codes::EXECUTE_HTTP_REQUEST))
        .then_some(task)
    })
    .await;
    assert!(running.status.unwrap().started_at.is_some());

    // A second task for the same Etcd while the first runs: rejected, naming the first.
    ops_task(&client, &ns, "second", "main", json!({})).await;
    let second = state_of(&api, "second", TaskState::Rejected).await;
    let error = &second.status.unwrap().last_errors[0];
    assert_eq!(error.code, codes::DUPLICATE_TASK);
    assert!(error.description.contains("first"), "{}", error.description);

    // timeoutSecondsDelta: 10 — the first fails once it has run that long without an answer.
    let failed = state_of(&api, "first", TaskState::Failed).await;
    let status = failed.status.unwrap();
    assert!(
        status
            .last_operation
            .unwrap()
            .description
            .contains("within the task's timeout"),
        "{:?}",
        status.last_errors
    );
}

#[tokio::test]
async fn a_copy_task_runs_as_a_job_reports_its_conditions_and_takes_the_job_with_it() {
    let Some((client, ns)) = setup("copy_task_job").await else {
        return;
    };
    let _controllers = Controllers::start(&client, &ns);
    let tasks: Api<EtcdCopyBackupsTask> = Api::namespaced(client.clone(), &ns);
    let task: EtcdCopyBackupsTask = serde_json::from_value(json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "EtcdCopyBackupsTask",
        "metadata": {"name": "move", "namespace": ns},
        "spec": {
            "sourceStore": {"provider": "aws", "container": "old", "prefix": "main", "secretRef": {"name": "old-creds"}},
            "targetStore": {"provider": "Local", "container": "new", "prefix": "main"},
            "maxBackups": 2,
        },
    }))
    .expect("task");
    tasks
        .create(&PostParams::default(), &task)
        .await
        .expect("create");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = eventually("the copy Job", WAIT, || async {
        jobs.get_opt("move-worker").await.ok().flatten()
    })
    .await;
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("EtcdCopyBackupsTask", "move")
    );
    let pod = job.spec.unwrap().template.spec.unwrap();
    let args = pod.containers[0].args.clone().unwrap();
    assert_eq!(args[..3], ["backups", "copy", "--task-json"]);
    assert!(args[3].contains("\"maxBackups\":2"), "{}", args[3]);

    // Play the Job controller: the Job completes. Since 1.31 the API server wants what that
    // controller writes with it: start and completion time, SuccessCriteriaMet before Complete.
    let now = jiff::Timestamp::now().to_string();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now, "lastProbeTime": now});
    jobs.patch_status(
        "move-worker",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "startTime": now,
            "completionTime": now,
            "succeeded": 1,
            "conditions": [condition("SuccessCriteriaMet"), condition("Complete")]
        }})),
    )
    .await
    .expect("job status");
    let done = eventually("the task Succeeded", WAIT, || async {
        let task = tasks.get_opt("move").await.ok().flatten()?;
        let conditions = task.status.as_ref()?.conditions.clone()?;
        conditions
            .iter()
            .any(|c| c.type_ == "Succeeded")
            .then_some(task)
    })
    .await;
    assert_eq!(done.status.unwrap().observed_generation, Some(1));

    // Deleting the task deletes the Job first (foreground); the task waits for it.
    tasks
        .delete("move", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the Job being deleted", WAIT, || async {
        jobs.get_opt("move-worker")
            .await
            .ok()
            .flatten()?
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    assert!(
        tasks.get_opt("move").await.unwrap().is_some(),
        "the task outlives its Job"
    );
    // Play the garbage collector, which this API server lacks: the Job goes.
    jobs.patch(
        "move-worker",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop the Job's finalizers");
    eventually("the task gone after its Job", WAIT, || async {
        tasks
            .get_opt("move")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
}
