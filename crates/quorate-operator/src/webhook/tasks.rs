//! The task webhook: `EtcdOpsTask` and `EtcdCopyBackupsTask` on CREATE and UPDATE get the
//! rules of `quorate_api::validate` (druid's CRD rules, which Kubernetes 1.20 would drop as
//! CEL: one operation, `isFinal` only for full snapshots, immutable specs, valid stores).
//! An UPDATE that leaves the spec alone (finalizers, status-free metadata) is always allowed,
//! so a task can always be cleaned up.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use quorate_api::ValidationErrors;
use quorate_api::tasks::{EtcdCopyBackupsTask, EtcdOpsTask};
use quorate_api::validate::{
    validate_copy_task, validate_copy_task_update, validate_ops_task, validate_ops_task_update,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::review::{object_key, refuse_invalid, refuse_unreadable};

/// Path of the task webhook.
pub const TASK_VALIDATION_PATH: &str = "/webhooks/validate/tasks";

/// Why a task is refused: unreadable (the field that would not decode) or invalid.
#[derive(Debug, PartialEq)]
pub enum TaskRefusal {
    /// The object does not decode as its kind.
    Unreadable(String, String),
    /// It breaks these rules.
    Invalid(ValidationErrors),
}

fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, TaskRefusal> {
    serde_path_to_error::deserialize(value)
        .map_err(|e| TaskRefusal::Unreadable(e.path().to_string(), e.inner().to_string()))
}

fn judge<T: DeserializeOwned>(
    object: &Value,
    old: Option<&Value>,
    create: fn(&T) -> Result<(), ValidationErrors>,
    update: fn(&T, &T) -> Result<(), ValidationErrors>,
) -> Result<(), TaskRefusal> {
    if let Some(old) = old
        && old.get("spec") == object.get("spec")
    {
        return Ok(());
    }
    let new: T = decode(object)?;
    create(&new).map_err(TaskRefusal::Invalid)?;
    if let Some(old) = old.and_then(|o| decode::<T>(o).ok()) {
        update(&old, &new).map_err(TaskRefusal::Invalid)?;
    }
    Ok(())
}

/// The decision for one request about `kind`, given its objects as JSON.
pub fn judge_task(
    kind: &str,
    operation: &Operation,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), TaskRefusal> {
    if !matches!(operation, Operation::Create | Operation::Update) {
        return Ok(());
    }
    let Some(object) = object else {
        return Err(TaskRefusal::Unreadable(
            ".".into(),
            "the request carries no object".into(),
        ));
    };
    match kind {
        "EtcdOpsTask" => {
            judge::<EtcdOpsTask>(object, old, validate_ops_task, validate_ops_task_update)
        }
        "EtcdCopyBackupsTask" => {
            judge::<EtcdCopyBackupsTask>(object, old, validate_copy_task, validate_copy_task_update)
        }
        _ => Ok(()),
    }
}

/// Answers one AdmissionRequest for a task.
pub fn review_task(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let to_value = |o: &DynamicObject| serde_json::to_value(o).ok();
    let object = request.object.as_ref().and_then(to_value);
    let old = request.old_object.as_ref().and_then(to_value);
    let kind = request.kind.kind.as_str();
    let key = object_key(request);
    match judge_task(kind, &request.operation, object.as_ref(), old.as_ref()) {
        Ok(()) => AdmissionResponse::from(request),
        Err(TaskRefusal::Invalid(errors)) => refuse_invalid(
            request,
            format!("{kind} {key} is invalid:\n{errors}"),
            &errors,
        ),
        Err(TaskRefusal::Unreadable(path, message)) => refuse_unreadable(
            request,
            format!(
                "{kind} {key} cannot be read: {path}: {message}; fix the field's type or value"
            ),
            &path,
            &message,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(type_: &str, is_final: bool) -> Value {
        json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "EtcdOpsTask",
            "metadata": {"name": "snap", "namespace": "shoot"},
            "spec": {"etcdName": "main", "config": {"onDemandSnapshot": {"type": type_, "isFinal": is_final}}},
        })
    }

    #[test]
    fn ops_tasks_are_checked_on_create_and_frozen_on_update() {
        assert_eq!(
            judge_task(
                "EtcdOpsTask",
                &Operation::Create,
                Some(&ops("full", true)),
                None
            ),
            Ok(())
        );
        let Err(TaskRefusal::Invalid(e)) = judge_task(
            "EtcdOpsTask",
            &Operation::Create,
            Some(&ops("delta", true)),
            None,
        ) else {
            panic!("a final delta was allowed")
        };
        assert!(e.has_path("spec.config.onDemandSnapshot.isFinal"));
        let mut finalized = ops("full", true);
        finalized["metadata"]["finalizers"] = json!(["druid.gardener.cloud/etcd-ops-task"]);
        assert_eq!(
            judge_task(
                "EtcdOpsTask",
                &Operation::Update,
                Some(&finalized),
                Some(&ops("full", true))
            ),
            Ok(())
        );
        let Err(TaskRefusal::Invalid(e)) = judge_task(
            "EtcdOpsTask",
            &Operation::Update,
            Some(&ops("full", false)),
            Some(&ops("full", true)),
        ) else {
            panic!("a spec change was allowed")
        };
        assert!(e.has_path("spec.config"));
    }

    #[test]
    fn an_unreadable_copy_task_names_the_field() {
        let task = json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "EtcdCopyBackupsTask",
            "metadata": {"name": "copy"},
            "spec": {"sourceStore": {"prefix": "a"}, "targetStore": {"prefix": "b"}, "maxBackups": "three"},
        });
        let Err(TaskRefusal::Unreadable(path, _)) =
            judge_task("EtcdCopyBackupsTask", &Operation::Create, Some(&task), None)
        else {
            panic!("decoded")
        };
        assert_eq!(path, "spec.maxBackups");
    }
}
