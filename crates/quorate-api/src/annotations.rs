//! Annotation keys and values with a meaning to quorate, spelled as etcd-druid spells them so
//! existing tooling (and people's habits) keep working.

use std::collections::BTreeMap;

/// Deprecated operation annotation (`gardener.cloud/operation: reconcile`) on an `Etcd`.
pub const GARDENER_OPERATION: &str = "gardener.cloud/operation";
/// Operation annotation (`druid.gardener.cloud/operation: reconcile`) on an `Etcd`: requests
/// a spec reconcile when auto-reconcile is off; removed after a successful reconcile.
pub const DRUID_OPERATION: &str = "druid.gardener.cloud/operation";
/// The value of the operation annotations that requests a reconcile.
pub const OPERATION_RECONCILE: &str = "reconcile";
/// Any value suspends spec reconciliation of the `Etcd`; status is still updated.
pub const SUSPEND_ETCD_SPEC_RECONCILE: &str = "druid.gardener.cloud/suspend-etcd-spec-reconcile";
/// Any value lets anyone change the resources managed for the `Etcd`.
pub const DISABLE_ETCD_COMPONENT_PROTECTION: &str =
    "druid.gardener.cloud/disable-etcd-component-protection";
/// Any value: only the ConfigMap and StatefulSet are managed; the other runtime components are
/// deleted.
pub const DISABLE_ETCD_RUNTIME_COMPONENT_CREATION: &str =
    "druid.gardener.cloud/disable-etcd-runtime-component-creation";
/// Any value stops member and snapshot lease renewals.
pub const DISABLE_MEMBER_STATUS_REPORTING: &str =
    "druid.gardener.cloud/disable-member-status-reporting";
/// On an `Etcd`: the PodDisruptionBudget gets `unhealthyPodEvictionPolicy: AlwaysAllow`.
pub const ALLOW_UNHEALTHY_POD_EVICTION: &str =
    "resources.druid.gardener.cloud/allow-unhealthy-pod-eviction";
/// On a member lease: `"true"` when all of the member's advertised peer URLs use https.
pub const MEMBER_TLS_ENABLED: &str = "member.etcd.gardener.cloud/tls-enabled";
/// On the pod template: checksum of the rendered ConfigMap, so a config change rolls pods.
pub const CHECKSUM_ETCD_CONFIGMAP: &str = "checksum/etcd-configmap";
/// quorate's own: `"true"` lets this cluster restore from and write to a backup prefix another
/// cluster (incarnation) claimed, e.g. after the cluster's state was lost and recreated.
pub const ADOPT_BACKUPS: &str = "quorate.io/adopt-backups";
/// quorate's own: asks for recovery after quorum loss even though some members did not report
/// that they lost their data (they are treated as lost). The value names the request (any
/// text); each request is carried out once. `quorate recover NAME` is the local equivalent.
pub const RECOVER: &str = "quorate.io/recover";
/// quorate's own: the backup leader may start a new backup chain in a prefix whose chain
/// belongs to another history (the value names the request). Without it the leader stops
/// backing up there and says why in `BackupReady`.
pub const NEW_BACKUP_CHAIN: &str = "quorate.io/new-backup-chain";
/// quorate's own: `"true"` lets a hibernation (`spec.replicas: 0`) stop the members although
/// the final full snapshot could not be taken. Without it the members keep running until the
/// snapshot is in the bucket.
pub const HIBERNATE_WITHOUT_FINAL_SNAPSHOT: &str = "quorate.io/hibernate-without-final-snapshot";
/// quorate's own: `"true"` lets a chained upgrade take its 3.6 → 3.7 step although some member
/// has not reported a raft snapshot taken at cluster version 3.6. etcd 3.7 cannot replay the
/// 3.5-era entries an older write-ahead log may still hold, so without it the step waits.
pub const ETCD_3_7_WITHOUT_SNAPSHOT: &str = "quorate.io/etcd-3.7-without-snapshot";
/// quorate's own: the Secret holding the keys that encrypt every backup object: one entry per
/// key, named by its key ID (32 bytes, 64 hex digits or base64), and `active` naming the key
/// new objects are encrypted with; the others stay for reading older objects. Without it
/// backups are written in clear.
pub const BACKUP_ENCRYPTION_SECRET: &str = "quorate.io/backup-encryption-secret";
/// quorate's own: an RFC 3339 time (`2026-11-20T10:00:00Z`). With backup encryption keys
/// configured, the agents' restores accept clear (unencrypted) objects whose names say they
/// were written before it: the migration window of a bucket that held clear backups before
/// encryption was turned on, as `quorate restore --accept-plaintext-before` is for the CLI.
/// Without it a clear object is refused, so a writer of the bucket cannot slip in its own.
pub const ACCEPT_PLAINTEXT_BEFORE: &str = "quorate.io/accept-plaintext-before";
/// quorate's own: `"true"` keeps the PersistentVolumeClaims and member Leases of members a
/// scale-in removed (by default they are deleted once etcd removed the member).
pub const KEEP_REMOVED_MEMBER_VOLUMES: &str = "quorate.io/keep-removed-member-volumes";
/// Finalizer on an `Etcd` (and on the Secrets it references).
pub const ETCD_FINALIZER: &str = "druid.gardener.cloud/etcd-druid";

/// Whether the annotations request a reconcile (either operation annotation = `reconcile`).
pub fn has_reconcile_operation(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| {
        [DRUID_OPERATION, GARDENER_OPERATION]
            .iter()
            .any(|k| a.get(*k).map(String::as_str) == Some(OPERATION_RECONCILE))
    })
}

/// Whether spec reconciliation is suspended (annotation present, any value).
pub fn is_spec_reconcile_suspended(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| a.contains_key(SUSPEND_ETCD_SPEC_RECONCILE))
}

/// Whether the managed resources are protected (the disable annotation is absent).
pub fn are_components_protected(annotations: Option<&BTreeMap<String, String>>) -> bool {
    !annotations.is_some_and(|a| a.contains_key(DISABLE_ETCD_COMPONENT_PROTECTION))
}

/// The etcd minor version a cluster runs (`"3.4"`, `"3.5"`, `"3.6"` or `"3.7"`). Absent: a new cluster gets
/// [`crate::etcd_version::EtcdVersion::DEFAULT`], an existing one keeps the version it runs.
/// Raising it upgrades the members one at a time; lowering it is refused.
pub const ETCD_VERSION: &str = "quorate.io/etcd-version";

/// The Secret named by [`BACKUP_ENCRYPTION_SECRET`] on `etcd`, if set and not empty.
pub fn backup_encryption_secret(etcd: &crate::Etcd) -> Option<&str> {
    etcd.metadata
        .annotations
        .as_ref()?
        .get(BACKUP_ENCRYPTION_SECRET)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// The migration window [`ACCEPT_PLAINTEXT_BEFORE`] sets on `etcd`: `None` when it is unset
/// or empty, the instant when it is an RFC 3339 time, else why it is not one.
pub fn accept_plaintext_before(etcd: &crate::Etcd) -> Result<Option<jiff::Timestamp>, String> {
    let Some(value) = etcd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ACCEPT_PLAINTEXT_BEFORE))
        .filter(|v| !v.is_empty())
    else {
        return Ok(None);
    };
    value.parse::<jiff::Timestamp>().map(Some).map_err(|e| {
        format!(
            "{value:?} is not an RFC 3339 time with a UTC offset, e.g. \"2026-11-20T10:00:00Z\" \
             (clear backups written before it are accepted): {e}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reconcile_operation_accepts_both_keys_and_only_reconcile() {
        assert!(has_reconcile_operation(Some(&ann(&[(
            DRUID_OPERATION,
            "reconcile"
        )]))));
        assert!(has_reconcile_operation(Some(&ann(&[(
            GARDENER_OPERATION,
            "reconcile"
        )]))));
        assert!(!has_reconcile_operation(Some(&ann(&[(
            DRUID_OPERATION,
            "restore"
        )]))));
        assert!(!has_reconcile_operation(Some(&ann(&[]))));
        assert!(!has_reconcile_operation(None));
    }

    #[test]
    fn presence_annotations_ignore_the_value() {
        let a = ann(&[
            (SUSPEND_ETCD_SPEC_RECONCILE, ""),
            (DISABLE_ETCD_COMPONENT_PROTECTION, "false"),
        ]);
        assert!(is_spec_reconcile_suspended(Some(&a)));
        assert!(!are_components_protected(Some(&a)));
        assert!(!is_spec_reconcile_suspended(None));
        assert!(are_components_protected(None));
    }
}
