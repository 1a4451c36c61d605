//! Full snapshots against real etcd: what is saved restores with `etcdctl snapshot restore`
//! into a working member that holds every key.

mod capture_common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use capture_common::{head, member_client, raw_client};
use etcd_client::GetOptions;
use futures::TryStreamExt;
use quorate_backup::snapshotter::{CaptureError, full_snapshot, save_to_file};
use quorate_testkit::{EtcdMemberConfig, EtcdProcess, EtcdTestCluster, etcdctl_binary};
use tokio::io::AsyncWriteExt;

const KEYS: usize = 400;

fn value(i: usize) -> String {
    // Values of a few KiB so the snapshot spans many of etcd's 32 KiB chunks.
    format!("{i}-{}", "v".repeat(1000 + (i % 7) * 500))
}

async fn fill(cluster: &EtcdTestCluster) {
    let mut client = raw_client(&cluster.client_urls()).await;
    for i in 0..KEYS {
        client
            .put(format!("/registry/item/{i:04}"), value(i), None)
            .await
            .unwrap();
    }
}

/// Restores `file` with etcdctl into `dir`, starts etcd on it and returns every key with its
/// value, plus the revision `etcdctl snapshot status` reports for the file.
async fn restore_and_read(file: &Path, dir: &Path) -> (Vec<(String, String)>, i64) {
    let status = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "status", "-w", "json"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "snapshot status failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let snapshot_revision = status["revision"].as_i64().unwrap();

    let config = EtcdMemberConfig::new("restored", dir);
    let out = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "restore"])
        .arg(file)
        .arg(format!("--data-dir={}", config.data_dir.display()))
        .arg(format!("--name={}", config.name))
        .arg(format!(
            "--initial-cluster={}",
            config.initial_cluster_arg()
        ))
        .arg(format!(
            "--initial-advertise-peer-urls={}",
            config.peer_url()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl snapshot restore failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member = EtcdProcess::start_ready(config, Duration::from_secs(30))
        .await
        .expect("etcd starts on the restored data");
    let mut client = raw_client(&[member.client_url()]).await;
    let resp = client
        .get("/registry/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let kvs = resp
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_string(),
                kv.value_str().unwrap().to_string(),
            )
        })
        .collect();
    (kvs, snapshot_revision)
}

fn expected_keys() -> Vec<(String, String)> {
    (0..KEYS)
        .map(|i| (format!("/registry/item/{i:04}"), value(i)))
        .collect()
}

#[tokio::test]
async fn saved_file_restores_with_etcdctl_and_holds_every_key() {
    let cluster = EtcdTestCluster::start(1).await;
    fill(&cluster).await;
    let client = member_client(&cluster.member(0).client_url()).await;
    let before = head(&client).await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("full.db");
    let saved = save_to_file(&client, &file).await.unwrap();

    assert_eq!(saved.path, file);
    assert_eq!(
        saved.revision, before,
        "the head revision read before the RPC"
    );
    assert_eq!(saved.size, std::fs::metadata(&file).unwrap().len());
    assert!(saved.size > (KEYS * 1000) as u64, "{} bytes", saved.size);
    assert!(
        !dir.path().join("full.db.part").exists(),
        "the temporary file is renamed into place"
    );

    let (kvs, snapshot_revision) = restore_and_read(&file, &dir.path().join("r")).await;
    assert!(snapshot_revision >= saved.revision);
    assert_eq!(kvs, expected_keys());
}

#[tokio::test]
async fn streamed_snapshot_restores_and_holds_every_key() {
    let cluster = EtcdTestCluster::start(1).await;
    fill(&cluster).await;
    let client = member_client(&cluster.member(0).client_url()).await;

    let snapshot = full_snapshot(&client).await.unwrap();
    assert_eq!(snapshot.revision, head(&client).await);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("streamed.db");
    let mut out = tokio::fs::File::create(&file).await.unwrap();
    let mut chunks = 0;
    let mut stream = snapshot.stream;
    while let Some(chunk) = stream.try_next().await.unwrap() {
        chunks += 1;
        out.write_all(&chunk).await.unwrap();
    }
    out.sync_all().await.unwrap();
    assert!(
        chunks > 10,
        "streamed in chunks, not as one piece ({chunks})"
    );

    let (kvs, snapshot_revision) = restore_and_read(&file, &dir.path().join("r")).await;
    assert_eq!(snapshot_revision, snapshot.revision);
    assert_eq!(kvs, expected_keys());
}

#[tokio::test]
async fn failures_name_what_to_fix() {
    let mut cluster = EtcdTestCluster::start(1).await;
    let client = member_client(&cluster.member(0).client_url()).await;

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("full.db");
    let err = save_to_file(&client, &missing).await.unwrap_err();
    assert!(matches!(err, CaptureError::File { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("no-such-dir/full.db"), "{text}");
    assert!(text.contains("writable"), "{text}");

    cluster.member_mut(0).kill();
    let err = full_snapshot(&client).await.unwrap_err();
    let CaptureError::Etcd(e) = &err else {
        panic!("expected an etcd error, got {err:?}")
    };
    assert_eq!(e.kind(), quorate_etcd::ErrorKind::Unreachable, "{e}");
    let file = dir.path().join("dead.db");
    assert!(save_to_file(&client, &file).await.is_err());
    assert!(!file.exists() && !dir.path().join("dead.db.part").exists());
}
