//! Restores from a real full snapshot and real captured deltas reproduce the source exactly:
//! every key's value, create/mod revision, version and lease, and the head revision.

mod restore_common;

use std::time::Duration;

use futures::StreamExt;
use quorate_backup::restore::{
    self, FullSnapshotInput, FullSnapshotSource, MemberIdentity, RestoreError, RestoreTarget,
};
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::EtcdProcess;
use restore_common::*;

/// Source with a workload, a full snapshot at R, then more writes captured as three deltas.
struct Scenario {
    source: Source,
    files: quorate_testkit::TempDir,
    full_path: std::path::PathBuf,
    full_name: String,
    full_revision: i64,
    events: Vec<quorate_backup::delta::DeltaEvent>,
    head: i64,
    long_lease: i64,
}

async fn scenario() -> Scenario {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    let long_lease = workload(&source.client, "before/").await;
    let (full_path, full_name, full_revision) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(full_revision + 1).await;
    let mut c = source.client.clone();
    // Changes to keys from the full snapshot, including its leased keys.
    c.put("before/plain/3", "changed-after-full", None)
        .await
        .unwrap();
    c.delete("before/plain/4", None).await.unwrap();
    c.put(
        "before/leased/c",
        "on-the-old-lease",
        Some(etcd_client::PutOptions::new().with_lease(long_lease)),
    )
    .await
    .unwrap();
    c.delete("before/leased/a", None).await.unwrap();
    workload(&source.client, "after/").await;
    let head = source.head().await;
    let events = capture.until(head).await;
    assert_eq!(
        events.last().unwrap().etcd_event.mod_revision(),
        head,
        "captured through the head"
    );
    Scenario {
        source,
        files,
        full_path,
        full_name,
        full_revision,
        events,
        head,
        long_lease,
    }
}

impl Scenario {
    /// The deltas cut at roughly thirds of the captured range.
    fn deltas(&self) -> Vec<restore::DeltaObject> {
        let r = self.full_revision;
        let span = self.head - r;
        cut(
            &self.events,
            r + 1,
            &[r + span / 3, r + 2 * span / 3, self.head],
        )
    }
}

#[tokio::test]
async fn restores_every_key_lease_and_the_head_revision_from_full_and_deltas() {
    let s = scenario().await;
    let target = Target::new();
    let report = restore::restore(target.inputs(
        &s.full_path,
        &s.full_name,
        s.deltas(),
        RestoreTarget::Latest,
    ))
    .await
    .unwrap();
    assert_eq!(report.full_revision, s.full_revision);
    assert_eq!(report.restored_revision, s.head);
    assert_eq!(report.deltas_read, 3);
    assert_eq!(report.deltas_applied, 3);
    assert_eq!(report.events_applied, s.events.len() as u64);
    assert_eq!(report.revisions_applied, (s.head - s.full_revision) as u64);
    assert_eq!(report.events_skipped, 0);
    assert!(
        report.leases_granted >= 1,
        "the deltas' own lease is granted"
    );
    assert!(report.events_per_second > 0.0);
    assert!(report.duration >= report.replay_duration);
    assert!(!restore::swap::part_dir(&target.data_dir()).exists());
    assert!(!restore::swap::work_dir(&target.data_dir()).exists());

    let (_restored, client) = target.start().await;
    let restored = state_of(&client, None).await;
    let source = s.source.state(None).await;
    assert!(source.keys.iter().any(|k| k.lease != 0));
    assert_same(&restored, &source);

    // Every lease a key carries exists with the source's granted TTL.
    let mut leases: Vec<i64> = source.keys.iter().map(|k| k.lease).collect();
    leases.retain(|l| *l != 0);
    leases.dedup();
    for id in leases {
        let want = s
            .source
            .client
            .clone()
            .lease_time_to_live(id, None)
            .await
            .unwrap();
        let got = client.clone().lease_time_to_live(id, None).await.unwrap();
        assert!(got.ttl() > 0, "lease {id:x} exists in the restored member");
        assert_eq!(got.granted_ttl(), want.granted_ttl(), "lease {id:x}");
        let mut keys = got.keys().to_vec();
        let mut want_keys = want.keys().to_vec();
        keys.sort();
        want_keys.sort();
        assert_eq!(keys, want_keys, "keys on lease {id:x}");
    }
    assert!(
        source.get("before/leased/c").unwrap().lease == s.long_lease,
        "a delta put on a lease from the full snapshot"
    );
    // The restored member accepts writes at the next revision.
    let rev = client
        .clone()
        .put("after-restore", "x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    assert_eq!(rev, s.head + 1);
}

#[tokio::test]
async fn to_revision_gives_the_exact_state_at_that_revision() {
    let s = scenario().await;
    // Inside the second delta; the revoked lease's deletes make one multi-event revision
    // somewhere in each workload, so a few revisions apart test both kinds.
    let n = s.full_revision + (s.head - s.full_revision) / 2;
    let target = Target::new();
    let report = restore::restore(target.inputs(
        &s.full_path,
        &s.full_name,
        s.deltas(),
        RestoreTarget::ToRevision(n),
    ))
    .await
    .unwrap();
    assert_eq!(report.restored_revision, n);
    assert_eq!(
        report.deltas_read, 2,
        "the third delta is not needed for a revision inside the second"
    );
    let (_restored, client) = target.start().await;
    assert_same(
        &state_of(&client, None).await,
        &s.source.state(Some(n)).await,
    );
}

#[tokio::test]
async fn to_revision_beyond_the_deltas_fails_and_leaves_the_target_untouched() {
    let s = scenario().await;
    let target = Target::new();
    std::fs::create_dir_all(target.data_dir().join("member")).unwrap();
    std::fs::write(target.data_dir().join("member/old-data"), "keep me").unwrap();
    let before = listing(&target.data_dir());
    let err = restore::restore(target.inputs(
        &s.full_path,
        &s.full_name,
        s.deltas(),
        RestoreTarget::ToRevision(s.head + 5),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(err, RestoreError::TargetNotReached { target, reached, .. }
            if target == s.head + 5 && reached == s.head),
        "{err}"
    );
    assert_eq!(listing(&target.data_dir()), before);
    assert_eq!(
        std::fs::read_to_string(target.data_dir().join("member/old-data")).unwrap(),
        "keep me"
    );
    assert!(!restore::swap::part_dir(&target.data_dir()).exists());
    assert!(!restore::swap::work_dir(&target.data_dir()).exists());

    // A full snapshot past the target is refused before anything runs.
    let err = restore::restore(target.inputs(
        &s.full_path,
        &s.full_name,
        vec![],
        RestoreTarget::ToRevision(s.full_revision - 1),
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, RestoreError::FullPastTarget { .. }), "{err}");
    assert_eq!(listing(&target.data_dir()), before);
}

#[tokio::test]
async fn to_time_stops_after_the_last_event_at_or_before_the_time() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "before/").await;
    let (full_path, full_name, full_revision) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(full_revision + 1).await;
    workload(&source.client, "early/").await;
    let early_head = source.head().await;
    capture.until(early_head).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = jiff::Timestamp::now();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    workload(&source.client, "late/").await;
    let head = source.head().await;
    let events = capture.until(head).await;
    // One delta holding events on both sides of the target time.
    let deltas = cut(&events, full_revision + 1, &[head]);

    let target = Target::new();
    let report =
        restore::restore(target.inputs(&full_path, &full_name, deltas, RestoreTarget::ToTime(t)))
            .await
            .unwrap();
    assert_eq!(report.restored_revision, early_head);
    let (_restored, client) = target.start().await;
    let restored = state_of(&client, None).await;
    assert_same(&restored, &source.state(Some(early_head)).await);
    assert!(restored.keys.iter().all(|k| !k.key.starts_with("late/")));
}

#[tokio::test]
async fn full_snapshot_streamed_from_the_member_restores_without_deltas() {
    let source = Source::start().await;
    workload(&source.client, "only/").await;
    let revision = source.head().await;
    let member = MemberClient::connect(&source.url(), None, EtcdTimeouts::default())
        .await
        .unwrap();
    let stream = member
        .snapshot()
        .await
        .unwrap()
        .into_stream()
        .map(|chunk| chunk.map_err(std::io::Error::other))
        .boxed();
    let target = Target::new();
    let mut inputs = target.inputs(
        std::path::Path::new("unused"),
        "Full-streamed",
        vec![],
        RestoreTarget::Latest,
    );
    inputs.full = FullSnapshotInput {
        name: "Full-streamed".into(),
        source: FullSnapshotSource::Stream(stream),
    };
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(report.restored_revision, revision);
    assert_eq!(report.deltas_read, 0);
    let (_restored, client) = target.start().await;
    assert_same(&state_of(&client, None).await, &source.state(None).await);
}

#[tokio::test]
async fn every_member_of_a_multi_member_cluster_restores_and_the_cluster_runs() {
    let s = scenario().await;
    let dir = tempfile::tempdir().unwrap();
    let mut configs: Vec<_> = (0..3)
        .map(|i| quorate_testkit::EtcdMemberConfig::new(&format!("r{i}"), dir.path()))
        .collect();
    let initial: Vec<(String, String)> = configs
        .iter()
        .map(|c| (c.name.clone(), c.peer_url()))
        .collect();
    let initial_cluster = quorate_testkit::format_initial_cluster(&initial);
    for config in &mut configs {
        config.initial_cluster = initial.clone();
        let identity = MemberIdentity {
            name: config.name.clone(),
            peer_urls: vec![config.peer_url()],
            initial_cluster: initial_cluster.clone(),
            cluster_token: "restored-3".into(),
        };
        let target = Target::new();
        let mut inputs = target.inputs(
            &s.full_path,
            &s.full_name,
            s.deltas(),
            RestoreTarget::Latest,
        );
        inputs.member = identity;
        inputs.data_dir = config.data_dir.clone();
        let report = restore::restore(inputs).await.unwrap();
        assert_eq!(report.restored_revision, s.head);
    }
    let mut members = Vec::new();
    for config in &configs {
        members.push(EtcdProcess::start(config.clone()).unwrap());
    }
    for member in &mut members {
        member
            .wait_ready(Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let source = s.source.state(None).await;
    for member in &members {
        let client = connect(&member.client_url()).await;
        assert_same(&state_of(&client, None).await, &source);
        let list = client.clone().member_list().await.unwrap();
        assert_eq!(list.members().len(), 3);
    }
    drop(s.files);
}

#[tokio::test]
async fn a_member_with_a_tls_peer_url_restores_and_starts_with_peer_tls() {
    let s = scenario().await;
    let mut target = Target::new();
    let certs = quorate_testkit::TestCerts::generate(target.dir.path()).unwrap();
    target.config.peer_tls = Some(certs.server_tls(true));
    target.config.initial_cluster = vec![(target.config.name.clone(), target.config.peer_url())];
    assert!(target.identity().peer_urls[0].starts_with("https://"));
    let report = restore::restore(target.inputs(
        &s.full_path,
        &s.full_name,
        s.deltas(),
        RestoreTarget::Latest,
    ))
    .await
    .unwrap();
    assert_eq!(report.restored_revision, s.head);
    let (_restored, client) = target.start().await;
    assert_same(&state_of(&client, None).await, &s.source.state(None).await);
    let members = client.clone().member_list().await.unwrap();
    assert_eq!(
        members.members()[0].peer_urls(),
        &[target.config.peer_url()],
        "the restored member keeps its https peer URL"
    );
}

#[tokio::test]
async fn a_bumped_restore_raises_the_revision_and_marks_it_compacted() {
    let s = scenario().await;
    let n = s.full_revision + (s.head - s.full_revision) / 2;
    let target = Target::new();
    let mut inputs = target.inputs(
        &s.full_path,
        &s.full_name,
        s.deltas(),
        RestoreTarget::ToRevision(n),
    );
    inputs.options.revision_bump = Some(1_000_000);
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(report.restored_revision, n + 1_000_000);
    assert_eq!(report.revision_bumped_by, 1_000_000);

    let (_restored, client) = target.start().await;
    let mut c = client.clone();
    // The keys are those of revision n, untouched by the bump.
    let state = state_of(&client, None).await;
    assert_eq!(state.revision, n + 1_000_000);
    let mut expected = s.source.state(Some(n)).await;
    expected.revision = state.revision;
    assert_same(&state, &expected);
    assert_eq!(state.keys.len(), expected.keys.len());
    // Every revision up to the bumped one is compacted: a client holding one of the source's
    // revisions (a watch cache) is told so and relists.
    let err = c
        .get(
            "",
            Some(
                etcd_client::GetOptions::new()
                    .with_all_keys()
                    .with_revision(n),
            ),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("compacted"), "{err}");
    // New writes continue above it.
    let put = c.put("after/the-bump", "x", None).await.unwrap();
    assert_eq!(put.header().unwrap().revision(), n + 1_000_001);
}
