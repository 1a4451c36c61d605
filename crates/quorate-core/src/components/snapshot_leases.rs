//! Snapshot leases `<name>-full-snap` and `<name>-delta-snap`: the backup leader records the
//! revision of its newest full and delta snapshot in them, and `BackupReady` is computed from
//! them. They exist only while backups are configured.

use k8s_openapi::api::coordination::v1::Lease;
use quorate_api::Etcd;
use quorate_api::names::{component, delta_snapshot_lease_name, full_snapshot_lease_name};

use crate::last_operation::ErrorCode;

use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when a snapshot lease cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncSnapshotLease;

/// The full and delta snapshot leases (in that order) when `spec.backup.store` is set; none
/// otherwise, and then the controller deletes existing ones, as druid does.
pub fn build(etcd: &Etcd) -> Result<Vec<Lease>, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    if !etcd.backup_enabled() {
        return Ok(Vec::new());
    }
    Ok([
        full_snapshot_lease_name(&id.name),
        delta_snapshot_lease_name(&id.name),
    ]
    .iter()
    .map(|name| Lease {
        metadata: id.object_meta(component::SNAPSHOT_LEASE, name),
        spec: None,
    })
    .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use quorate_api::StoreSpec;

    #[test]
    fn only_with_a_store() {
        let mut e = etcd("etcd-main", 3);
        assert!(build(&e).unwrap().is_empty());
        e.spec.backup.store = Some(StoreSpec {
            provider: Some("Local".into()),
            container: Some("bucket".into()),
            prefix: "etcd-main".into(),
            ..StoreSpec::default()
        });
        let leases = build(&e).unwrap();
        let names: Vec<_> = leases
            .iter()
            .map(|l| l.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["etcd-main-full-snap", "etcd-main-delta-snap"]);
        assert!(leases.iter().all(|l| l.spec.is_none()));
        assert_eq!(
            leases[0].metadata.labels.clone().unwrap()["app.kubernetes.io/component"],
            "etcd-snapshot-lease"
        );
    }
}
