//! A backup written by an etcd 3.5 cluster restores exactly into etcd 3.5, 3.6 and 3.7: each
//! version's own tools (`etcdutl`; 3.6 and 3.7 have no `etcdctl snapshot restore`) turn the
//! directly written database file into a data directory, that version of etcd serves it, and
//! every key (value, create and mod revision, version, lease), the head revision and the leases
//! equal the source's; the recorded HashKV verifies each restore. A point-in-time restore with
//! the revision raised works on each version too (the raised revision compacted, new writes
//! above it), and so does the replay through that version's etcd (one txn per revision).
//!
//! 3.5–3.7 come from `scripts/install-etcd.sh`; a missing version skips with a message unless
//! `QUORATE_REQUIRE_ETCD` names it (CI does).

mod restore_common;

use std::path::{Path, PathBuf};

use etcd_client::{Client, GetOptions};
use quorate_api::EtcdVersion;
use quorate_backup::restore::verify::Verification;
use quorate_backup::restore::{self, EtcdTools, RestoreTarget};
use quorate_backup::store::HashRecord;
use quorate_testkit::{EtcdTestCluster, etcd_of_version_or_skip};
use restore_common::*;

fn installed(version: EtcdVersion) -> Option<PathBuf> {
    let found = quorate_etcd::binaries::EtcdBinaries::default().etcd(version);
    etcd_of_version_or_skip(version, found).map(|etcd| etcd.parent().unwrap().to_path_buf())
}

fn tools_in(dir: &Path) -> EtcdTools {
    EtcdTools::new(dir.join("etcd"), dir.join("etcdctl"))
}

async fn recorded(client: &Client, revision: i64) -> HashRecord {
    let resp = client.clone().hash_kv(revision).await.unwrap();
    HashRecord {
        revision,
        compact_revision: resp.compact_version(),
        hash: resp.hash(),
        member: "source".to_string(),
        recorded_at: "2026-11-28T00:00:00Z".to_string(),
        location: format!("test.hashkv/{revision:020}"),
    }
}

/// Every lease with its granted TTL and the keys attached to it, sorted.
async fn leases(client: &Client) -> Vec<(i64, i64, Vec<Vec<u8>>)> {
    let mut c = client.clone();
    let mut out = Vec::new();
    for lease in c.leases().await.unwrap().leases() {
        let options = etcd_client::LeaseTimeToLiveOptions::new().with_keys();
        let ttl = c
            .lease_time_to_live(lease.id(), Some(options))
            .await
            .unwrap();
        let mut keys = ttl.keys().to_vec();
        keys.sort();
        out.push((lease.id(), ttl.granted_ttl(), keys));
    }
    out.sort();
    out
}

/// The restored leases are the source's (same ID, TTL and keys), plus possibly leases the
/// source revoked after the full snapshot, which hold no key: a revocation reaches the deltas
/// only as the deletions of its keys (etcd's watch has no lease events), as for
/// etcd-backup-restore, and such a lease expires after its TTL without deleting anything.
fn assert_same_leases(
    version: EtcdVersion,
    restored: &[(i64, i64, Vec<Vec<u8>>)],
    source: &[(i64, i64, Vec<Vec<u8>>)],
) {
    for lease in source {
        assert!(
            restored.contains(lease),
            "{version}: lease {lease:?} of the source is not restored as it was: {restored:?}"
        );
    }
    for lease in restored.iter().filter(|l| !source.contains(l)) {
        assert!(
            lease.2.is_empty(),
            "{version}: restored lease {lease:?} is not the source's and holds keys"
        );
    }
}

/// Starts etcd of `dir` on the restored data of `target`.
async fn serve(mut target: Target, dir: &Path) -> (Target, quorate_testkit::EtcdProcess, Client) {
    target.config.binary = Some(dir.join("etcd"));
    let (process, client) = target.start().await;
    (target, process, client)
}

#[tokio::test]
async fn a_35_backup_restores_exactly_into_35_36_and_37() {
    let Some(v35) = installed(EtcdVersion::V3_5) else {
        return;
    };
    let binary = v35.join("etcd");
    let cluster = EtcdTestCluster::start_with(1, |c| c.binary = Some(binary.clone())).await;
    let client = connect(&cluster.member(0).client_url()).await;
    let source = Source { cluster, client };
    let version = source.client.clone().status().await.unwrap();
    assert!(
        version.version().starts_with("3.5."),
        "{}",
        version.version()
    );

    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "before/").await;
    let (full_path, full_name, r) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(r + 1).await;
    workload(&source.client, "middle/").await;
    let middle = source.head().await;
    workload(&source.client, "after/").await;
    let head = source.head().await;
    let events = capture.until(head).await;
    let deltas = || cut(&events, r + 1, &[middle, head]);
    let at_head = recorded(&source.client, head).await;
    let at_middle = recorded(&source.client, middle).await;
    let source_now = source.state(None).await;
    let source_middle = source.state(Some(middle)).await;
    let source_leases = leases(&source.client).await;
    assert!(source_leases.iter().any(|(_, _, keys)| !keys.is_empty()));

    for version in [EtcdVersion::V3_5, EtcdVersion::V3_6, EtcdVersion::V3_7] {
        let Some(dir) = installed(version) else {
            continue;
        };
        // The newest revision.
        let target = Target::new();
        let mut inputs = target.inputs(&full_path, &full_name, deltas(), RestoreTarget::Latest);
        inputs.tools = tools_in(&dir);
        inputs.options.hash_record = Some(at_head.clone());
        let report = restore::restore(inputs)
            .await
            .unwrap_or_else(|e| panic!("restore into {version}: {e}"));
        assert_eq!(report.restored_revision, head, "{version}");
        assert_eq!(
            report.verification,
            Verification::Verified {
                revision: head,
                hash: at_head.hash
            },
            "{version}"
        );
        let (_target, _etcd, restored) = serve(target, &dir).await;
        let status = restored.clone().status().await.unwrap();
        assert!(
            status.version().starts_with(&format!("{version}.")),
            "{version} serves as {}",
            status.version()
        );
        assert_same(&state_of(&restored, None).await, &source_now);
        assert_same_leases(version, &leases(&restored).await, &source_leases);
        let hash = restored.clone().hash_kv(head).await.unwrap();
        assert_eq!(hash.hash(), at_head.hash, "{version}: etcd's own HashKV");

        // The same through the one-txn-per-revision replay: that version's etcd replays.
        let target = Target::new();
        let mut inputs = target.inputs(&full_path, &full_name, deltas(), RestoreTarget::Latest);
        inputs.tools = tools_in(&dir);
        inputs.options.hash_record = Some(at_head.clone());
        inputs.options.replay_method = restore::ReplayMethod::Txn;
        let report = restore::restore(inputs)
            .await
            .unwrap_or_else(|e| panic!("txn replay into {version}: {e}"));
        assert_eq!(
            report.verification,
            Verification::Verified {
                revision: head,
                hash: at_head.hash
            },
            "{version}: txn replay"
        );
        let (_target, _etcd, restored) = serve(target, &dir).await;
        assert_same(&state_of(&restored, None).await, &source_now);

        // A point in time, the revision raised past what the bucket holds.
        let target = Target::new();
        let mut inputs = target.inputs(
            &full_path,
            &full_name,
            deltas(),
            RestoreTarget::ToRevision(middle),
        );
        inputs.tools = tools_in(&dir);
        inputs.options.hash_record = Some(at_middle.clone());
        inputs.options.revision_bump = Some(1_000);
        let report = restore::restore(inputs)
            .await
            .unwrap_or_else(|e| panic!("point-in-time restore into {version}: {e}"));
        assert_eq!(report.restored_revision, middle + 1_000, "{version}");
        assert_eq!(
            report.verification,
            Verification::Verified {
                revision: middle,
                hash: at_middle.hash
            },
            "{version}"
        );
        let (_target, _etcd, restored) = serve(target, &dir).await;
        let state = state_of(&restored, None).await;
        assert_eq!(state.revision, middle + 1_000, "{version}: raised head");
        assert_eq!(
            state.keys, source_middle.keys,
            "{version}: keys at {middle}"
        );
        let old = restored
            .clone()
            .get(
                "",
                Some(GetOptions::new().with_all_keys().with_revision(middle)),
            )
            .await;
        assert!(
            old.as_ref()
                .is_err_and(|e| e.to_string().contains("compacted")),
            "{version}: revision {middle} is compacted after the bump: {old:?}"
        );
        let written = restored
            .clone()
            .put("after-restore", "x", None)
            .await
            .unwrap();
        assert_eq!(
            written.header().unwrap().revision(),
            middle + 1_001,
            "{version}: new writes continue above the raised revision"
        );
    }
}
