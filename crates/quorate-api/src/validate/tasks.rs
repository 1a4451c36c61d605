//! Validation of druid's task resources, for the webhook (Kubernetes 1.20 has no CEL, so the
//! rules druid's CRDs carry as CEL are here) and for `quorate backups copy --task`.

use crate::duration::parse_go_duration;
use crate::tasks::{
    EtcdCopyBackupsTask, EtcdOpsTask, MIN_TIMEOUT_SECONDS_DELTA, MIN_TIMEOUT_SECONDS_FULL,
};

use super::backup::check_store;
use super::format::{is_dns1123_label, is_dns1123_subdomain};
use super::spec::check_labels;
use super::{Problems, ValidationErrors};

fn check_name(name: Option<&str>, p: &mut Problems) {
    match name {
        None | Some("") => p.add("metadata.name", "is required"),
        Some(name) if !is_dns1123_subdomain(name) => p.add(
            "metadata.name",
            format!(
                "{name:?} is not a valid name; use lowercase letters, digits, '-' and '.', at most 253 characters"
            ),
        ),
        Some(_) => {}
    }
}

/// Checks a new `EtcdOpsTask`: the `Etcd` it names, exactly one operation, and that
/// operation's values (druid's CRD rules).
pub fn validate_ops_task(task: &EtcdOpsTask) -> Result<(), ValidationErrors> {
    let mut p = Problems::default();
    check_name(task.metadata.name.as_deref(), &mut p);
    let spec = &task.spec;
    match spec.etcd_name.as_deref() {
        None | Some("") => p.add(
            "spec.etcdName",
            "is required; name the Etcd (in the task's namespace) the task acts on",
        ),
        Some(name) if !is_dns1123_label(name, 63) => p.add(
            "spec.etcdName",
            format!("{name:?} is not a valid Etcd name"),
        ),
        Some(_) => {}
    }
    if let Some(ttl) = spec.ttl_seconds_after_finished
        && ttl < 1
    {
        p.add(
            "spec.ttlSecondsAfterFinished",
            format!("{ttl} is less than 1; give the seconds a finished task is kept"),
        );
    }
    match &spec.config.on_demand_snapshot {
        None => p.add(
            "spec.config",
            "sets no operation; set exactly one, e.g. onDemandSnapshot: {type: full}",
        ),
        Some(snapshot) => {
            let path = "spec.config.onDemandSnapshot";
            match snapshot.type_.as_str() {
                "full" => {}
                "delta" => {
                    if snapshot.is_final == Some(true) {
                        p.add(
                            format!("{path}.isFinal"),
                            "must be false (or omitted) when type is \"delta\"; only a full snapshot can be final",
                        );
                    }
                }
                other => p.add(
                    format!("{path}.type"),
                    format!("{other:?} is not a snapshot type; use \"full\" or \"delta\""),
                ),
            }
            let minima = [
                (
                    "timeoutSecondsFull",
                    snapshot.timeout_seconds_full,
                    MIN_TIMEOUT_SECONDS_FULL,
                ),
                (
                    "timeoutSecondsDelta",
                    snapshot.timeout_seconds_delta,
                    MIN_TIMEOUT_SECONDS_DELTA,
                ),
            ];
            for (field, value, min) in minima {
                if let Some(value) = value
                    && value < min
                {
                    p.add(
                        format!("{path}.{field}"),
                        format!("{value} is less than the minimum {min} (seconds)"),
                    );
                }
            }
        }
    }
    p.into_errors()
}

/// Checks a change to an `EtcdOpsTask`: its spec is immutable (as druid's CEL rules say).
pub fn validate_ops_task_update(
    old: &EtcdOpsTask,
    new: &EtcdOpsTask,
) -> Result<(), ValidationErrors> {
    let mut p = Problems::default();
    let (o, n) = (&old.spec, &new.spec);
    if o.config != n.config {
        p.add(
            "spec.config",
            "config is immutable; create a new task instead",
        );
    }
    if o.etcd_name != n.etcd_name {
        p.add(
            "spec.etcdName",
            "etcdName is immutable; create a new task instead",
        );
    }
    if o.ttl_seconds_after_finished != n.ttl_seconds_after_finished {
        p.add(
            "spec.ttlSecondsAfterFinished",
            "ttlSecondsAfterFinished is immutable",
        );
    }
    p.into_errors()
}

/// Checks a new `EtcdCopyBackupsTask`: both stores (the rules of `spec.backup.store`), the
/// wait timeout, the pod labels, and that the target is not the source.
pub fn validate_copy_task(task: &EtcdCopyBackupsTask) -> Result<(), ValidationErrors> {
    let mut p = Problems::default();
    check_name(task.metadata.name.as_deref(), &mut p);
    let spec = &task.spec;
    check_store(&spec.source_store, "spec.sourceStore", &mut p);
    check_store(&spec.target_store, "spec.targetStore", &mut p);
    let (s, t) = (&spec.source_store, &spec.target_store);
    if s.provider == t.provider
        && s.container == t.container
        && s.prefix.trim_end_matches('/') == t.prefix.trim_end_matches('/')
        && s.endpoint_override == t.endpoint_override
    {
        p.add(
            "spec.targetStore",
            "is the source store (same provider, container, prefix and endpoint); copy into another prefix or bucket",
        );
    }
    if let Some(labels) = &spec.pod_labels {
        check_labels("spec.podLabels", labels, &mut p);
    }
    if let Some(timeout) = spec
        .wait_for_final_snapshot
        .as_ref()
        .and_then(|w| w.timeout.as_deref())
        && let Err(e) = parse_go_duration(timeout)
    {
        p.add(
            "spec.waitForFinalSnapshot.timeout",
            format!("{timeout:?}: {e}; use a Go duration such as \"10m\" (0 waits without limit)"),
        );
    }
    p.into_errors()
}

/// Checks a change to an `EtcdCopyBackupsTask`: its spec is immutable, since its Job already
/// runs with it.
pub fn validate_copy_task_update(
    old: &EtcdCopyBackupsTask,
    new: &EtcdCopyBackupsTask,
) -> Result<(), ValidationErrors> {
    let mut p = Problems::default();
    if old.spec != new.spec {
        p.add(
            "spec",
            "is immutable once the task exists (its Job runs with it); delete the task and create a new one",
        );
    }
    p.into_errors()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreSpec;
    use crate::tasks::{EtcdCopyBackupsTaskSpec, EtcdOpsTaskSpec, OnDemandSnapshotConfig};

    fn ops(config: OnDemandSnapshotConfig) -> EtcdOpsTask {
        let mut task = EtcdOpsTask::new(
            "snap",
            EtcdOpsTaskSpec {
                etcd_name: Some("etcd-main".into()),
                ..EtcdOpsTaskSpec::default()
            },
        );
        task.spec.config.on_demand_snapshot = Some(config);
        task
    }

    fn snapshot(type_: &str) -> OnDemandSnapshotConfig {
        OnDemandSnapshotConfig {
            type_: type_.into(),
            ..OnDemandSnapshotConfig::default()
        }
    }

    #[test]
    fn druids_example_task_is_valid() {
        assert_eq!(validate_ops_task(&ops(snapshot("full"))), Ok(()));
        assert_eq!(validate_ops_task(&ops(snapshot("delta"))), Ok(()));
    }

    #[test]
    fn ops_task_rules_name_the_field() {
        let mut delta = snapshot("delta");
        delta.is_final = Some(true);
        delta.timeout_seconds_delta = Some(5);
        let e = validate_ops_task(&ops(delta)).unwrap_err();
        assert!(e.has_path("spec.config.onDemandSnapshot.isFinal"), "{e}");
        assert!(
            e.has_path("spec.config.onDemandSnapshot.timeoutSecondsDelta"),
            "{e}"
        );

        let mut task = ops(snapshot("incremental"));
        task.spec.etcd_name = None;
        task.spec.ttl_seconds_after_finished = Some(0);
        let e = validate_ops_task(&task).unwrap_err();
        for path in [
            "spec.config.onDemandSnapshot.type",
            "spec.etcdName",
            "spec.ttlSecondsAfterFinished",
        ] {
            assert!(e.has_path(path), "{path} missing from {e}");
        }

        let mut empty = ops(snapshot("full"));
        empty.spec.config.on_demand_snapshot = None;
        assert!(
            validate_ops_task(&empty)
                .unwrap_err()
                .has_path("spec.config")
        );
    }

    #[test]
    fn ops_task_spec_is_immutable() {
        let old = ops(snapshot("full"));
        let mut new = old.clone();
        new.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        assert_eq!(validate_ops_task_update(&old, &new), Ok(()));
        new.spec.config.on_demand_snapshot = Some(snapshot("delta"));
        new.spec.etcd_name = Some("other".into());
        let e = validate_ops_task_update(&old, &new).unwrap_err();
        assert!(
            e.has_path("spec.config") && e.has_path("spec.etcdName"),
            "{e}"
        );
    }

    fn store(provider: &str, container: &str, prefix: &str) -> StoreSpec {
        StoreSpec {
            provider: Some(provider.into()),
            container: Some(container.into()),
            prefix: prefix.into(),
            ..StoreSpec::default()
        }
    }

    fn copy(source: StoreSpec, target: StoreSpec) -> EtcdCopyBackupsTask {
        EtcdCopyBackupsTask::new(
            "copy",
            EtcdCopyBackupsTaskSpec {
                source_store: source,
                target_store: target,
                ..EtcdCopyBackupsTaskSpec::default()
            },
        )
    }

    #[test]
    fn copy_task_checks_both_stores_and_refuses_copying_onto_itself() {
        let ok = copy(store("S3", "bucket", "a"), store("Local", "backups", "a"));
        assert_eq!(validate_copy_task(&ok), Ok(()));

        let same = copy(store("S3", "bucket", "a/"), store("S3", "bucket", "a"));
        assert!(
            validate_copy_task(&same)
                .unwrap_err()
                .has_path("spec.targetStore")
        );

        let mut bad = copy(store("nimbus", "bucket", "a"), store("S3", "x", ""));
        bad.spec.wait_for_final_snapshot = Some(crate::tasks::WaitForFinalSnapshotSpec {
            enabled: true,
            timeout: Some("ten minutes".into()),
        });
        let e = validate_copy_task(&bad).unwrap_err();
        for path in [
            "spec.sourceStore.provider",
            "spec.targetStore.container",
            "spec.targetStore.prefix",
            "spec.waitForFinalSnapshot.timeout",
        ] {
            assert!(e.has_path(path), "{path} missing from {e}");
        }
    }

    #[test]
    fn copy_task_spec_is_immutable() {
        let old = copy(store("S3", "bucket", "a"), store("S3", "bucket", "b"));
        let mut new = old.clone();
        assert_eq!(validate_copy_task_update(&old, &new), Ok(()));
        new.spec.max_backups = Some(1);
        assert!(
            validate_copy_task_update(&old, &new)
                .unwrap_err()
                .has_path("spec")
        );
    }
}
