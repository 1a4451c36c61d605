//! An etcd version upgrade as the members carry it out: each member publishes the etcd version
//! it runs, and when a store is configured, no member restarts onto the new version before the
//! backup leader reports a full snapshot taken for it (the state to go back to).

use quorate_api::EtcdVersion;

use crate::cluster_config::ClusterConfig;
use crate::hibernation::FinalSnapshotReport;
use crate::lease::MemberLease;

/// Member-lease annotation: the version of the etcd server the member runs (e.g. `3.5.30`).
pub const RUNNING_VERSION_ANNOTATION: &str = "quorate.io/etcd-version";

/// The snapshot request of an upgrade to `version`: the backup leader reports the full
/// snapshot it took for it under this name (`quorate.io/final-snapshot`).
pub fn snapshot_request(version: EtcdVersion) -> String {
    format!("etcd-{version}")
}

/// The version a member's lease says it runs.
pub fn running_version(lease: &MemberLease) -> Option<EtcdVersion> {
    EtcdVersion::parse(lease.annotations.get(RUNNING_VERSION_ANNOTATION)?).ok()
}

/// The members of `cluster` whose leases show another version than its own (a lease without
/// a version, such as a new member's, is not evidence of an upgrade in progress).
pub fn members_behind(cluster: &ClusterConfig, leases: &[MemberLease]) -> Vec<String> {
    cluster
        .members
        .iter()
        .filter(|m| {
            leases
                .iter()
                .find(|l| l.name == m.lease_name)
                .and_then(running_version)
                .is_some_and(|v| v != cluster.etcd_version)
        })
        .map(|m| m.name.clone())
        .collect()
}

/// Whether a member running `running` may restart onto `cluster`'s version now, as far as
/// backups go: with a store, only once a lease reports the upgrade's full snapshot. `Err`
/// says what is missing.
pub fn snapshot_gate(
    running: EtcdVersion,
    cluster: &ClusterConfig,
    leases: &[MemberLease],
) -> Result<(), String> {
    if running == cluster.etcd_version || cluster.backup.is_none() {
        return Ok(());
    }
    let request = snapshot_request(cluster.etcd_version);
    let reports: Vec<FinalSnapshotReport> = leases
        .iter()
        .filter_map(FinalSnapshotReport::from_lease)
        .filter(|r| r.request == request)
        .collect();
    if reports.iter().any(|r| r.revision.is_some()) {
        return Ok(());
    }
    let failed = reports
        .iter()
        .find_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("; the last attempt failed: {e}"))
        })
        .unwrap_or_default();
    Err(format!(
        "the upgrade to etcd {} waits for the backup leader's full snapshot{failed}",
        cluster.etcd_version
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hibernation::FINAL_SNAPSHOT_ANNOTATION;
    use crate::member_etcd_config::tests::three_members;

    fn lease(name: &str, version: &str) -> MemberLease {
        let mut lease = MemberLease::new(name.to_string());
        lease
            .annotations
            .insert(RUNNING_VERSION_ANNOTATION.into(), version.into());
        lease
    }

    fn with_report(mut lease: MemberLease, report: &FinalSnapshotReport) -> MemberLease {
        lease.annotations.insert(
            FINAL_SNAPSHOT_ANNOTATION.into(),
            serde_json::to_string(report).unwrap(),
        );
        lease
    }

    #[test]
    fn members_behind_are_those_running_another_version() {
        let mut cluster = three_members();
        cluster.etcd_version = EtcdVersion::V3_5;
        let leases = [
            lease("etcd-main-0", "3.5.30"),
            lease("etcd-main-1", "3.4.23"),
        ];
        assert_eq!(members_behind(&cluster, &leases), ["etcd-main-1"]);
    }

    #[test]
    fn with_a_store_the_upgrade_waits_for_its_full_snapshot() {
        let mut cluster = three_members();
        cluster.etcd_version = EtcdVersion::V3_5;
        let v34 = EtcdVersion::V3_4;
        // Without a store there is nothing to wait for.
        assert_eq!(snapshot_gate(v34, &cluster, &[]), Ok(()));
        cluster.backup = Some(crate::cluster_config::BackupConfig {
            spec: quorate_api::BackupSpec::default(),
            local_root: "/b".into(),
            secret_dir: None,
            full_snapshot_lease: "full".into(),
            delta_snapshot_lease: "delta".into(),
            cluster_uid: "uid".into(),
            adopt_foreign_backups: false,
            new_chain_request: None,
            encryption_secret: None,
            encryption_key_dir: None,
        });
        let why = snapshot_gate(v34, &cluster, &[]).unwrap_err();
        assert!(
            why.contains("waits for the backup leader's full snapshot"),
            "{why}"
        );
        let failed = FinalSnapshotReport {
            request: "etcd-3.5".into(),
            revision: None,
            failures: 1,
            error: Some("store unreachable".into()),
        };
        let leases = [with_report(lease("etcd-main-0", "3.4.23"), &failed)];
        let why = snapshot_gate(v34, &cluster, &leases).unwrap_err();
        assert!(why.contains("store unreachable"), "{why}");
        // A hibernation's report is not the upgrade's.
        let other = FinalSnapshotReport {
            request: "7".into(),
            revision: Some(40),
            ..failed.clone()
        };
        let leases = [with_report(lease("etcd-main-0", "3.4.23"), &other)];
        assert!(snapshot_gate(v34, &cluster, &leases).is_err());
        let taken = FinalSnapshotReport {
            revision: Some(42),
            error: None,
            ..failed
        };
        let leases = [with_report(lease("etcd-main-0", "3.4.23"), &taken)];
        assert_eq!(snapshot_gate(v34, &cluster, &leases), Ok(()));
        // A member already on the new version restarts without asking.
        assert_eq!(snapshot_gate(EtcdVersion::V3_5, &cluster, &[]), Ok(()));
    }
}
