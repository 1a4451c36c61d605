//! A large replay: ≥ 200,000 source revisions of
//! single-key puts mixed with deletes, multi-key txns, lease grants and revokes (with their
//! keys) and compactions, restored identically to the source: every key's value, create and
//! mod revision, version and lease, every lease with its TTL, and the same `HashKV`, which the
//! restore itself verifies against the source's.

mod restore_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use etcd_client::{Client, CompactionOptions, PutOptions, Txn, TxnOp};
use quorate_backup::restore::{self, RestoreTarget};
use restore_common::{Source, Target, cut, state_of};

/// Source revisions the replay must cover.
const REVISIONS: i64 = 200_000;
/// Concurrent writers: enough to keep etcd's proposal pipeline full.
const WRITERS: u64 = 32;

/// A small deterministic generator (xorshift), one seed per writer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One writer's mix until `stop`: mostly single-key puts, some deletes, txns of ten keys, and
/// leases granted for three keys each and later revoked (deleting their keys in one revision).
async fn writer(client: Client, id: u64, stop: Arc<AtomicBool>) {
    let mut c = client;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id + 1));
    let mut leases = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let roll = rng.next() % 100;
        let key = format!("w{id}/k{}", rng.next() % 400);
        match roll {
            0..=79 => {
                c.put(key, format!("v{i}-{}", "x".repeat((i % 64) as usize)), None)
                    .await
                    .unwrap();
            }
            80..=87 => {
                c.delete(key, None).await.unwrap();
            }
            88..=93 => {
                let ops = (0..10)
                    .map(|m| TxnOp::put(format!("w{id}/t{m}"), format!("t{i}"), None))
                    .collect::<Vec<_>>();
                c.txn(Txn::new().and_then(ops)).await.unwrap();
            }
            94..=96 => {
                let lease = c.lease_grant(600, None).await.unwrap().id();
                for n in 0..3 {
                    c.put(
                        format!("w{id}/lease{lease:x}/{n}"),
                        "leased",
                        Some(PutOptions::new().with_lease(lease)),
                    )
                    .await
                    .unwrap();
                }
                leases.push(lease);
            }
            _ => {
                if leases.len() > 2 {
                    let lease = leases.remove(0);
                    c.lease_revoke(lease).await.unwrap();
                }
            }
        }
    }
}

async fn hash_kv(client: &Client, revision: i64) -> (u32, i64) {
    let resp = client.clone().hash_kv(revision).await.unwrap();
    (resp.hash(), resp.compact_version())
}

async fn leases(client: &Client) -> Vec<(i64, i64)> {
    let mut c = client.clone();
    let mut out = Vec::new();
    for l in c.leases().await.unwrap().leases() {
        let ttl = c.lease_time_to_live(l.id(), None).await.unwrap();
        out.push((l.id(), ttl.granted_ttl()));
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_mixed_revisions_replay_exactly() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    for n in 0..100 {
        source
            .client
            .clone()
            .put(format!("base/{n}"), "before the full snapshot", None)
            .await
            .unwrap();
    }
    let (full_path, full_name, full_revision) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(full_revision + 1).await;

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| tokio::spawn(writer(source.client.clone(), id, stop.clone())))
        .collect();
    // Compact twice while writing, at revisions the capture has passed (as kube-apiserver
    // compacts a live cluster).
    let mut compacted = 0;
    for fraction in [3, 2] {
        let at = full_revision + REVISIONS / fraction;
        while source.head().await < at {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        capture.until(at).await;
        source
            .client
            .clone()
            .compact(at, Some(CompactionOptions::new().with_physical()))
            .await
            .unwrap();
        compacted = at;
    }
    while source.head().await < full_revision + REVISIONS {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let head = source.head().await;
    let events = capture.until(head).await;

    // Deltas of about 25,000 revisions each.
    let lasts: Vec<i64> = (1..)
        .map(|k| (full_revision + k * 25_000).min(head))
        .take_while({
            let mut done = false;
            move |last| !std::mem::replace(&mut done, *last == head)
        })
        .collect();
    let deltas = cut(&events, full_revision + 1, &lasts);
    // etcd's hash at the head, as the backup leader records it.
    let (recorded, recorded_compaction) = hash_kv(&source.client, head).await;
    let target = Target::new();
    let mut inputs = target.inputs(&full_path, &full_name, deltas, RestoreTarget::Latest);
    inputs.options.hash_record = Some(quorate_backup::store::HashRecord {
        revision: head,
        compact_revision: recorded_compaction,
        hash: recorded,
        member: "source".to_string(),
        recorded_at: String::new(),
        location: String::new(),
    });
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(report.restored_revision, head);
    // The restored file hashes as the source did, though only the source compacted.
    assert_eq!(
        report.verification,
        restore::verify::Verification::Verified {
            revision: head,
            hash: recorded
        }
    );
    assert!(report.revisions_applied >= REVISIONS as u64, "{report:?}");
    assert_eq!(report.events_applied, events.len() as u64);

    let (_restored, client) = target.start().await;
    let restored_state = state_of(&client, None).await;
    let source_state = state_of(&source.client, Some(head)).await;
    assert_eq!(restored_state.revision, head);
    assert_eq!(restored_state.keys.len(), source_state.keys.len());
    restore_common::assert_same(&restored_state, &source_state);
    // Every lease of the source, with its TTL. A revoked lease's revocation reaches the deltas
    // only as deletes of its keys, so the restored member may keep it, without keys.
    let restored_leases = leases(&client).await;
    for lease in leases(&source.client).await {
        assert!(restored_leases.contains(&lease), "lease {lease:?} missing");
    }
    let used: std::collections::HashSet<i64> =
        restored_state.keys.iter().map(|k| k.lease).collect();
    for (id, _) in &restored_leases {
        if used.contains(id) {
            assert!(
                source_state.keys.iter().any(|k| k.lease == *id),
                "lease {id:x} holds keys only in the restored member"
            );
        }
    }

    // The same history gives the same hash once both have compacted at the same revision.
    client
        .clone()
        .compact(compacted, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    let (source_hash, source_compacted) = hash_kv(&source.client, head).await;
    assert_eq!(source_compacted, compacted);
    assert_eq!(hash_kv(&client, head).await, (source_hash, compacted));
}
