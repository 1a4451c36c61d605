//! Restores from an encrypted bucket (real etcd, a real full snapshot and captured deltas):
//! exact at the head and at a revision in between, and a tampered object or a wrong key fails
//! the restore naming the object and the key, with the target left untouched.

mod restore_common;

use std::path::Path;

use quorate_api::CompressionPolicy;
use quorate_backup::layout::SnapshotName;
use quorate_backup::restore::RestoreTarget;
use quorate_backup::store::SnapStore;
use quorate_backup::store_restore::{StoreRestoreOptions, restore_from_store};
use restore_common::*;

fn store(root: &Path, keys: &Path) -> SnapStore {
    local_store(root, Some(keys))
}

fn keys(dir: &Path, hex_digit: char) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("k1"), hex_digit.to_string().repeat(64)).unwrap();
    std::fs::write(dir.join("active"), "k1").unwrap();
    dir.to_path_buf()
}

#[tokio::test]
async fn an_encrypted_bucket_restores_exactly_and_refuses_tampering_and_wrong_keys() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "before/").await;
    let (full_path, _, full_revision) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(full_revision + 1).await;
    workload(&source.client, "after/").await;
    let head = source.head().await;
    let events = capture.until(head).await;

    let bucket = files.path().join("buckets");
    let store = store(&bucket, &keys(&files.path().join("keys"), 'a'));
    let gzip = Some(CompressionPolicy::Gzip);
    store
        .upload(
            &SnapshotName::full(full_revision, now_unix() - 60, gzip),
            bytes_body(std::fs::read(&full_path).unwrap()),
        )
        .await
        .unwrap();
    let mid = full_revision + (head - full_revision) / 2;
    let mut deltas = Vec::new();
    for (first, last) in [(full_revision + 1, mid), (mid + 1, head)] {
        let encoded = quorate_backup::delta::encode(&events_in(&events, first, last));
        let name = SnapshotName::incr(first, last, now_unix() - 30, gzip);
        deltas.push(store.upload(&name, bytes_body(encoded)).await.unwrap());
    }
    assert!(store.list().await.unwrap().iter().all(|s| s.name.encrypted));

    // The head, and a revision inside the first delta.
    for (target_rev, expected) in [
        (RestoreTarget::Latest, None),
        (RestoreTarget::ToRevision(mid - 3), Some(mid - 3)),
    ] {
        let target = Target::new();
        let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = {
            let reports = reports.clone();
            quorate_backup::restore::progress::ProgressSink::new(move |p| {
                reports.lock().unwrap().push(p)
            })
        };
        let report = restore_from_store(
            &store,
            target_rev,
            target.identity(),
            &target.data_dir(),
            tools(),
            StoreRestoreOptions {
                progress: Some(sink),
                // Compared with the source's revisions below; the bump has tests of its own.
                keep_revision: true,
                ..StoreRestoreOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("restore to {expected:?}: {e}"));
        assert_eq!(report.restored_revision, expected.unwrap_or(head));
        // Progress: the full snapshot, then each delta applied, in stored bytes of the plan.
        let reports = reports.lock().unwrap().clone();
        // The point in time lies in the first delta: the plan stops there.
        let planned = if expected.is_none() { 2 } else { 1 };
        let sizes: Vec<u64> = deltas.iter().take(planned).map(|d| d.size).collect();
        let first = reports.first().expect("a progress report");
        assert_eq!(
            (first.objects_done, first.objects_total),
            (1, 1 + planned as u64)
        );
        assert_eq!(
            first.bytes_total - first.bytes_done,
            sizes.iter().sum::<u64>()
        );
        let last = reports.last().unwrap();
        if expected.is_none() {
            assert_eq!(last.objects_done, 3, "{reports:?}");
            assert_eq!(last.bytes_done, last.bytes_total);
            assert_eq!(last.fraction(), 1.0);
            assert_eq!(
                last.events_done,
                report.events_applied + report.events_skipped
            );
        }
        assert!(
            reports
                .windows(2)
                .all(|w| w[0].bytes_done <= w[1].bytes_done),
            "{reports:?}"
        );
        let (_restored, client) = target.start().await;
        assert_same(
            &state_of(&client, None).await,
            &source.state(expected).await,
        );
    }

    // Another key under the same ID: refused before anything is written.
    let wrong = self::store(&bucket, &keys(&files.path().join("wrong"), 'b'));
    let err = refused_restore(&wrong).await;
    assert!(
        err.contains("another key") && err.contains("\"k1\""),
        "{err}"
    );

    // A clear delta continuing the chain, slipped in by a writer of the bucket: refused before
    // it is read, naming it, and nothing is restored.
    let clear = local_store(&bucket, None);
    let slipped = clear
        .upload(
            &SnapshotName::incr(head + 1, head + 1, now_unix() - 10, gzip),
            bytes_body(quorate_backup::delta::encode(&events_in(
                &events,
                head + 1,
                head + 1,
            ))),
        )
        .await
        .unwrap();
    assert!(!slipped.name.encrypted);
    let err = refused_restore(&store).await;
    assert!(
        err.contains(&slipped.path) && err.contains("is not encrypted"),
        "{err}"
    );
    // A migration window covering its creation time accepts it; one ending before does not.
    let after = jiff::Timestamp::from_second(now_unix() + 60).unwrap();
    assert!(
        store
            .clone()
            .accept_plaintext_before(after)
            .download(&slipped)
            .await
            .is_ok()
    );
    let before = jiff::Timestamp::from_second(now_unix() - 3600).unwrap();
    let err = store
        .clone()
        .accept_plaintext_before(before)
        .download(&slipped)
        .await
        .err()
        .expect("outside the window")
        .to_string();
    assert!(err.contains("accepted only if written before"), "{err}");
    std::fs::remove_file(bucket.join("bucket").join(&slipped.path)).unwrap();

    // One byte of the second delta changed in the bucket.
    let victim = bucket.join("bucket").join(&deltas[1].path);
    let mut object = std::fs::read(&victim).unwrap();
    let at = object.len() - 20;
    object[at] ^= 1;
    std::fs::write(&victim, object).unwrap();
    let err = refused_restore(&store).await;
    assert!(
        err.contains(&deltas[1].path)
            && err.contains("fails authentication")
            && err.contains("\"k1\""),
        "{err}"
    );
}

/// The error of a restore from `store` that must fail, after checking its target was left
/// untouched.
async fn refused_restore(store: &SnapStore) -> String {
    let target = Target::new();
    let err = restore_from_store(
        store,
        RestoreTarget::Latest,
        target.identity(),
        &target.data_dir(),
        tools(),
        StoreRestoreOptions::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        listing(&target.data_dir()).is_empty(),
        "the target was touched: {err}"
    );
    err
}
