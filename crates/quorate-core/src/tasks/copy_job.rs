//! The Job that runs an `EtcdCopyBackupsTask` (druid's `<task>-worker`): the quorate image
//! running `quorate backups copy --task-json ...` with the source store mounted under
//! `…-source` paths and the target store where a member pod mounts its own, and the task's
//! status read back from the Job's conditions (`Complete` → `Succeeded`, `Failed` → `Failed`).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, PodSpec, PodTemplateSpec, SecretVolumeSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use quorate_api::StoreSpec;
use quorate_api::names::{
    LABEL_APP_NAME, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_PART_OF, MANAGED_BY_VALUE,
};
use quorate_api::provider::StorageProvider;
use quorate_api::status::{Condition, ConditionStatus};
use quorate_api::tasks::{EtcdCopyBackupsTask, EtcdCopyBackupsTaskStatus, copy_job_name};

use crate::components::paths::{BACKUP_SECRET_MOUNT, LOCAL_BACKUP_ROOT};
use crate::components::volumes::SECRET_FILE_MODE;

/// `app.kubernetes.io/component` of the Job (druid's).
pub const COMPONENT: &str = "etcd-copy-backups-job";
/// Name of the Job's container (druid's).
pub const CONTAINER: &str = "copy-backups";
/// Where the source store's Secret is mounted.
pub const SOURCE_SECRET_MOUNT: &str = "/var/etcd-backup-source";
/// Directory under which the source's `Local` container is mounted.
pub const SOURCE_LOCAL_ROOT: &str = "/var/etcd/backups-source";

/// What the Job is made from besides the task.
pub struct CopyJobInputs<'a> {
    /// The task (name, namespace and uid set).
    pub task: &'a EtcdCopyBackupsTask,
    /// The quorate image.
    pub image: &'a str,
    /// The image of the init container that hands a `Local` target to the non-root user.
    pub init_image: &'a str,
    /// Host directory of the source's `Local` buckets (the store Secret's `hostPath`).
    pub source_host_path: &'a str,
    /// Host directory of the target's `Local` buckets.
    pub target_host_path: &'a str,
}

/// Why no Job can be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CopyJobError {
    /// The task lacks a name, namespace or uid (it was not read from the API).
    #[error("the task has no {0}")]
    MissingMetadata(&'static str),
}

struct Side {
    volume_prefix: &'static str,
    secret_mount: &'static str,
    local_root: &'static str,
    host_path: String,
    host_type: &'static str,
}

/// The Job for `inputs.task`.
pub fn copy_job(inputs: &CopyJobInputs) -> Result<Job, CopyJobError> {
    let task = inputs.task;
    let name = task
        .metadata
        .name
        .clone()
        .ok_or(CopyJobError::MissingMetadata("name"))?;
    let namespace = task
        .metadata
        .namespace
        .clone()
        .ok_or(CopyJobError::MissingMetadata("namespace"))?;
    let uid = task
        .metadata
        .uid
        .clone()
        .ok_or(CopyJobError::MissingMetadata("uid"))?;
    let job_name = copy_job_name(&name);
    let labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (LABEL_PART_OF.to_string(), name.clone()),
        (LABEL_COMPONENT.to_string(), COMPONENT.to_string()),
        (LABEL_APP_NAME.to_string(), job_name.clone()),
    ]);
    let mut pod_labels = labels.clone();
    pod_labels.extend(task.spec.pod_labels.clone().unwrap_or_default());

    let source = Side {
        volume_prefix: "source-",
        secret_mount: SOURCE_SECRET_MOUNT,
        local_root: SOURCE_LOCAL_ROOT,
        host_path: inputs.source_host_path.to_string(),
        // The source must exist: a wrong hostPath fails the pod instead of copying nothing.
        host_type: "Directory",
    };
    let target = Side {
        volume_prefix: "",
        secret_mount: BACKUP_SECRET_MOUNT,
        local_root: LOCAL_BACKUP_ROOT,
        host_path: inputs.target_host_path.to_string(),
        host_type: "DirectoryOrCreate",
    };
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let mut args = vec![
        "backups".to_string(),
        "copy".to_string(),
        "--task-json".to_string(),
        task_json(task, &name),
    ];
    for (store, side, secret_flag, root_flag) in [
        (
            &task.spec.source_store,
            &source,
            "--secret-dir",
            "--local-root",
        ),
        (
            &task.spec.target_store,
            &target,
            "--to-secret-dir",
            "--to-local-root",
        ),
    ] {
        if let Some((volume, mount)) = store_volume(store, side) {
            let is_local = volume.host_path.is_some();
            volumes.push(volume);
            mounts.push(mount);
            let (flag, value) = if is_local {
                (root_flag, side.local_root)
            } else {
                (secret_flag, side.secret_mount)
            };
            args.push(flag.to_string());
            args.push(value.to_string());
        }
    }
    let init_containers = local_container(&task.spec.target_store).map(|container| {
        let path = format!("{LOCAL_BACKUP_ROOT}/{container}");
        let mount = mounts
            .iter()
            .find(|m| m.mount_path == path)
            .cloned()
            .expect("the target bucket is mounted at its path");
        vec![crate::components::security::chown_bucket_container(
            inputs.init_image,
            &path,
            mount,
        )]
    });
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name),
            namespace: Some(namespace),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: quorate_api::etcd::API_VERSION.to_string(),
                kind: "EtcdCopyBackupsTask".to_string(),
                name,
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("OnFailure".to_string()),
                    init_containers,
                    containers: vec![Container {
                        name: CONTAINER.to_string(),
                        image: Some(inputs.image.to_string()),
                        image_pull_policy: Some("IfNotPresent".to_string()),
                        command: Some(vec![crate::components::agent_args::COMMAND.to_string()]),
                        args: Some(args),
                        volume_mounts: Some(mounts),
                        security_context: Some(crate::components::security::container()),
                        ..Container::default()
                    }],
                    volumes: Some(volumes),
                    security_context: Some(crate::components::security::pod(false)),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

/// The task as `quorate backups copy --task-json` reads it: kind, name and spec only.
fn task_json(task: &EtcdCopyBackupsTask, name: &str) -> String {
    serde_json::json!({
        "apiVersion": quorate_api::etcd::API_VERSION,
        "kind": "EtcdCopyBackupsTask",
        "metadata": { "name": name },
        "spec": task.spec,
    })
    .to_string()
}

fn local_container(store: &StoreSpec) -> Option<&str> {
    (store.provider_kind() == Some(StorageProvider::Local))
        .then_some(store.container.as_deref())
        .flatten()
        .filter(|c| !c.is_empty())
}

fn store_volume(store: &StoreSpec, side: &Side) -> Option<(Volume, VolumeMount)> {
    if let Some(container) = local_container(store) {
        let name = format!("{}host-storage", side.volume_prefix);
        let volume = Volume {
            name: name.clone(),
            host_path: Some(HostPathVolumeSource {
                path: format!("{}/{container}", side.host_path),
                type_: Some(side.host_type.to_string()),
            }),
            ..Volume::default()
        };
        return Some((
            volume,
            mount(&name, &format!("{}/{container}", side.local_root)),
        ));
    }
    let secret = store.secret_ref.as_ref().and_then(|r| r.name.clone())?;
    let name = format!("{}etcd-backup-secret", side.volume_prefix);
    let volume = Volume {
        name: name.clone(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(SECRET_FILE_MODE),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    Some((volume, mount(&name, side.secret_mount)))
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        ..VolumeMount::default()
    }
}

/// The task's status from its Job (`None` while there is none) and the last error making or
/// reading it, as druid reports it.
pub fn copy_task_status(
    task: &EtcdCopyBackupsTask,
    job: Option<&Job>,
    error: Option<String>,
) -> EtcdCopyBackupsTaskStatus {
    let conditions: Vec<Condition> = job
        .and_then(|j| j.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let type_ = match c.type_.as_str() {
                "Complete" => "Succeeded",
                "Failed" => "Failed",
                _ => return None,
            };
            let status = match c.status.as_str() {
                "True" => ConditionStatus::True,
                "False" => ConditionStatus::False,
                _ => ConditionStatus::Unknown,
            };
            let transition = c.last_transition_time.clone()?;
            Some(Condition {
                type_: type_.to_string(),
                status,
                last_update_time: c.last_probe_time.clone().unwrap_or(transition.clone()),
                last_transition_time: transition,
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            })
        })
        .collect();
    EtcdCopyBackupsTaskStatus {
        conditions: (!conditions.is_empty()).then_some(conditions),
        observed_generation: task.metadata.generation,
        last_error: error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use quorate_api::tasks::EtcdCopyBackupsTaskSpec;

    fn task(source: StoreSpec, target: StoreSpec) -> EtcdCopyBackupsTask {
        let mut t = EtcdCopyBackupsTask::new(
            "move",
            EtcdCopyBackupsTaskSpec {
                source_store: source,
                target_store: target,
                max_backups: Some(2),
                pod_labels: Some([("team".to_string(), "db".to_string())].into()),
                ..EtcdCopyBackupsTaskSpec::default()
            },
        );
        t.metadata.namespace = Some("shoot".into());
        t.metadata.uid = Some("u1".into());
        t.metadata.generation = Some(3);
        t
    }

    fn store(provider: &str, container: &str, secret: Option<&str>) -> StoreSpec {
        StoreSpec {
            provider: Some(provider.into()),
            container: Some(container.into()),
            prefix: "etcd-main".into(),
            secret_ref: secret.map(|s| k8s_openapi::api::core::v1::SecretReference {
                name: Some(s.into()),
                namespace: None,
            }),
            ..StoreSpec::default()
        }
    }

    fn inputs(t: &EtcdCopyBackupsTask) -> CopyJobInputs<'_> {
        CopyJobInputs {
            task: t,
            image: "quorate:1",
            init_image: "alpine",
            source_host_path: "/src",
            target_host_path: "/dst",
        }
    }

    #[test]
    fn s3_to_local_mounts_both_and_hands_the_local_target_to_the_member_user() {
        let t = task(
            store("S3", "bucket", Some("creds")),
            store("Local", "backups", None),
        );
        let job = copy_job(&inputs(&t)).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("move-worker"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("EtcdCopyBackupsTask", "u1")
        );
        let pod = job.spec.unwrap().template;
        assert_eq!(pod.metadata.unwrap().labels.unwrap()["team"], "db");
        let pod = pod.spec.unwrap();
        let args = pod.containers[0].args.clone().unwrap();
        assert_eq!(args[..3], ["backups", "copy", "--task-json"]);
        let parsed: EtcdCopyBackupsTask = serde_json::from_str(&args[3]).unwrap();
        assert_eq!(parsed.spec, t.spec);
        assert_eq!(
            args[4..],
            [
                "--secret-dir",
                SOURCE_SECRET_MOUNT,
                "--to-local-root",
                LOCAL_BACKUP_ROOT
            ]
        );
        let volumes = pod.volumes.unwrap();
        assert_eq!(
            volumes[0].secret.as_ref().unwrap().secret_name.as_deref(),
            Some("creds")
        );
        let host = volumes[1].host_path.as_ref().unwrap();
        assert_eq!(
            (host.path.as_str(), host.type_.as_deref()),
            ("/dst/backups", Some("DirectoryOrCreate"))
        );
        let init = &pod.init_containers.unwrap()[0];
        assert!(init.args.as_ref().unwrap()[0].ends_with("/var/etcd/backups/backups"));
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
    }

    #[test]
    fn a_local_source_must_exist_and_needs_no_init_container() {
        let t = task(
            store("Local", "old", None),
            store("S3", "bucket", Some("creds")),
        );
        let pod = copy_job(&inputs(&t))
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let volumes = pod.volumes.unwrap();
        let host = volumes[0].host_path.as_ref().unwrap();
        assert_eq!(
            (host.path.as_str(), host.type_.as_deref()),
            ("/src/old", Some("Directory"))
        );
        assert_eq!(
            pod.containers[0].volume_mounts.as_ref().unwrap()[0].mount_path,
            "/var/etcd/backups-source/old"
        );
        assert!(pod.init_containers.is_none());
        let args = pod.containers[0].args.clone().unwrap();
        assert_eq!(
            args[4..],
            [
                "--local-root",
                SOURCE_LOCAL_ROOT,
                "--to-secret-dir",
                BACKUP_SECRET_MOUNT
            ]
        );
    }

    #[test]
    fn status_mirrors_the_jobs_final_conditions() {
        let t = task(store("S3", "a", None), store("S3", "b", None));
        let empty = copy_task_status(&t, None, Some("boom".into()));
        assert_eq!(
            (
                empty.conditions,
                empty.observed_generation,
                empty.last_error.as_deref()
            ),
            (None, Some(3), Some("boom"))
        );
        let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let job = Job {
            status: Some(JobStatus {
                conditions: Some(vec![
                    JobCondition {
                        type_: "Complete".into(),
                        status: "True".into(),
                        last_transition_time: Some(now.clone()),
                        ..JobCondition::default()
                    },
                    JobCondition {
                        type_: "Suspended".into(),
                        status: "False".into(),
                        last_transition_time: Some(now),
                        ..JobCondition::default()
                    },
                ]),
                ..JobStatus::default()
            }),
            ..Job::default()
        };
        let status = copy_task_status(&t, Some(&job), None);
        let conditions = status.conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status),
            ("Succeeded", ConditionStatus::True)
        );
    }
}
