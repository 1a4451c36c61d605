//! The snapshot store against a real S3 server in the test process (s3s-fs): uploads in every
//! compression (multipart for large snapshots), listing, downloads, deletes, and how failures
//! are reported (wrong credentials, unreachable endpoint, missing bucket, damaged objects,
//! broken uploads).

mod support {
    pub mod s3;
}

use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use quorate_api::CompressionPolicy;
use quorate_backup::layout::SnapshotName;
use quorate_backup::store::{SnapStore, StoreError, StoreOptions, StoredSnapshot};
use support::s3::{S3Target, S3sServer, body, sample_data, scenarios};

const PREFIX: &str = "etcd-main";

fn open(target: &S3Target, secret: &std::path::Path) -> SnapStore {
    let opts = StoreOptions {
        local_root: secret.to_path_buf(),
        secret_dir: Some(secret.to_path_buf()),
        encryption_keys: None,
    };
    SnapStore::open(&target.store_spec(PREFIX), &opts).unwrap()
}

fn setup() -> (S3sServer, tempfile::TempDir, SnapStore) {
    let server = S3sServer::start("backups");
    let dir = tempfile::tempdir().unwrap();
    let secret = server.target().write_secret(&dir.path().join("secret"));
    let store = open(server.target(), &secret);
    (server, dir, store)
}

#[tokio::test]
async fn every_compression_round_trips_through_s3() {
    let (server, _dir, store) = setup();
    assert_eq!(
        store.describe(),
        format!("s3://backups/{PREFIX} at {}", server.target().endpoint)
    );
    store.check().await.unwrap();
    scenarios::round_trip_every_compression(&store).await;
    assert_eq!(server.leftover_upload_parts(), Vec::<String>::new());
}

#[tokio::test]
async fn large_snapshots_go_up_in_parts() {
    let (server, _dir, store) = setup();
    let data = sample_data(1, scenarios::BIG, 256);
    let name = SnapshotName::full(10, 1_700_000_000, Some(CompressionPolicy::Gzip));
    let s = store.upload(&name, body(&data, 1 << 20)).await.unwrap();
    // S3 gives multipart objects an ETag "<md5 of part md5s>-<number of parts>".
    let meta = server
        .target()
        .raw_client()
        .head(&Path::from(s.path.as_str()))
        .await
        .unwrap();
    let etag = meta.e_tag.unwrap();
    let parts: usize = etag
        .trim_matches('"')
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("ETag {etag} is not a multipart ETag"));
    assert_eq!(
        parts,
        (s.size as usize).div_ceil(5 * 1024 * 1024),
        "ETag {etag}"
    );
    assert!(parts >= 3, "ETag {etag}");

    // A small snapshot is a single PUT.
    let small = SnapshotName::incr(11, 12, 1_700_000_001, None);
    let s = store.upload(&small, body(b"tiny", 4)).await.unwrap();
    let meta = server
        .target()
        .raw_client()
        .head(&Path::from(s.path.as_str()))
        .await
        .unwrap();
    assert!(!meta.e_tag.unwrap().contains('-'));
}

#[tokio::test]
async fn a_broken_upload_is_aborted() {
    let (server, _dir, store) = setup();
    scenarios::broken_body_leaves_nothing(&store).await;
    assert_eq!(
        server.leftover_upload_parts(),
        Vec::<String>::new(),
        "the multipart upload was aborted"
    );
}

#[tokio::test]
async fn a_cancelled_upload_is_aborted() {
    let (server, _dir, store) = setup();
    // 7 MiB (one part goes up), then the body never ends.
    let data = sample_data(6, 7 * 1024 * 1024, 256);
    let stalled = futures::StreamExt::chain(body(&data, 1 << 20), futures::stream::pending());
    let name = SnapshotName::full(5, 1_700_000_000, None);
    let upload = store.upload(&name, stalled);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut upload = Box::pin(upload);
    // Run the upload until its first part is stored, then drop it (as a member that stops
    // being backup leader does).
    loop {
        tokio::select! {
            r = &mut upload => panic!("upload of a never-ending body finished: {r:?}"),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        if !server.leftover_upload_parts().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no part was uploaded within 60s");
    }
    drop(upload);
    while !server.leftover_upload_parts().is_empty() {
        assert!(
            Instant::now() < deadline,
            "parts left after cancelling: {:?}",
            server.leftover_upload_parts()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.list().await.unwrap(), vec![]);
}

#[tokio::test]
async fn wrong_credentials_are_access_denied() {
    let server = S3sServer::start("backups");
    let dir = tempfile::tempdir().unwrap();
    let secret = server.target().write_secret_with(
        &dir.path().join("secret"),
        "quorate-test-access",
        "wrong",
    );
    let store = open(server.target(), &secret);
    let started = Instant::now();
    let e = store.check().await.unwrap_err();
    assert!(matches!(e, StoreError::AccessDenied { .. }), "{e}");
    assert_eq!(e.reason(), "StoreAccessDenied");
    assert!(e.to_string().contains("credentials"), "{e}");
    let name = SnapshotName::incr(1, 2, 3, None);
    let e = store.upload(&name, body(b"x", 1)).await.unwrap_err();
    assert!(matches!(e, StoreError::AccessDenied { .. }), "{e}");
    // An unknown access key as well.
    let secret = server
        .target()
        .write_secret_with(&dir.path().join("secret2"), "nobody", "wrong");
    let e = open(server.target(), &secret).check().await.unwrap_err();
    assert!(matches!(e, StoreError::AccessDenied { .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_is_reported_quickly() {
    // A port nothing listens on.
    let port = quorate_testkit::free_port();
    let target = S3Target {
        endpoint: format!("http://127.0.0.1:{port}"),
        bucket: "backups".to_string(),
    };
    let dir = tempfile::tempdir().unwrap();
    let secret = target.write_secret(&dir.path().join("secret"));
    let store = open(&target, &secret);
    let started = Instant::now();
    let e = store.check().await.unwrap_err();
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e}");
    assert_eq!(e.reason(), "StoreUnreachable");
    assert!(e.to_string().contains(&target.endpoint), "{e}");
    let e = store.list().await.unwrap_err();
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e}");
    let e = store
        .upload(&SnapshotName::incr(1, 2, 3, None), body(b"x", 1))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e}");
    assert!(e.is_transient());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_missing_bucket_is_reported() {
    let server = S3sServer::start("backups");
    let dir = tempfile::tempdir().unwrap();
    let secret = server.target().write_secret(&dir.path().join("secret"));
    let target = S3Target {
        bucket: "no-such-bucket".to_string(),
        ..server.target().clone()
    };
    let store = open(&target, &secret);
    let e = store.check().await.unwrap_err();
    match &e {
        StoreError::BucketMissing { bucket, .. } => assert_eq!(bucket, "no-such-bucket"),
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("spec.backup.store.container"), "{e}");
    let e = store.list().await.unwrap_err();
    assert!(matches!(e, StoreError::BucketMissing { .. }), "{e}");
    // (s3s-fs creates buckets on upload, so uploads are checked against moto.)
}

/// Replaces the object's bytes behind the store's back.
async fn overwrite(target: &S3Target, s: &StoredSnapshot, bytes: Vec<u8>) {
    target
        .raw_client()
        .put(
            &Path::from(s.path.as_str()),
            PutPayload::from(Bytes::from(bytes)),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn damaged_objects_are_detected_on_download() {
    let (server, _dir, store) = setup();
    let data = sample_data(3, 300_000, 256);
    for (i, c) in [
        CompressionPolicy::Gzip,
        CompressionPolicy::Lzw,
        CompressionPolicy::Zlib,
    ]
    .into_iter()
    .enumerate()
    {
        let name = SnapshotName::full(100 + i as i64, 1_700_000_000, Some(c));
        let s = store.upload(&name, body(&data, 65536)).await.unwrap();
        let raw = server
            .target()
            .raw_client()
            .get(&Path::from(s.path.as_str()))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec();

        // Cut short: every format notices the missing end.
        overwrite(server.target(), &s, raw[..raw.len() * 2 / 3].to_vec()).await;
        let e = scenarios::download_error(&store, &s).await;
        assert!(
            matches!(e, StoreError::Corrupt { .. }),
            "{c} truncated: {e}"
        );
        assert_eq!(e.reason(), "SnapshotCorrupt");
        assert!(e.to_string().contains(&s.path), "{e}");

        // Not compressed data at all.
        overwrite(server.target(), &s, b"this is not a snapshot".repeat(1000)).await;
        let e = scenarios::download_error(&store, &s).await;
        assert!(matches!(e, StoreError::Corrupt { .. }), "{c} garbage: {e}");
    }
}

#[tokio::test]
async fn foreign_objects_and_chunks_are_not_listed() {
    let (server, _dir, store) = setup();
    let client = server.target().raw_client();
    let put = |key: &'static str| {
        let client = client.clone();
        async move {
            client
                .put(&Path::from(key), PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
    };
    put("etcd-main/v2/README").await;
    // A chunk of an upload in progress (in a file system backed server it cannot share its
    // name with a finished object, so another snapshot's).
    put("etcd-main/v2/Full-00000000-00000019-1600000100.gz/0000000001").await;
    put("etcd-main/v2/Full-00000000-0000000x-1600000000.gz").await;
    put("etcd-main-other/v2/Full-00000000-00000009-1600000000.gz").await;
    put("etcd-main/v1/Backup-1500000000/Full-00000000-00000005-1500000000").await;
    put("etcd-main/v1/Backup-1500000000/Incr-00000006-00000008-1500000010.gz").await;
    let full = SnapshotName::full(9, 1_600_000_000, Some(CompressionPolicy::Gzip));
    store.upload(&full, body(b"db", 2)).await.unwrap();

    let listed: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.path)
        .collect();
    assert_eq!(
        listed,
        [
            "etcd-main/v1/Backup-1500000000/Full-00000000-00000005-1500000000",
            "etcd-main/v1/Backup-1500000000/Incr-00000006-00000008-1500000010.gz",
            "etcd-main/v2/Full-00000000-00000009-1600000000.gz",
        ]
    );
}
