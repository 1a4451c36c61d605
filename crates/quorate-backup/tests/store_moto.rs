//! The snapshot store against moto's S3 server, a second S3 implementation closer to AWS
//! than s3s-fs (it refuses uploads to missing buckets, for one). Skipped with a note when moto
//! is not installed, failed when `CI` is set (`scripts/install-deps.sh` installs it).

mod support {
    pub mod s3;
}

use object_store::ObjectStoreExt;
use object_store::path::Path;
use quorate_api::CompressionPolicy;
use quorate_backup::layout::SnapshotName;
use quorate_backup::store::{SnapStore, StoreError, StoreOptions};
use support::s3::{MotoServer, S3Target, body, sample_data, scenarios};

fn open(target: &S3Target, dir: &std::path::Path) -> SnapStore {
    let secret = target.write_secret(&dir.join("secret"));
    let opts = StoreOptions {
        local_root: dir.to_path_buf(),
        secret_dir: Some(secret),
        encryption_keys: None,
    };
    SnapStore::open(&target.store_spec("clusters/etcd-main"), &opts).unwrap()
}

/// One moto process for the whole scenario: it takes a few seconds to start.
#[tokio::test]
async fn snapshots_round_trip_through_moto() {
    let Some(moto) = MotoServer::start("backups") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = open(moto.target(), dir.path());
    store.check().await.unwrap();

    scenarios::round_trip_every_compression(&store).await;
    scenarios::broken_body_leaves_nothing(&store).await;

    // Large snapshots are multipart uploads (moto's ETag counts the parts).
    let data = sample_data(5, scenarios::BIG, 256);
    let name = SnapshotName::full(10, 1_700_000_000, Some(CompressionPolicy::Zlib));
    let s = store.upload(&name, body(&data, 1 << 20)).await.unwrap();
    let etag = moto
        .target()
        .raw_client()
        .head(&Path::from(s.path.as_str()))
        .await
        .unwrap()
        .e_tag
        .unwrap();
    assert!(etag.trim_matches('"').ends_with("-3"), "ETag {etag}");

    // A bucket that does not exist: for checks and uploads alike.
    let missing = S3Target {
        bucket: "no-such-bucket".to_string(),
        ..moto.target().clone()
    };
    let store = open(&missing, dir.path());
    let e = store.check().await.unwrap_err();
    assert!(matches!(e, StoreError::BucketMissing { .. }), "{e}");
    let e = store
        .upload(&SnapshotName::incr(1, 2, 3, None), body(b"x", 1))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::BucketMissing { .. }), "{e}");
    let e = store.upload(&name, body(&data, 1 << 20)).await.unwrap_err();
    assert!(matches!(e, StoreError::BucketMissing { .. }), "{e}");
}
