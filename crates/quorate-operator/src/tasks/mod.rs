//! Controllers of druid's task resources: `EtcdOpsTask` ([`ops_task`], on-demand snapshots
//! through the member agents, [`agent_client`]) and `EtcdCopyBackupsTask` ([`copy_task`], a
//! Job running `quorate backups copy`). Each runs only when its CRD is installed, so an
//! operator upgraded before its CRDs keeps serving `Etcd` objects.

pub mod agent_client;
pub mod copy_task;
pub mod ops_task;

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tokio::sync::watch;

use crate::context::OperatorSettings;

/// What both task controllers share.
pub struct TaskContext {
    /// The API client.
    pub client: Client,
    /// Images (the copy Job runs the member image).
    pub settings: OperatorSettings,
    /// Events on the tasks.
    pub recorder: Recorder,
    /// This operator run (`lastOperation.runID`).
    pub run_id: String,
    /// Talks to the member agents.
    pub agents: agent_client::AgentClient,
    /// This replica's share (`--shard`): it serves only the tasks of the `Etcd`s it owns.
    pub shard: quorate_core::shard::Shard,
}

impl TaskContext {
    /// Publishes an event on `object`; a failure is only logged.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::debug!("could not publish event {reason}: {e}");
        }
    }
}

/// A failed API call of a task pass.
#[derive(Debug, thiserror::Error)]
#[error("{action} ({kind} {namespace}/{name}): {source}")]
pub struct TaskError {
    action: &'static str,
    kind: &'static str,
    namespace: String,
    name: String,
    #[source]
    source: Box<kube::Error>,
}

/// Names the task a pass works on, for its errors.
pub(crate) struct TaskRef {
    kind: &'static str,
    namespace: String,
    name: String,
}

impl TaskRef {
    /// The task `meta` of `kind`.
    fn of(kind: &'static str, meta: &kube::core::ObjectMeta) -> TaskRef {
        TaskRef {
            kind,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// Tags a failed call made while doing `action`: `.map_err(task.failed("..."))`.
    fn failed(&self, action: &'static str) -> impl FnOnce(kube::Error) -> TaskError + '_ {
        move |source| TaskError {
            action,
            kind: self.kind,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source: Box::new(source),
        }
    }
}

/// Logs a failed pass and looks again in 10 s.
fn error_policy<K: Resource>(task: Arc<K>, error: &TaskError, _: Arc<TaskContext>) -> Action {
    tracing::warn!(
        task = task.meta().name.as_deref().unwrap_or_default(),
        "{error}"
    );
    Action::requeue(std::time::Duration::from_secs(10))
}

/// Writes `finalizers` as the task's finalizers (merge patch).
async fn set_finalizers<K>(
    api: &Api<K>,
    name: &str,
    finalizers: &[String],
) -> Result<K, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// Which task CRDs the API server serves.
async fn served(client: &Client) -> (bool, bool) {
    match client
        .list_api_group_resources("druid.gardener.cloud/v1alpha1")
        .await
    {
        Ok(list) => {
            let has = |name: &str| list.resources.iter().any(|r| r.name == name);
            (has("etcdopstasks"), has("etcdcopybackupstasks"))
        }
        Err(_) => (false, false),
    }
}

/// Runs the task controllers whose CRDs are installed until `shutdown` turns true.
pub async fn run(
    client: Client,
    settings: OperatorSettings,
    namespace: Option<String>,
    shard: quorate_core::shard::Shard,
    identity: String,
    shutdown: watch::Receiver<bool>,
) {
    let (ops, copy) = served(&client).await;
    for (served, crd) in [(ops, "etcdopstasks"), (copy, "etcdcopybackupstasks")] {
        if !served {
            tracing::warn!(
                "the {crd}.druid.gardener.cloud CRD is not installed; those tasks are not served \
                 (apply deploy/crds/druid.gardener.cloud_{crd}.yaml)"
            );
        }
    }
    let ctx = Arc::new(TaskContext {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "quorate-operator".to_string(),
                instance: Some(identity.clone()),
            },
        ),
        client: client.clone(),
        settings,
        run_id: identity,
        agents: agent_client::AgentClient::new(),
        shard,
    });
    let ops = ops.then(|| ops_task::run(ctx.clone(), namespace.clone(), shutdown.clone()));
    let copy = copy.then(|| copy_task::run(ctx.clone(), namespace, shutdown));
    tokio::join!(
        async {
            if let Some(ops) = ops {
                ops.await
            }
        },
        async {
            if let Some(copy) = copy {
                copy.await
            }
        }
    );
}
