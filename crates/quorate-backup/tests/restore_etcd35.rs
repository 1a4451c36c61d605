//! The same exact restore with etcd 3.5's tools: `etcdutl snapshot restore/status` instead of
//! etcdctl's, and etcd 3.5 replaying and serving the restored data (an upgrade from the 3.4
//! source, as after a version bump).
//!
//! etcd 3.5 is built by `scripts/install-etcd.sh` (see `quorate_etcd::binaries`); without it
//! the test says so and passes, unless `QUORATE_REQUIRE_ETCD` names 3.5 (CI does).
//! `restore_versions.rs` restores a 3.5 backup into 3.5, 3.6 and 3.7.

mod restore_common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorate_backup::restore::{self, EtcdTools, RestoreTarget};
use quorate_testkit::ChildGuard;
use restore_common::*;

fn etcd35_dir() -> Option<PathBuf> {
    let version = quorate_api::EtcdVersion::V3_5;
    let found = quorate_etcd::binaries::EtcdBinaries::default().etcd(version);
    quorate_testkit::etcd_of_version_or_skip(version, found)
        .and_then(|etcd| etcd.parent().map(PathBuf::from))
}

#[tokio::test]
async fn etcd35_tools_restore_a_34_backup_exactly() {
    let Some(bin) = etcd35_dir() else { return };
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "before/").await;
    let (full_path, full_name, r) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(r + 1).await;
    workload(&source.client, "after/").await;
    let head = source.head().await;
    let events = capture.until(head).await;
    let deltas = cut(&events, r + 1, &[r + (head - r) / 2, head]);

    let tools = EtcdTools::new(bin.join("etcd"), bin.join("etcdctl"));
    assert_eq!(
        tools.etcdutl.as_deref(),
        Some(bin.join("etcdutl").as_path()),
        "etcdutl is used for snapshot work on 3.5"
    );
    let target = Target::new();
    let mut inputs = target.inputs(&full_path, &full_name, deltas, RestoreTarget::Latest);
    inputs.tools = tools;
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(report.restored_revision, head);

    // Serve the restored data with etcd 3.5.
    let log = std::fs::File::create(target.dir.path().join("etcd35.log")).unwrap();
    target.config.release_ports();
    let _etcd = ChildGuard::spawn(
        Command::new(bin.join("etcd"))
            .args(target.config.args())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .env_clear(),
    )
    .unwrap();
    let client = connect(&target.config.client_url()).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(status) = client.clone().status().await
            && status.leader() != 0
        {
            assert!(status.version().starts_with("3.5"), "{}", status.version());
            break;
        }
        assert!(Instant::now() < deadline, "restored etcd 3.5 did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_same(&state_of(&client, None).await, &source.state(None).await);
}
