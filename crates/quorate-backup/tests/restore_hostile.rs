//! Hostile objects in a backup bucket (real etcd, a real full snapshot): whoever can write to
//! the bucket can hand quorate any object. Each one here is refused with an error naming it,
//! within a bounded time and memory, and the target is left untouched.

mod restore_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quorate_api::CompressionPolicy;
use quorate_backup::layout::SnapshotName;
use quorate_backup::restore::RestoreTarget;
use quorate_backup::restore::tools::{ToolError, ToolLimits, snapshot_revision_within};
use quorate_backup::store::SnapStore;
use quorate_backup::store_restore::{SizeLimits, StoreRestoreOptions, restore_from_store};
use restore_common::*;

/// This process's peak resident memory so far.
fn peak_rss() -> u64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    usage.max_rss() as u64 * 1024
}

/// The crafted snapshot: the root page's `overflow` set to 2³¹ - 1 in a copy of `full`,
/// and etcd's SHA-256 trailer recomputed so the file still checks out as a snapshot. Returns
/// its path and the root page's ID.
fn crafted(full: &Path, dir: &Path) -> (PathBuf, u64) {
    use sha2::Digest;
    let mut bytes = std::fs::read(full).unwrap();
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let page_size = u32_at(&bytes, 16 + 8) as usize;
    let meta = |id: usize| {
        let at = id * page_size + 16;
        (u64_at(&bytes, at + 16), u64_at(&bytes, at + 48))
    };
    let ((root0, tx0), (root1, tx1)) = (meta(0), meta(1));
    let root = if tx0 > tx1 { root0 } else { root1 };
    let at = root as usize * page_size + 12;
    bytes[at..at + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let body = bytes.len() - 32;
    let sum = sha2::Sha256::digest(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum);
    let path = dir.join("crafted.db");
    std::fs::write(&path, bytes).unwrap();
    (path, root)
}

#[tokio::test]
async fn a_crafted_full_snapshot_is_refused_before_etcds_tools_see_it() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "k/").await;
    let (full_path, _, revision) = source.snapshot_file(files.path()).await;
    let (crafted, root) = crafted(&full_path, files.path());

    // etcd's own tool on it runs within its limits: stopped, not left to exhaust the machine.
    let started = Instant::now();
    let limits = ToolLimits {
        timeout: Duration::from_secs(3),
        memory: 256 << 20,
    };
    let err = snapshot_revision_within(&tools(), &crafted, "crafted", limits)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::TimedOut { .. } | ToolError::Failed { .. }),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(15), "{err}");

    // A bucket whose newest full snapshot is the crafted one: quorate's reader refuses it,
    // naming the object and the page, and nothing is restored.
    let bucket = files.path().join("buckets");
    let store = local_store(&bucket, None);
    let stored = store
        .upload(
            &SnapshotName::full(revision, now_unix() - 60, Some(CompressionPolicy::Gzip)),
            bytes_body(std::fs::read(&crafted).unwrap()),
        )
        .await
        .unwrap();
    let target = Target::new();
    let started = Instant::now();
    let err = restore_from_store(
        &store,
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
        err.contains(&stored.name.file_name())
            && err.contains(&format!("page {root} spans 2147483647 overflow pages"))
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    assert!(peak_rss() < 1 << 30, "peak memory {} bytes", peak_rss());
    assert!(
        listing(&target.data_dir()).is_empty(),
        "the target was touched"
    );
}

#[tokio::test]
async fn an_object_named_with_a_revision_no_etcd_reaches_is_ignored_and_the_restore_holds() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "k/").await;
    let (full_path, _, revision) = source.snapshot_file(files.path()).await;
    let bucket = files.path().join("buckets");
    let store = local_store(&bucket, None);
    store
        .upload(
            &SnapshotName::full(revision, now_unix() - 60, Some(CompressionPolicy::Gzip)),
            bytes_body(std::fs::read(&full_path).unwrap()),
        )
        .await
        .unwrap();
    // A "delta" continuing the chain up to i64::MAX, which would make a restore to an earlier
    // revision bump the head past etcd's range.
    let hostile = bucket.join("bucket/main/v2").join(format!(
        "Incr-{:08}-9223372036854775807-{}.gz",
        revision + 1,
        now_unix() - 30
    ));
    std::fs::write(&hostile, b"anything").unwrap();
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let target = Target::new();
    let report = restore_from_store(
        &store,
        RestoreTarget::ToRevision(revision),
        target.identity(),
        &target.data_dir(),
        tools(),
        StoreRestoreOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.restored_revision, revision);
    assert_eq!(report.revision_bumped_by, 0);
}

/// `mib` MiB of zeros, which gzip (at quorate's fastest level) packs into about a two-hundredth
/// of that.
fn zeros(mib: usize) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Unpin {
    let chunk = bytes::Bytes::from(vec![0u8; 1 << 20]);
    futures::stream::iter((0..mib).map(move |_| Ok(chunk.clone())))
}

#[tokio::test]
async fn gzip_bombs_are_cut_at_the_bound_while_they_stream() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "k/").await;
    let (full_path, _, revision) = source.snapshot_file(files.path()).await;
    let gzip = Some(CompressionPolicy::Gzip);
    let limits = SizeLimits {
        full_bytes: 16 << 20,
        delta_bytes: 1 << 20,
    };
    let restore = |store: SnapStore| async move {
        let target = Target::new();
        let started = Instant::now();
        let err = restore_from_store(
            &store,
            RestoreTarget::Latest,
            target.identity(),
            &target.data_dir(),
            tools(),
            StoreRestoreOptions {
                limits,
                ..StoreRestoreOptions::default()
            },
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(started.elapsed() < Duration::from_secs(20), "{err}");
        assert!(
            listing(&target.data_dir()).is_empty(),
            "the target was touched"
        );
        err
    };

    // A "full snapshot" of 64 MiB of zeros: cut at 16 MiB, never written whole to disk.
    let bucket = files.path().join("full-bomb");
    let bomb = local_store(&bucket, None)
        .upload(
            &SnapshotName::full(revision, now_unix() - 60, gzip),
            zeros(64),
        )
        .await
        .unwrap();
    assert!(bomb.size < 1 << 20, "{} stored bytes", bomb.size);
    let err = restore(local_store(&bucket, None)).await;
    assert!(
        err.contains(&bomb.path) && err.contains("decompresses to more than 16777216 bytes"),
        "{err}"
    );

    // A real full snapshot and a "delta" of 64 MiB of zeros: cut at 1 MiB, so the delta held
    // in memory stays within its bound.
    let bucket = files.path().join("delta-bomb");
    let store_ = local_store(&bucket, None);
    store_
        .upload(
            &SnapshotName::full(revision, now_unix() - 60, gzip),
            bytes_body(std::fs::read(&full_path).unwrap()),
        )
        .await
        .unwrap();
    let bomb = store_
        .upload(
            &SnapshotName::incr(revision + 1, revision + 5, now_unix() - 30, gzip),
            zeros(64),
        )
        .await
        .unwrap();
    let before = peak_rss();
    let err = restore(store_).await;
    assert!(
        err.contains(&bomb.name.file_name())
            && err.contains("decompresses to more than 1048576 bytes"),
        "{err}"
    );
    let grown = peak_rss().saturating_sub(before);
    assert!(grown < 128 << 20, "peak memory grew by {grown} bytes");
}

/// A full snapshot or a delta with one byte changed (and its checksum left as it was) is
/// refused by the checksum verified while its bytes stream: the full snapshot before quorate's
/// reader or etcd's tools read the file, the delta before any of its events is applied.
#[tokio::test]
async fn a_damaged_object_fails_its_checksum_as_it_streams() {
    use quorate_backup::delta::DeltaError;
    use quorate_backup::restore::RestoreError;
    use quorate_backup::store_restore::StoreRestoreError;
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    let capture = source.capture_from(1).await;
    workload(&source.client, "k/").await;
    let (full_path, _, revision) = source.snapshot_file(files.path()).await;
    let mut c = source.client.clone();
    for i in 0..3 {
        c.put(format!("after/{i}"), "v", None).await.unwrap();
    }
    let head = source.head().await;
    let events = capture.until(head).await;
    let gzip = Some(CompressionPolicy::Gzip);
    let restore = |store: SnapStore| async move {
        let target = Target::new();
        std::fs::create_dir_all(target.data_dir().join("member")).unwrap();
        std::fs::write(target.data_dir().join("member/keep"), b"old").unwrap();
        let err = restore_from_store(
            &store,
            RestoreTarget::Latest,
            target.identity(),
            &target.data_dir(),
            tools(),
            StoreRestoreOptions::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            listing(&target.data_dir()),
            vec!["member", "member/keep"],
            "the target was touched"
        );
        err
    };

    // The full snapshot: a byte in the middle of the file flipped.
    let mut damaged = std::fs::read(&full_path).unwrap();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x55;
    let bucket = files.path().join("full");
    let full = local_store(&bucket, None)
        .upload(
            &SnapshotName::full(revision, now_unix() - 60, gzip),
            bytes_body(damaged),
        )
        .await
        .unwrap();
    match restore(local_store(&bucket, None)).await {
        StoreRestoreError::Restore(RestoreError::FullSnapshotDamaged { object, problem }) => {
            assert_eq!(object, full.name.file_name());
            assert!(problem.contains("integrity hash"), "{problem}");
        }
        other => panic!("expected the full snapshot's checksum to fail first: {other}"),
    }

    // A delta: one byte of its JSON changed.
    let bucket = files.path().join("delta");
    let store = local_store(&bucket, None);
    store
        .upload(
            &SnapshotName::full(revision, now_unix() - 60, gzip),
            bytes_body(std::fs::read(&full_path).unwrap()),
        )
        .await
        .unwrap();
    let mut bytes = quorate_backup::delta::encode(&events_in(&events, revision + 1, head));
    bytes[3] ^= 0x01;
    let delta = store
        .upload(
            &SnapshotName::incr(revision + 1, head, now_unix() - 30, gzip),
            bytes_body(bytes),
        )
        .await
        .unwrap();
    match restore(store).await {
        StoreRestoreError::Restore(RestoreError::Delta(DeltaError::ChecksumMismatch { name })) => {
            assert_eq!(name, delta.name.file_name())
        }
        other => panic!("expected the delta's checksum to fail: {other}"),
    }
}
