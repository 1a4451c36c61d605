//! Rules for `spec.backup`: the backup server, the object store, schedules and retention.

use super::Problems;
use super::format::{parse_url, request_uri_problem};
use super::spec::{
    check_cron, check_duration, check_enum, check_image, check_resources, check_size, check_tls,
};
use crate::backup::{BackupSpec, StoreSpec};
use crate::duration::parse_go_duration;
use crate::enums::{CompressionPolicy, GarbageCollectionPolicy};
use crate::etcd::Etcd;
use crate::provider::StorageProvider;

pub(super) fn check(etcd: &Etcd, p: &mut Problems) {
    let backup = &etcd.spec.backup;
    if let Some(tls) = &backup.tls {
        // Without a client certificate the agents serve HTTPS and keep asking for the token.
        check_tls("spec.backup.tls", tls, None, p);
    }
    check_image("spec.backup.image", backup.image.as_ref(), p);
    if let Some(store) = &backup.store {
        check_store(store, "spec.backup.store", p);
    }
    check_resources("spec.backup.resources", backup.resources.as_ref(), p);
    if let Some(compaction) = &backup.snapshot_compaction {
        check_resources(
            "spec.backup.snapshotCompaction.resources",
            compaction.resources.as_ref(),
            p,
        );
        for (path, value) in [
            (
                "spec.backup.snapshotCompaction.eventsThreshold",
                compaction.events_threshold,
            ),
            (
                "spec.backup.snapshotCompaction.triggerFullSnapshotThreshold",
                compaction.trigger_full_snapshot_threshold,
            ),
        ] {
            if let Some(v) = value
                && v < 1
            {
                p.add(
                    path,
                    format!("{v} is too small; use a positive number of events"),
                );
            }
        }
    }
    check_cron(
        "spec.backup.fullSnapshotSchedule",
        backup.full_snapshot_schedule.as_ref(),
        p,
    );
    check_enum(
        "spec.backup.garbageCollectionPolicy",
        backup.garbage_collection_policy.as_ref(),
        GarbageCollectionPolicy::parse,
        GarbageCollectionPolicy::allowed(),
        p,
    );
    if let Some(max) = backup.max_backups_limit_based_gc
        && max < 1
    {
        p.add(
            "spec.backup.maxBackupsLimitBasedGC",
            format!("{max} is too small; keep at least 1 full snapshot"),
        );
    }
    check_duration(
        "spec.backup.garbageCollectionPeriod",
        backup.garbage_collection_period.as_ref(),
        true,
        p,
    );
    // 0s is allowed: a period below one second turns delta snapshots off.
    check_duration(
        "spec.backup.deltaSnapshotPeriod",
        backup.delta_snapshot_period.as_ref(),
        false,
        p,
    );
    check_gc_period_exceeds_delta_period(backup, p);
    check_size(
        "spec.backup.deltaSnapshotMemoryLimit",
        backup.delta_snapshot_memory_limit.as_ref(),
        p,
    );
    check_duration(
        "spec.backup.deltaSnapshotRetentionPeriod",
        backup.delta_snapshot_retention_period.as_ref(),
        false,
        p,
    );
    if let Some(compression) = &backup.compression {
        check_enum(
            "spec.backup.compression.policy",
            compression.policy.as_ref(),
            CompressionPolicy::parse,
            CompressionPolicy::allowed(),
            p,
        );
    }
    check_duration(
        "spec.backup.etcdSnapshotTimeout",
        backup.etcd_snapshot_timeout.as_ref(),
        true,
        p,
    );
    if let Some(le) = &backup.leader_election {
        check_duration(
            "spec.backup.leaderElection.reelectionPeriod",
            le.reelection_period.as_ref(),
            true,
            p,
        );
        check_duration(
            "spec.backup.leaderElection.etcdConnectionTimeout",
            le.etcd_connection_timeout.as_ref(),
            true,
            p,
        );
    }
}

/// druid's rule: when both are set, garbage collection must run less often than deltas.
fn check_gc_period_exceeds_delta_period(backup: &BackupSpec, p: &mut Problems) {
    let (Some(gc_text), Some(delta_text)) = (
        &backup.garbage_collection_period,
        &backup.delta_snapshot_period,
    ) else {
        return;
    };
    let (Ok(gc), Ok(delta)) = (parse_go_duration(gc_text), parse_go_duration(delta_text)) else {
        return; // already reported
    };
    // druid's CEL rule compares whole seconds (`duration(...).getSeconds()`).
    if gc.as_secs() <= delta.as_secs() {
        p.add(
            "spec.backup.garbageCollectionPeriod",
            format!(
                "{gc_text:?} must be greater than spec.backup.deltaSnapshotPeriod ({delta_text:?}); lengthen the garbage collection period or shorten the delta period"
            ),
        );
    }
}

/// The rules of one store spec at `path` (`spec.backup.store`, or a copy task's stores).
pub(super) fn check_store(store: &StoreSpec, path: &str, p: &mut Problems) {
    let provider = match store.provider.as_deref() {
        None | Some("") => {
            p.add(
                format!("{path}.provider"),
                format!(
                    "is required when {path} is set; use one of {} (or remove {path} to run without backups)",
                    StorageProvider::accepted_names().join(", ")
                ),
            );
            None
        }
        Some(name) => {
            let parsed = StorageProvider::from_spec(name);
            if parsed.is_none() {
                p.add(
                    format!("{path}.provider"),
                    format!(
                        "{name:?} is not a known provider; use one of {} (names are case-sensitive)",
                        StorageProvider::accepted_names().join(", ")
                    ),
                );
            }
            parsed
        }
    };
    match store.container.as_deref() {
        None | Some("") => {
            if provider.is_some_and(|p| p != StorageProvider::Local) {
                p.add(
                    format!("{path}.container"),
                    "is required for this provider; name the bucket, e.g. \"etcd-backups\"",
                );
            }
        }
        Some(c) => {
            // druid's pattern `^[a-zA-Z0-9][a-zA-Z0-9._-]{1,61}[a-zA-Z0-9]$`: the name reaches a
            // root chown in druid's init container, so no shell or path characters.
            let bytes = c.as_bytes();
            let valid = (3..=63).contains(&bytes.len())
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric();
            if !valid {
                p.add(
                    format!("{path}.container"),
                    format!(
                        "{c:?} is not a valid container name; use 3-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit"
                    ),
                );
            }
        }
    }
    if store.prefix.trim().is_empty() {
        p.add(
            format!("{path}.prefix"),
            "is empty; give the key prefix this cluster's snapshots live under, e.g. the Etcd name",
        );
    }
    if let Some(endpoint) = &store.endpoint_override {
        // druid's rule is Go's url.ParseRequestURI; quorate's object stores speak HTTP(S), so a
        // URL with another scheme is refused too (documented), while `host:port` means https.
        let problem = request_uri_problem(endpoint).or_else(|| {
            if !endpoint.contains("://") {
                return None; // host:port
            }
            match parse_url(endpoint) {
                Ok(u) if u.scheme != "http" && u.scheme != "https" => {
                    Some(format!("{endpoint:?} uses scheme {:?}", u.scheme))
                }
                Ok(_) => None,
                Err(e) => Some(e),
            }
        });
        if let Some(problem) = problem {
            p.add(
                format!("{path}.endpointOverride"),
                format!(
                    "{problem}; use an http:// or https:// URL such as \"https://s3.example.com\" (host:port alone means https)"
                ),
            );
        }
    }
    if let Some(secret) = &store.secret_ref {
        // The name is also a directory name in local mode (`secrets/<name>/`).
        super::spec::check_secret_name(
            &format!("{path}.secretRef"),
            secret.name.as_deref(),
            "the store credentials (or remove secretRef to use the provider's default credentials)",
            p,
        );
    }
}
