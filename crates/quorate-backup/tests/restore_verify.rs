//! Verification of restored data against etcd's own `HashKV`: the hash quorate computes over a
//! database file equals what etcd answers for the same revision and compaction (etcd 3.4 to
//! 3.7, compacted and not yet compacted files), and a restore checks its result against a
//! recorded hash: equal is `Verified`, different fails with nothing changed.

mod restore_common;

use std::path::{Path, PathBuf};

use etcd_client::{Client, CompactionOptions};
use quorate_backup::restore::verify::{Verification, key_space_hash};
use quorate_backup::restore::{self, RestoreError, RestoreTarget};
use quorate_backup::store::HashRecord;
use quorate_testkit::EtcdTestCluster;
use restore_common::*;

async fn hash_kv(client: &Client, revision: i64) -> (u32, i64) {
    let resp = client.clone().hash_kv(revision).await.unwrap();
    (resp.hash(), resp.compact_version())
}

async fn compact(client: &Client, revision: i64) {
    client
        .clone()
        .compact(revision, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
}

/// Overwrites, deletes and re-creations of a few keys, so compaction has history to drop.
async fn churn(client: &Client, prefix: &str, rounds: usize) {
    let mut c = client.clone();
    for round in 0..rounds {
        for k in 0..8 {
            c.put(format!("{prefix}{k}"), format!("r{round}"), None)
                .await
                .unwrap();
        }
        c.delete(format!("{prefix}{}", round % 8), None)
            .await
            .unwrap();
    }
}

/// Checks, for several revisions between the compaction and the file's head, that the file
/// hashes as etcd does.
async fn assert_hashes_like_etcd(client: &Client, file: &Path, from: i64, to: i64) {
    let mut revisions: Vec<i64> = vec![from, from + 1, (from + to) / 2, to - 1, to];
    revisions.retain(|r| (from..=to).contains(r));
    revisions.dedup();
    for revision in revisions {
        let (etcd, compaction) = hash_kv(client, revision).await;
        let ours = key_space_hash(file, revision, compaction).unwrap();
        assert_eq!(
            ours.hash,
            etcd,
            "revision {revision} under compaction {compaction} of {}",
            file.display()
        );
    }
}

async fn reproduces_etcds_hash(binary: Option<PathBuf>) {
    let cluster = EtcdTestCluster::start_with(1, |c| c.binary = binary.clone()).await;
    let client = connect(&cluster.member(0).client_url()).await;
    let source = Source {
        cluster,
        client: client.clone(),
    };
    let files = tempfile::tempdir().unwrap();
    workload(&client, "a/").await;
    churn(&client, "churn/", 6).await;
    // Compact at a deletion: etcd 3.5.30 keeps that tombstone on disk, 3.4 drops it; the
    // hash skips it either way.
    client.clone().delete("churn/7", None).await.unwrap();
    let compaction = head(&client).await;
    churn(&client, "churn/", 3).await;
    let uncompacted_dir = files.path().join("uncompacted");
    std::fs::create_dir(&uncompacted_dir).unwrap();
    let (uncompacted, _, uncompacted_rev) = source.snapshot_file(&uncompacted_dir).await;
    compact(&client, compaction).await;
    workload(&client, "b/").await;
    churn(&client, "churn/", 2).await;
    let (compacted, _, compacted_rev) = source.snapshot_file(files.path()).await;

    assert_eq!(
        key_space_hash(&compacted, compacted_rev, compaction)
            .unwrap()
            .finished_compaction,
        compaction
    );
    // A file taken before the compaction still holds the entries it drops: they are left out.
    assert_hashes_like_etcd(&client, &uncompacted, compaction + 1, uncompacted_rev).await;
    assert_hashes_like_etcd(&client, &compacted, compaction + 1, compacted_rev).await;
}

#[tokio::test]
async fn the_file_hashes_as_etcd_34_answers() {
    reproduces_etcds_hash(None).await;
}

async fn the_file_hashes_as_etcd_answers(version: quorate_api::EtcdVersion) {
    let found = quorate_etcd::binaries::EtcdBinaries::default().etcd(version);
    if let Some(etcd) = quorate_testkit::etcd_of_version_or_skip(version, found) {
        reproduces_etcds_hash(Some(etcd)).await;
    }
}

#[tokio::test]
async fn the_file_hashes_as_etcd_35_answers() {
    the_file_hashes_as_etcd_answers(quorate_api::EtcdVersion::V3_5).await;
}

#[tokio::test]
async fn the_file_hashes_as_etcd_36_answers() {
    the_file_hashes_as_etcd_answers(quorate_api::EtcdVersion::V3_6).await;
}

#[tokio::test]
async fn the_file_hashes_as_etcd_37_answers() {
    the_file_hashes_as_etcd_answers(quorate_api::EtcdVersion::V3_7).await;
}

fn record(revision: i64, (hash, compact_revision): (u32, i64)) -> HashRecord {
    HashRecord {
        revision,
        compact_revision,
        hash,
        member: "source".to_string(),
        recorded_at: "2026-11-27T00:00:00Z".to_string(),
        location: format!("test.hashkv/{revision:020}"),
    }
}

#[tokio::test]
async fn a_restore_is_verified_against_the_recorded_hash_and_a_mismatch_changes_nothing() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "before/").await;
    let (full_path, full_name, r) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(r + 1).await;
    churn(&source.client, "churn/", 4).await;
    let compaction = source.head().await;
    compact(&source.client, compaction).await;
    workload(&source.client, "middle/").await;
    let middle = source.head().await;
    churn(&source.client, "churn/", 4).await;
    workload(&source.client, "after/").await;
    let head = source.head().await;
    let events = capture.until(head).await;
    let deltas = || cut(&events, r + 1, &[middle, head]);
    let at_head = record(head, hash_kv(&source.client, head).await);
    let at_middle = record(middle, hash_kv(&source.client, middle).await);

    // The newest revision, against the hash taken at it.
    let target = Target::new();
    let mut inputs = target.inputs(&full_path, &full_name, deltas(), RestoreTarget::Latest);
    inputs.options.hash_record = Some(at_head.clone());
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(
        report.verification,
        Verification::Verified {
            revision: head,
            hash: at_head.hash
        }
    );

    // The same through the one-txn-per-revision replay: the data directory etcd made is read.
    let target = Target::new();
    let mut inputs = target.inputs(&full_path, &full_name, deltas(), RestoreTarget::Latest);
    inputs.options.hash_record = Some(at_head.clone());
    inputs.options.replay_method = restore::ReplayMethod::Txn;
    let report = restore::restore(inputs).await.unwrap();
    assert!(
        matches!(report.verification, Verification::Verified { revision, .. } if revision == head),
        "{:?}",
        report.verification
    );

    // A point in time, with the revision raised past it: checked at the revision replayed.
    let target = Target::new();
    let mut inputs = target.inputs(
        &full_path,
        &full_name,
        deltas(),
        RestoreTarget::ToRevision(middle),
    );
    inputs.options.hash_record = Some(at_middle.clone());
    inputs.options.revision_bump = Some(1_000);
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(report.restored_revision, middle + 1_000);
    assert_eq!(
        report.verification,
        Verification::Verified {
            revision: middle,
            hash: at_middle.hash
        }
    );

    // A record of another revision does not speak of this data.
    let target = Target::new();
    let mut inputs = target.inputs(&full_path, &full_name, deltas(), RestoreTarget::Latest);
    inputs.options.hash_record = Some(at_middle.clone());
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(
        report.verification,
        Verification::NotRecorded { revision: head }
    );

    // A hash that differs fails the restore, names the revision, and changes nothing.
    let target = Target::new();
    std::fs::create_dir_all(target.data_dir()).unwrap();
    std::fs::write(target.data_dir().join("keep-me"), "old data").unwrap();
    let before = listing(&target.data_dir());
    let mut inputs = target.inputs(&full_path, &full_name, deltas(), RestoreTarget::Latest);
    let mut wrong = at_head.clone();
    wrong.hash ^= 1;
    inputs.options.hash_record = Some(wrong);
    let err = restore::restore(inputs).await.unwrap_err();
    assert!(
        matches!(&err, RestoreError::KeySpaceMismatch(m) if m.revision == head),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&format!("revision {head}")), "{text}");
    assert!(text.contains("--no-verify"), "{text}");
    assert_eq!(listing(&target.data_dir()), before);
    assert!(
        !quorate_backup::restore::swap::part_dir(&target.data_dir()).exists(),
        "the half-made directory is gone"
    );

    // Turned off, the same record is not consulted.
    let target = Target::new();
    let mut inputs = target.inputs(&full_path, &full_name, deltas(), RestoreTarget::Latest);
    let mut wrong = at_head;
    wrong.hash ^= 1;
    inputs.options.hash_record = Some(wrong);
    inputs.options.skip_verification = true;
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(report.verification, Verification::Skipped);
}
