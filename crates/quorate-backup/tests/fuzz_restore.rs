//! Fuzzing the whole restore path (`store_restore::restore_from_store`: listing, plan, bounded
//! download, checksums, `bolt::check`, etcd's tools, replay, swap) with buckets damaged as a
//! writer of the bucket could: bytes of a stored object flipped, an object's decompressed
//! content changed and stored again, objects cut short, renamed with odd revisions or dropped.
//! The bucket starts as quorate's own store writes it (a real etcd snapshot and deltas of the
//! watch events, uploaded through `SnapStore::upload`). Every restore ends within a bound and
//! without a panic: either it succeeds and the restored member holds exactly the source's key
//! space at the revision it reports, or it fails with a typed error and the target directory is
//! untouched. Bounded cases, so CI runs it on every change.

mod restore_common;

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use quorate_api::CompressionPolicy;
use quorate_backup::layout::{SnapshotKind, SnapshotName};
use quorate_backup::restore::RestoreTarget;
use quorate_backup::store_restore::{StoreRestoreOptions, restore_from_store};
use restore_common::*;

/// How long one restore may take, however the bucket was damaged.
const BOUND: Duration = Duration::from_secs(60);

/// What a writer of the bucket does to one object (`object` counts in the sorted listing,
/// modulo the objects left).
#[derive(Clone, Debug)]
enum Mutation {
    /// One stored byte changed (at `at`/65536 of the object).
    Flip { object: usize, at: u16, xor: u8 },
    /// One byte of the decompressed content changed, and the object compressed and stored
    /// again under its name: only the checksums can tell.
    FlipContent { object: usize, at: u16, xor: u8 },
    /// The stored object cut to `keep`/65536 of its length.
    Truncate { object: usize, keep: u16 },
    /// Renamed with its revisions moved.
    Rename {
        object: usize,
        start: i64,
        last: i64,
    },
    /// Deleted.
    Drop { object: usize },
}

fn shift() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(-3),
        Just(-1),
        Just(1),
        Just(3),
        Just(50),
        Just(1 << 40)
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u16>(), 1..=255u8).prop_map(|(object, at, xor)| Mutation::Flip {
            object,
            at,
            xor
        }),
        (any::<usize>(), any::<u16>(), 1..=255u8)
            .prop_map(|(object, at, xor)| { Mutation::FlipContent { object, at, xor } }),
        (any::<usize>(), any::<u16>())
            .prop_map(|(object, keep)| Mutation::Truncate { object, keep }),
        (any::<usize>(), shift(), shift()).prop_map(|(object, start, last)| Mutation::Rename {
            object,
            start,
            last
        }),
        any::<usize>().prop_map(|object| Mutation::Drop { object }),
    ]
}

/// The source cluster (kept running: the expected states are read from it) and the pristine
/// bucket under `bucket`.
struct Fixture {
    source: Source,
    bucket: tempfile::TempDir,
    /// The full snapshot's revision and the last delta's.
    full_revision: i64,
    head: i64,
}

impl Fixture {
    /// A full snapshot after a mixed workload, then three deltas of further writes.
    async fn build() -> Fixture {
        let source = Source::start().await;
        let capture = source.capture_from(1).await;
        let bucket = tempfile::tempdir().unwrap();
        workload(&source.client, "k/").await;
        let files = tempfile::tempdir().unwrap();
        let (full_path, _, full_revision) = source.snapshot_file(files.path()).await;
        let gzip = Some(CompressionPolicy::Gzip);
        let store = local_store(bucket.path(), None);
        let now = now_unix();
        store
            .upload(
                &SnapshotName::full(full_revision, now - 100, gzip),
                bytes_body(std::fs::read(&full_path).unwrap()),
            )
            .await
            .unwrap();
        let mut c = source.client.clone();
        let mut start = full_revision + 1;
        for batch in 0..3i64 {
            for i in 0..4 {
                c.put(format!("k/after/{batch}/{i}"), format!("v{batch}{i}"), None)
                    .await
                    .unwrap();
            }
            c.delete(format!("k/after/{batch}/0"), None).await.unwrap();
            let last = source.head().await;
            let events = capture.until(last).await;
            store
                .upload(
                    &SnapshotName::incr(start, last, now - 90 + batch * 10, gzip),
                    bytes_body(quorate_backup::delta::encode(&events_in(
                        &events, start, last,
                    ))),
                )
                .await
                .unwrap();
            start = last + 1;
        }
        Fixture {
            source,
            bucket,
            full_revision,
            head: start - 1,
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The objects' files in `v2`, sorted.
fn objects(v2: &Path) -> Vec<std::path::PathBuf> {
    let mut all: Vec<_> = std::fs::read_dir(v2)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    all
}

async fn damage(root: &Path, mutation: &Mutation) {
    let v2 = root.join("bucket/main/v2");
    let all = objects(&v2);
    if all.is_empty() {
        return;
    }
    let pick = |i: usize| all[i % all.len()].clone();
    let at = |len: usize, frac: u16| (len * frac as usize / 65536).min(len.saturating_sub(1));
    match *mutation {
        Mutation::Flip { object, at: f, xor } => {
            let path = pick(object);
            let mut bytes = std::fs::read(&path).unwrap();
            if !bytes.is_empty() {
                let i = at(bytes.len(), f);
                bytes[i] ^= xor;
                std::fs::write(&path, bytes).unwrap();
            }
        }
        Mutation::FlipContent { object, at: f, xor } => {
            let path = pick(object);
            let store = local_store(root, None);
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let Some(stored) = store
                .list()
                .await
                .unwrap()
                .into_iter()
                .find(|s| s.name.file_name() == file)
            else {
                return; // not listed (a name the listing refuses): nothing to decode
            };
            let Ok(body) = store.download(&stored).await else {
                return;
            };
            use futures::TryStreamExt;
            let Ok(chunks) = body.try_collect::<Vec<_>>().await else {
                return; // already undecodable
            };
            let mut content: Vec<u8> = chunks.concat();
            if content.is_empty() {
                return;
            }
            let i = at(content.len(), f);
            content[i] ^= xor;
            std::fs::remove_file(&path).unwrap();
            store
                .upload(&stored.name, bytes_body(content))
                .await
                .unwrap();
        }
        Mutation::Truncate { object, keep } => {
            let path = pick(object);
            let bytes = std::fs::read(&path).unwrap();
            let keep = bytes.len() * keep as usize / 65536;
            std::fs::write(&path, &bytes[..keep]).unwrap();
        }
        Mutation::Rename {
            object,
            start,
            last,
        } => {
            let path = pick(object);
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let Ok(mut name) = SnapshotName::parse(&file) else {
                return;
            };
            if name.kind == SnapshotKind::Incr {
                name.start_revision = name.start_revision.saturating_add(start);
            }
            name.last_revision = name.last_revision.saturating_add(last);
            std::fs::rename(&path, v2.join(name.file_name())).unwrap();
        }
        Mutation::Drop { object } => std::fs::remove_file(pick(object)).unwrap(),
    }
}

/// One damaged bucket restored to the newest revision it holds (`None`) or to the full
/// snapshot's revision plus `to` (past the head too): exact, or refused with nothing touched.
async fn check(fx: &Fixture, mutations: &[Mutation], to: Option<i64>) {
    let copy = tempfile::tempdir().unwrap();
    copy_dir(fx.bucket.path(), copy.path());
    for mutation in mutations {
        damage(copy.path(), mutation).await;
    }
    let store = local_store(copy.path(), None);
    let target = Target::new();
    std::fs::create_dir_all(target.data_dir().join("member")).unwrap();
    std::fs::write(target.data_dir().join("member/keep"), b"old").unwrap();
    let before = listing(target.dir.path());
    let result = tokio::time::timeout(
        BOUND,
        restore_from_store(
            &store,
            to.map_or(RestoreTarget::Latest, |k| {
                RestoreTarget::ToRevision(fx.full_revision + k)
            }),
            target.identity(),
            &target.data_dir(),
            tools(),
            StoreRestoreOptions::default(),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("{mutations:?}: the restore ran past {BOUND:?}"));
    match result {
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty(), "{mutations:?}: {e:?}");
            assert_eq!(
                listing(target.dir.path()),
                before,
                "{mutations:?}: the target was touched by a failed restore ({message})"
            );
            assert_eq!(
                std::fs::read(target.data_dir().join("member/keep")).unwrap(),
                b"old"
            );
        }
        Ok(report) => {
            let (_etcd, client) = target.start().await;
            let restored = state_of(&client, None).await;
            let at = report.restored_revision - report.revision_bumped_by as i64;
            let expected = fx.source.state(Some(at)).await;
            assert_eq!(
                restored.keys, expected.keys,
                "{mutations:?}: the restore succeeded, but its key space is not the source's at \
                 revision {at}"
            );
            assert_eq!(restored.revision, report.restored_revision, "{mutations:?}");
        }
    }
}

#[test]
fn damaged_buckets_restore_exactly_or_fail_without_touching_the_target() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let fx = rt.block_on(Fixture::build());
    // The pristine bucket restores exactly: the property's success branch is reachable.
    rt.block_on(check(&fx, &[], None));
    let mut runner = TestRunner::new(Config {
        cases: 40,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(
                proptest::collection::vec(mutation(), 1..=3),
                proptest::option::of(0..=fx.head - fx.full_revision + 2),
            ),
            |(mutations, to)| {
                rt.block_on(check(&fx, &mutations, to));
                Ok(())
            },
        )
        .unwrap();
}
