//! A store that loses writes, for real: moto's S3 server behind the chaos store proxy with
//! `StoreFault::LoseWrites`, written to through quorate's own store client. The proxy answers
//! the upload `200 OK` and never passes it on; quorate must not count it as stored.

use std::time::Duration;

use bytes::Bytes;
use quorate_api::StoreSpec;
use quorate_backup::layout::SnapshotName;
use quorate_backup::store::{SnapStore, StoreError, StoreOptions};
use quorate_chaos::faults::store_proxy::{StoreFault, StoreProxy};

fn body(data: &'static [u8]) -> impl futures::Stream<Item = std::io::Result<Bytes>> + Send + Unpin {
    futures::stream::iter([Ok(Bytes::from_static(data))])
}

#[tokio::test]
async fn an_acknowledged_upload_the_store_did_not_keep_is_not_counted() {
    let Some(moto) = quorate_testkit::MotoServer::start("lossy") else {
        return;
    };
    let upstream = moto.endpoint.trim_start_matches("http://").parse().unwrap();
    let proxy = StoreProxy::start(upstream).await.unwrap();
    let secrets = tempfile::tempdir().unwrap();
    for (k, v) in [
        ("accessKeyID", "testing"),
        ("secretAccessKey", "testing"),
        ("region", "us-east-1"),
    ] {
        std::fs::write(secrets.path().join(k), v).unwrap();
    }
    let spec = StoreSpec {
        container: Some(moto.bucket.clone()),
        endpoint_override: Some(format!("http://{}", proxy.addr)),
        prefix: "lossy".to_string(),
        provider: Some("aws".to_string()),
        secret_ref: None,
    };
    let options = StoreOptions {
        secret_dir: Some(secrets.path().to_path_buf()),
        ..StoreOptions::default()
    };
    let store = SnapStore::open(&spec, &options).unwrap();
    let full = SnapshotName::full(10, 1_764_320_000, None);
    let kept = store.upload(&full, body(b"full snapshot")).await.unwrap();

    // Lost: the store answered 200 to the PUT (the proxy did), but a HEAD right after says
    // it is not there, and the upload fails saying so.
    proxy.set(StoreFault::LoseWrites);
    let delta = SnapshotName::incr(11, 20, 1_764_320_001, None);
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        store.upload(&delta, body(b"delta")),
    )
    .await
    .expect("the upload ends")
    .expect_err("a lost upload must not succeed");
    assert!(matches!(error, StoreError::NotKept { .. }), "{error}");
    assert_eq!(error.reason(), "SnapshotNotKept");
    assert!(error.is_transient(), "taken again: {error}");
    assert!(
        error.to_string().contains("Incr-00000011-00000020"),
        "{error}"
    );
    let lost = proxy.lost();
    assert_eq!(
        lost.len(),
        1,
        "the proxy dropped exactly the delta: {lost:?}"
    );
    assert!(lost[0].contains("Incr-00000011-00000020"), "{lost:?}");
    // The fault does not touch what is not a snapshot upload: listings pass, and show only
    // the full snapshot.
    let listed = store.list().await.unwrap();
    assert_eq!(
        listed,
        vec![kept.clone()],
        "only the full snapshot is stored"
    );

    // Healed: the same upload is stored and counted.
    proxy.set(StoreFault::None);
    let stored = store.upload(&delta, body(b"delta")).await.unwrap();
    assert_eq!(store.list().await.unwrap(), vec![kept, stored]);
    assert_eq!(proxy.lost().len(), 1);
}
