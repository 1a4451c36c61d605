//! An etcd version change as the members carry it out: each member publishes the etcd version
//! it runs and the cluster version its etcd reports; when a store is configured, no member
//! restarts onto another version before the backup leader reports a full snapshot taken for
//! it (the state to go back to); and a downgrade goes through etcd's downgrade API: the
//! leader's agent enables it, and a member restarts onto the lower binary only once its etcd
//! reports the lower cluster version and storage version.

use quorate_api::EtcdVersion;

use crate::cluster_config::ClusterConfig;
use crate::hibernation::FinalSnapshotReport;
use crate::lease::MemberLease;

/// Member-lease annotation: the version of the etcd server the member runs (e.g. `3.5.30`).
pub const RUNNING_VERSION_ANNOTATION: &str = "quorate.io/etcd-version";

/// Member-lease annotation: the cluster version the member's etcd reports (e.g. `3.5`), the
/// evidence a chained version change waits for before its next step.
pub const CLUSTER_VERSION_ANNOTATION: &str = "quorate.io/etcd-cluster-version";
/// Member-lease annotation: the cluster version recorded in the member's newest raft snapshot
/// (its `member/snap/*.snap` file), or `none` when its etcd has not taken one: the evidence the 3.6 → 3.7 step waits for.
pub const SNAPSHOT_CLUSTER_VERSION_ANNOTATION: &str = "quorate.io/etcd-snapshot-cluster-version";

/// The cluster version in etcd's `/metrics` text (`etcd_cluster_version{cluster_version="3.6"} 1`,
/// served by every version quorate runs); `None` when etcd does not report one yet.
pub fn cluster_version_from_metrics(metrics: &str) -> Option<EtcdVersion> {
    metrics
        .lines()
        .filter(|line| line.starts_with("etcd_cluster_version{"))
        .find_map(|line| {
            let (_, rest) = line.split_once("cluster_version=\"")?;
            let (version, value) = rest.split_once('"')?;
            let value = value.trim().trim_start_matches('}').trim();
            (value == "1").then(|| EtcdVersion::parse(version).ok())?
        })
}

/// What a member's etcd says about a downgrade (its status and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DowngradeEvidence {
    /// The cluster version it reports.
    pub cluster: Option<EtcdVersion>,
    /// The downgrade etcd has enabled (its target), if any (`DowngradeInfo`, 3.6+).
    pub enabled_target: Option<EtcdVersion>,
    /// The version of its data (`storageVersion`, 3.6+; `None` when it reports none).
    pub storage: Option<EtcdVersion>,
}

/// What the leader's agent asks etcd's downgrade API for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DowngradeAction {
    /// `downgrade validate` then `downgrade enable` to this version: the members are
    /// configured one minor below the cluster version.
    Enable(EtcdVersion),
    /// `downgrade cancel`: a downgrade is enabled to another version than the members are
    /// configured with (the request went back up).
    Cancel,
}

/// The downgrade call the leader's agent makes for members configured with `configured`,
/// from its etcd's `evidence`; `None` when there is nothing to ask.
pub fn downgrade_action(
    configured: EtcdVersion,
    evidence: DowngradeEvidence,
) -> Option<DowngradeAction> {
    match evidence.enabled_target {
        Some(target) if target != configured => Some(DowngradeAction::Cancel),
        Some(_) => None,
        None => evidence
            .cluster
            .filter(|cluster| *cluster > configured)
            .map(|_| DowngradeAction::Enable(configured)),
    }
}

/// Whether a member running `running` may restart onto the lower `configured` version, as far
/// as etcd's downgrade goes: only once its etcd reports `configured` as the cluster version
/// (the downgrade is enabled) and its data no newer storage version. `Err` says what it waits
/// for. An upgrade or no change passes.
pub fn downgrade_gate(
    running: EtcdVersion,
    configured: EtcdVersion,
    evidence: DowngradeEvidence,
) -> Result<(), String> {
    if configured >= running {
        return Ok(());
    }
    match evidence.cluster {
        Some(cluster) if cluster == configured => {}
        reported => {
            let now = reported.map_or_else(|| "none yet".to_string(), |v| v.to_string());
            return Err(format!(
                "the downgrade to etcd {configured} waits for etcd to report cluster version \
                 {configured} (the leader's agent enables it through etcd's downgrade API); it \
                 reports {now}"
            ));
        }
    }
    match evidence.storage {
        Some(storage) if storage > configured => Err(format!(
            "the downgrade to etcd {configured} waits for etcd to migrate this member's data \
             from storage version {storage} to {configured}"
        )),
        _ => Ok(()),
    }
}

/// The snapshot request of an upgrade to `version`: the backup leader reports the full
/// snapshot it took for it under this name (`quorate.io/final-snapshot`).
pub fn snapshot_request(version: EtcdVersion) -> String {
    format!("etcd-{version}")
}

/// The full snapshot an etcd upgrade to `latest` waits for (its request name), while this
/// member (running `running`) or, seen from the leader (`leads`), any member's lease is not on
/// `latest`'s version yet; `None` without a bucket.
pub fn upgrade_snapshot_request(
    running: EtcdVersion,
    latest: &ClusterConfig,
    leads: bool,
    leases: &[MemberLease],
) -> Option<String> {
    latest.backup.as_ref()?;
    let behind =
        running != latest.etcd_version || (leads && !members_behind(latest, leases).is_empty());
    behind.then(|| snapshot_request(latest.etcd_version))
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
        "the change to etcd {} waits for the backup leader's full snapshot{failed}",
        cluster.etcd_version
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bucket's configuration, for the cases that turn on with backups.
    pub(crate) fn a_store() -> crate::cluster_config::BackupConfig {
        crate::cluster_config::BackupConfig {
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
            accept_plaintext_before: None,
        }
    }
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
    fn the_cluster_version_is_read_from_etcds_metrics() {
        let text = "# HELP etcd_cluster_version Which version is running.\n\
                    # TYPE etcd_cluster_version gauge\n\
                    etcd_cluster_version{cluster_version=\"3.6\"} 1\n\
                    etcd_server_version{server_version=\"3.6.16\"} 1\n";
        assert_eq!(
            cluster_version_from_metrics(text),
            EtcdVersion::parse("3.6").ok()
        );
        // An old value etcd keeps at 0 is not the cluster version.
        let moved = "etcd_cluster_version{cluster_version=\"3.5\"} 0\n\
                     etcd_cluster_version{cluster_version=\"3.6\"} 1\n";
        assert_eq!(
            cluster_version_from_metrics(moved),
            EtcdVersion::parse("3.6").ok()
        );
        assert_eq!(
            cluster_version_from_metrics("etcd_server_has_leader 1\n"),
            None
        );
    }

    #[test]
    fn the_leader_enables_a_downgrade_one_minor_below_and_cancels_a_changed_one() {
        fn v(s: &str) -> EtcdVersion {
            EtcdVersion::parse(s).unwrap()
        }
        let evidence = |cluster: &str, enabled: Option<&str>| DowngradeEvidence {
            cluster: EtcdVersion::parse(cluster).ok(),
            enabled_target: enabled.map(v),
            storage: None,
        };
        assert_eq!(
            downgrade_action(v("3.6"), evidence("3.7", None)),
            Some(DowngradeAction::Enable(v("3.6")))
        );
        assert_eq!(
            downgrade_action(v("3.6"), evidence("3.6", Some("3.6"))),
            None
        );
        assert_eq!(downgrade_action(v("3.6"), evidence("3.6", None)), None);
        assert_eq!(downgrade_action(v("3.7"), evidence("3.7", None)), None);
        // Asked back up to 3.6 while a downgrade to 3.5 is enabled: cancel it.
        assert_eq!(
            downgrade_action(v("3.6"), evidence("3.5", Some("3.5"))),
            Some(DowngradeAction::Cancel)
        );
        // Unknown cluster version: nothing to ask.
        assert_eq!(downgrade_action(v("3.6"), evidence("", None)), None);
    }

    #[test]
    fn a_member_restarts_onto_a_lower_version_only_after_etcd_moved_version_and_data() {
        let v = |s| EtcdVersion::parse(s).unwrap();
        let (running, configured) = (v("3.6"), v("3.5"));
        let mut evidence = DowngradeEvidence {
            cluster: Some(v("3.6")),
            enabled_target: None,
            storage: Some(v("3.6")),
        };
        let why = downgrade_gate(running, configured, evidence).unwrap_err();
        assert!(
            why.contains("cluster version 3.5") && why.contains("reports 3.6"),
            "{why}"
        );
        evidence.cluster = None;
        assert!(
            downgrade_gate(running, configured, evidence)
                .unwrap_err()
                .contains("none yet")
        );
        evidence.cluster = Some(v("3.5"));
        evidence.enabled_target = Some(v("3.5"));
        let why = downgrade_gate(running, configured, evidence).unwrap_err();
        assert!(why.contains("storage version 3.6 to 3.5"), "{why}");
        evidence.storage = Some(v("3.5"));
        assert_eq!(downgrade_gate(running, configured, evidence), Ok(()));
        // An upgrade is not a downgrade's business.
        assert_eq!(
            downgrade_gate(v("3.5"), v("3.6"), DowngradeEvidence::default()),
            Ok(())
        );
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
        let v34 = EtcdVersion::V3_4;
        assert_eq!(
            upgrade_snapshot_request(v34, &cluster, false, &[]),
            None,
            "without a bucket there is no snapshot to ask for"
        );
        cluster.backup = Some(a_store());
        let request = Some(snapshot_request(EtcdVersion::V3_5));
        assert_eq!(upgrade_snapshot_request(v34, &cluster, false, &[]), request);
        let v35 = EtcdVersion::V3_5;
        assert_eq!(
            upgrade_snapshot_request(v35, &cluster, false, &leases),
            None
        );
        assert_eq!(
            upgrade_snapshot_request(v35, &cluster, true, &leases),
            request
        );
    }

    #[test]
    fn with_a_store_the_upgrade_waits_for_its_full_snapshot() {
        let mut cluster = three_members();
        cluster.etcd_version = EtcdVersion::V3_5;
        let v34 = EtcdVersion::V3_4;
        // Without a store there is nothing to wait for.
        assert_eq!(snapshot_gate(v34, &cluster, &[]), Ok(()));
        cluster.backup = Some(a_store());
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
