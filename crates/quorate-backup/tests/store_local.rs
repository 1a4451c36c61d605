//! The snapshot store on a local directory (provider `Local`), as local mode uses it: the same
//! scenarios as on S3, the files where etcd-backup-restore would put them, and damage and
//! missing directories reported as such.

mod support {
    pub mod s3;
}

use quorate_api::{CompressionPolicy, StoreSpec};
use quorate_backup::layout::SnapshotName;
use quorate_backup::store::{SnapStore, StoreError, StoreOptions};
use support::s3::{body, sample_data, scenarios};

fn spec(container: &str) -> StoreSpec {
    StoreSpec {
        container: Some(container.to_string()),
        endpoint_override: None,
        prefix: "etcd-main".to_string(),
        provider: Some("Local".to_string()),
        secret_ref: None,
    }
}

fn open(root: &std::path::Path) -> SnapStore {
    let opts = StoreOptions {
        local_root: root.to_path_buf(),
        secret_dir: None,
        encryption_keys: None,
    };
    SnapStore::open(&spec("backups"), &opts).unwrap()
}

/// Files left in the directory tree, relative to `root`.
fn files(root: &std::path::Path) -> Vec<String> {
    fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn every_compression_round_trips_through_a_directory() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path());
    assert_eq!(
        store.describe(),
        format!("file://{}/etcd-main", root.path().join("backups").display())
    );
    store.check().await.unwrap();
    scenarios::round_trip_every_compression(&store).await;
    scenarios::broken_body_leaves_nothing(&store).await;
    assert_eq!(
        files(root.path()),
        Vec::<String>::new(),
        "no staging files left"
    );
}

#[tokio::test]
async fn snapshots_are_files_in_the_v2_layout() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path());
    let data = sample_data(2, 100_000, 4);
    let name = SnapshotName::full(42, 1_700_000_000, Some(CompressionPolicy::Gzip));
    store.upload(&name, body(&data, 8192)).await.unwrap();
    assert_eq!(
        files(root.path()),
        ["backups/etcd-main/v2/Full-00000000-00000042-1700000000.gz"]
    );
    // What is on disk is plain gzip, as etcd-backup-restore writes it.
    let on_disk = std::fs::read(
        root.path()
            .join("backups/etcd-main/v2/Full-00000000-00000042-1700000000.gz"),
    )
    .unwrap();
    assert_eq!(&on_disk[..2], &[0x1f, 0x8b], "gzip magic");

    // A snapshot etcd-backup-restore left in a v1 directory is listed and readable.
    let v1 = root
        .path()
        .join("backups/etcd-main/v1/Backup-1600000000/Full-00000000-00000007-1600000000");
    std::fs::create_dir_all(v1.parent().unwrap()).unwrap();
    std::fs::write(&v1, b"old db").unwrap();
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].name.last_revision, 7);
    let got = support::s3::read_all(store.download(&listed[0]).await.unwrap())
        .await
        .unwrap();
    assert_eq!(got, b"old db");
}

#[tokio::test]
async fn damaged_files_are_detected() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path());
    let data = sample_data(4, 200_000, 256);
    for (i, c) in [
        CompressionPolicy::Gzip,
        CompressionPolicy::Lzw,
        CompressionPolicy::Zlib,
    ]
    .into_iter()
    .enumerate()
    {
        let name = SnapshotName::full(10 + i as i64, 1_700_000_000, Some(c));
        let s = store.upload(&name, body(&data, 65536)).await.unwrap();
        let file = root.path().join("backups").join(&s.path);
        let good = std::fs::read(&file).unwrap();
        std::fs::write(&file, &good[..good.len() - 10]).unwrap();
        let e = scenarios::download_error(&store, &s).await;
        assert!(matches!(e, StoreError::Corrupt { .. }), "{c}: {e}");
        assert!(e.to_string().contains(&s.path), "{e}");
    }
}

#[tokio::test]
async fn a_vanished_directory_fails_the_check() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path());
    store.check().await.unwrap();
    std::fs::remove_dir_all(root.path().join("backups")).unwrap();
    let e = store.check().await.unwrap_err();
    assert!(matches!(e, StoreError::BucketMissing { .. }), "{e}");
    assert_eq!(e.reason(), "StoreBucketMissing");
}

#[tokio::test]
async fn hash_records_live_beside_the_prefix_are_pruned_and_move_with_an_archive() {
    use quorate_backup::store::HashRecord;
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path());
    let record = |revision: i64| HashRecord {
        revision,
        compact_revision: 3,
        hash: 0xdead_beef,
        member: "etcd-main-1".to_string(),
        recorded_at: "2026-11-27T09:00:00Z".to_string(),
        location: String::new(),
    };
    for revision in [10, 20, 30] {
        store.put_hash_record(&record(revision)).await.unwrap();
    }
    let read = store.hash_record(20).await.unwrap().unwrap();
    assert_eq!(read.hash, 0xdead_beef);
    assert!(
        read.location
            .ends_with("etcd-main.hashkv/00000000000000000020")
    );
    assert_eq!(store.hash_record(25).await.unwrap(), None);
    // Beside the prefix: the snapshot listing (and etcd-backup-restore's) never sees them.
    let data = sample_data(1, 1000, 256);
    store
        .upload(
            &SnapshotName::full(30, 1_764_230_000, None),
            body(&data, 100),
        )
        .await
        .unwrap();
    assert_eq!(store.list().await.unwrap().len(), 1);
    assert!(
        files(root.path())
            .iter()
            .any(|f| f == "backups/etcd-main.hashkv/00000000000000000010")
    );

    assert_eq!(store.prune_hash_records(20).await.unwrap(), 1);
    assert_eq!(store.hash_record_revisions().await.unwrap(), [20, 30]);

    // A damaged record is an error, not a missing one.
    std::fs::write(
        root.path()
            .join("backups/etcd-main.hashkv/00000000000000000020"),
        "{not json",
    )
    .unwrap();
    assert!(matches!(
        store.hash_record(20).await,
        Err(StoreError::Corrupt { .. })
    ));

    // A new chain moves the records aside with the snapshots, to a name that does not start
    // with the prefix (etcd-backup-restore would list it as part of the chain).
    assert_eq!(store.archive("1764230400").await.unwrap(), 1);
    assert!(
        files(root.path())
            .iter()
            .any(|f| f.starts_with("backups/superseded-1764230400-etcd-main/v2/Full-")),
        "{:?}",
        files(root.path())
    );
    assert!(
        !files(root.path())
            .iter()
            .any(|f| f.starts_with("backups/etcd-main")
                && f.contains("v2/")
                && !f.starts_with("backups/etcd-main/")),
        "nothing under a key that starts with the prefix but the chain"
    );
    assert!(store.hash_record_revisions().await.unwrap().is_empty());
    assert!(
        files(root.path())
            .iter()
            .any(|f| f == "backups/superseded-1764230400-etcd-main.hashkv/00000000000000000030")
    );
}
