//! `snap_file` on etcd's own snapshot files: a real member of 3.5 and of 3.6, run with a low
//! `--snapshot-count` and written to, takes raft snapshots, and the newest one's recorded
//! cluster version is that member's version; before its first snapshot there is none.

use std::time::Duration;

use quorate_api::EtcdVersion;
use quorate_etcd::binaries::EtcdBinaries;
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::{EtcdMemberConfig, EtcdProcess, etcd_of_version_or_skip, eventually};

async fn snapshot_records_the_cluster_version(version: EtcdVersion) {
    let Some(binary) = etcd_of_version_or_skip(version, EtcdBinaries::default().etcd(version))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = EtcdMemberConfig::new("snap", dir.path());
    config.binary = Some(binary);
    config.extra_args = vec!["--snapshot-count=5".into()];
    let data_dir = config.data_dir.clone();
    let member = EtcdProcess::start_ready(config, Duration::from_secs(30))
        .await
        .expect("etcd starts");
    assert_eq!(quorate_etcd::snap_file::newest(&data_dir).unwrap(), None);
    let client = MemberClient::connect(&member.client_url(), None, EtcdTimeouts::fast())
        .await
        .unwrap();
    let want = format!("{version}.0");
    let file = eventually("a raft snapshot", Duration::from_secs(30), || async {
        client.put("k", b"v".to_vec()).await.ok()?;
        let file = quorate_etcd::snap_file::newest(&data_dir).ok()??;
        (file.cluster_version.as_deref() == Some(want.as_str())).then_some(file)
    })
    .await;
    assert!(file.index > 5, "{file:?}");
}

#[tokio::test]
async fn a_3_5_snapshot_records_cluster_version_3_5() {
    snapshot_records_the_cluster_version(EtcdVersion::V3_5).await;
}

#[tokio::test]
async fn a_3_6_snapshot_records_cluster_version_3_6() {
    snapshot_records_the_cluster_version(EtcdVersion::V3_6).await;
}
