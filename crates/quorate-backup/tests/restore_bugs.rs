//! The restore failures etcd-backup-restore is known for, reproduced against real etcd, and
//! bad input refused without touching the target directory.

mod restore_common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use quorate_backup::delta::{DeltaError, DeltaEvent, EVENT_DELETE, EtcdEvent, KeyValue};
use quorate_backup::layout::SnapshotName;
use quorate_backup::restore::{
    self, DeltaContent, DeltaObject, ReplayError, RestoreError, RestoreTarget, plan_restore,
};
use restore_common::*;

/// A source with a workload, a full snapshot, and `after/` writes captured from `capture_from`
/// (relative to the full snapshot's revision: 0 = from the snapshot's own revision).
struct Captured {
    source: Source,
    _files: quorate_testkit::TempDir,
    full_path: std::path::PathBuf,
    full_name: String,
    full_revision: i64,
    events: Vec<DeltaEvent>,
    head: i64,
}

async fn captured(capture_offset: i64) -> Captured {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "before/").await;
    let (full_path, full_name, full_revision) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(full_revision + capture_offset).await;
    workload(&source.client, "after/").await;
    let head = source.head().await;
    let events = capture.until(head).await;
    Captured {
        source,
        _files: files,
        full_path,
        full_name,
        full_revision,
        events,
        head,
    }
}

async fn assert_restored_equals_source(target: &Target, source: &Source) {
    let (_restored, client) = target.start().await;
    assert_same(&state_of(&client, None).await, &source.state(None).await);
}

#[tokio::test]
async fn br844_delta_beginning_at_the_full_snapshot_revision() {
    let c = captured(0).await;
    let r = c.full_revision;
    assert_eq!(
        c.events[0].etcd_event.mod_revision(),
        r,
        "the first delta holds the full snapshot's own last event"
    );
    let mid = r + (c.head - r) / 2;
    let deltas = cut(&c.events, r, &[mid, c.head]);
    assert!(deltas[0].name.starts_with(&format!("Incr-{r:08}-")));

    // The plan takes the delta, skipping through the full snapshot's revision.
    let names: Vec<SnapshotName> = std::iter::once(c.full_name.as_str())
        .chain(deltas.iter().map(|d| d.name.as_str()))
        .map(|n| SnapshotName::parse(n).unwrap())
        .collect();
    let plan = plan_restore(&names, RestoreTarget::Latest).unwrap();
    assert_eq!(plan.deltas.len(), 2);
    assert_eq!(plan.deltas[0].skip_through, r);

    let target = Target::new();
    let report =
        restore::restore(target.inputs(&c.full_path, &c.full_name, deltas, RestoreTarget::Latest))
            .await
            .unwrap();
    assert_eq!(report.restored_revision, c.head);
    let at_r = c
        .events
        .iter()
        .filter(|e| e.etcd_event.mod_revision() == r)
        .count();
    assert_eq!(report.events_skipped, at_r as u64);
    assert_restored_equals_source(&target, &c.source).await;
}

#[tokio::test]
async fn br1043_overlapping_deltas_of_two_backup_leaders() {
    let c = captured(1).await;
    let r = c.full_revision;
    let s = c.head - r;
    let (a, b) = (r + s / 2, r + 2 * s / 3);
    let object = |start, last, created| DeltaObject {
        name: SnapshotName::incr(start, last, created, None).file_name(),
        content: DeltaContent::Raw(
            quorate_backup::delta::encode(&events_in(&c.events, start, last)).into(),
        ),
    };
    // Old leader: A, C. New leader (took over, restarted from the same revision): B, D.
    let old_a = object(r + 1, a, 1001);
    let new_b = object(r + 1, b, 1002);
    let old_c = object(a + 1, c.head, 1003);
    let new_d = object(b + 1, c.head, 1004);
    let all = [&old_a, &new_b, &old_c, &new_d];

    // The plan: B (reaches furthest from the full snapshot), then C, applied above B's end.
    let mut names: Vec<SnapshotName> = all
        .iter()
        .map(|d| SnapshotName::parse(&d.name).unwrap())
        .collect();
    names.push(SnapshotName::parse(&c.full_name).unwrap());
    let plan = plan_restore(&names, RestoreTarget::Latest).unwrap();
    let chain: Vec<(String, i64)> = plan
        .deltas
        .iter()
        .map(|d| (d.snapshot.file_name(), d.skip_through))
        .collect();
    assert_eq!(
        chain,
        vec![(new_b.name.clone(), r), (old_c.name.clone(), b)]
    );

    let target = Target::new();
    let planned = vec![new_b.clone(), old_c.clone()];
    let report =
        restore::restore(target.inputs(&c.full_path, &c.full_name, planned, RestoreTarget::Latest))
            .await
            .unwrap();
    assert_eq!(report.restored_revision, c.head);
    assert_eq!(
        report.events_skipped,
        events_in(&c.events, a + 1, b).len() as u64
    );
    assert_restored_equals_source(&target, &c.source).await;

    // Fed every object of both leaders in name order, the replay still applies each revision
    // exactly once.
    let target = Target::new();
    let everything: Vec<DeltaObject> = all.iter().map(|d| (*d).clone()).collect();
    let report = restore::restore(target.inputs(
        &c.full_path,
        &c.full_name,
        everything,
        RestoreTarget::Latest,
    ))
    .await
    .unwrap();
    assert_eq!(report.restored_revision, c.head);
    assert_eq!(report.events_applied, c.events.len() as u64);
    assert_restored_equals_source(&target, &c.source).await;
}

#[tokio::test]
async fn br1045_expired_lease_in_the_full_snapshot_does_not_shift_delta_events() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    workload(&source.client, "before/").await;
    let mut client = source.client.clone();
    // Many short leases, as a Kubernetes cluster has: all must be renewed in time after
    // start-up (granted first, so the shortest below is surely alive at the snapshot).
    for i in 0..100 {
        let id = client.lease_grant(3, None).await.unwrap().id();
        client
            .put(
                format!("short/many/{i:03}"),
                "expiring",
                Some(etcd_client::PutOptions::new().with_lease(id)),
            )
            .await
            .unwrap();
    }
    // A short lease with keys, in the full snapshot; it expires in the source soon after.
    let short = client.lease_grant(2, None).await.unwrap().id();
    for key in ["short/a", "short/b"] {
        client
            .put(
                key,
                "expiring",
                Some(etcd_client::PutOptions::new().with_lease(short)),
            )
            .await
            .unwrap();
    }
    let (full_path, full_name, r) = source.snapshot_file(files.path()).await;
    let capture = source.capture_from(r + 1).await;
    client
        .put("first", "the first delta event", None)
        .await
        .unwrap();
    client.put("second", "2", None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !source
        .state(None)
        .await
        .keys
        .iter()
        .all(|k| !k.key.starts_with("short/"))
    {
        assert!(
            Instant::now() < deadline,
            "the short lease never expired in the source"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.put("after-expiry", "x", None).await.unwrap();
    let head = source.head().await;
    let events = capture.until(head).await;
    let full_state = source.state(Some(r)).await;
    assert!(
        full_state.get("short/a").is_some(),
        "the full snapshot holds the leased keys"
    );

    // The first delta holds only the first event; the rest arrives after a pause longer than
    // the lease's TTL in the restoring etcd (a slow download), during which an unattended
    // lease would expire and its revocation would take revision r + 2.
    let deltas = cut(&events, r + 1, &[r + 1, head]);
    let mut n = 0;
    let slow = futures::stream::iter(deltas)
        .then(move |d| {
            n += 1;
            let pause = n > 1;
            async move {
                if pause {
                    tokio::time::sleep(Duration::from_secs(8)).await;
                }
                Ok(d)
            }
        })
        .boxed();
    let target = Target::new();
    let mut inputs = target.inputs(&full_path, &full_name, vec![], RestoreTarget::Latest);
    inputs.deltas = slow;
    let report = restore::restore(inputs).await.unwrap();
    assert_eq!(report.restored_revision, head);
    assert_eq!(report.events_applied, events.len() as u64);

    let (_restored, restored) = target.start().await;
    let state = state_of(&restored, None).await;
    assert_eq!(
        state.get("first").map(|k| k.mod_revision),
        Some(r + 1),
        "the first delta event is applied at its own revision"
    );
    assert_same(&state, &source.state(None).await);
}

#[tokio::test]
async fn a_txn_split_across_two_deltas_is_still_one_revision() {
    let c = captured(1).await;
    // The first revision with several events (the workload's txn or lease revocation).
    let split_rev = c
        .events
        .iter()
        .map(|e| e.etcd_event.mod_revision())
        .find(|rev| {
            c.events
                .iter()
                .filter(|e| e.etcd_event.mod_revision() == *rev)
                .count()
                > 1
        })
        .expect("the workload has a multi-event revision");
    let pos = c
        .events
        .iter()
        .position(|e| e.etcd_event.mod_revision() == split_rev)
        .unwrap();
    let first: Vec<DeltaEvent> = c.events[..=pos].to_vec();
    let second: Vec<DeltaEvent> = c.events[pos + 1..].to_vec();
    let deltas = vec![
        DeltaObject {
            name: SnapshotName::incr(c.full_revision + 1, split_rev, 1001, None).file_name(),
            content: DeltaContent::Events(first),
        },
        DeltaObject {
            name: SnapshotName::incr(split_rev, c.head, 1002, None).file_name(),
            content: DeltaContent::Events(second),
        },
    ];
    let target = Target::new();
    let report =
        restore::restore(target.inputs(&c.full_path, &c.full_name, deltas, RestoreTarget::Latest))
            .await
            .unwrap();
    assert_eq!(report.restored_revision, c.head);
    assert_eq!(report.revisions_applied, (c.head - c.full_revision) as u64);
    assert_restored_equals_source(&target, &c.source).await;
}

/// A target directory with old data in it, to prove failures leave it alone.
fn occupied_target() -> (Target, Vec<String>) {
    let target = Target::new();
    std::fs::create_dir_all(target.data_dir().join("member/snap")).unwrap();
    std::fs::write(target.data_dir().join("member/snap/db"), "old data").unwrap();
    let before = listing(&target.data_dir());
    (target, before)
}

fn assert_untouched(target: &Target, before: &[String]) {
    assert_eq!(listing(&target.data_dir()), before);
    assert_eq!(
        std::fs::read_to_string(target.data_dir().join("member/snap/db")).unwrap(),
        "old data"
    );
    assert!(!restore::swap::part_dir(&target.data_dir()).exists());
    assert!(!restore::swap::work_dir(&target.data_dir()).exists());
}

#[tokio::test]
async fn a_corrupted_delta_fails_naming_it_and_leaves_the_target_untouched() {
    let c = captured(1).await;
    let r = c.full_revision;
    let s = c.head - r;
    let mut deltas = cut(&c.events, r + 1, &[r + s / 3, r + 2 * s / 3, c.head]);
    let damaged = deltas[1].name.clone();
    let DeltaContent::Raw(bytes) = &deltas[1].content else {
        unreachable!()
    };
    let mut bad = bytes.to_vec();
    bad[10] ^= 0x20;
    deltas[1].content = DeltaContent::Raw(bad.into());

    let (target, before) = occupied_target();
    let err =
        restore::restore(target.inputs(&c.full_path, &c.full_name, deltas, RestoreTarget::Latest))
            .await
            .unwrap_err();
    assert!(
        matches!(&err, RestoreError::Delta(DeltaError::ChecksumMismatch { name }) if *name == damaged),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&damaged), "{text}");
    assert!(text.contains("checksum"), "{text}");
    assert!(text.contains("nothing was changed"), "{text}");
    assert_untouched(&target, &before);
}

#[tokio::test]
async fn missing_revisions_between_deltas_fail_naming_both_objects() {
    let c = captured(1).await;
    let r = c.full_revision;
    let a = r + (c.head - r) / 2;
    // Revisions a+1 and a+2 are lost.
    let first = delta_object(events_in(&c.events, r + 1, a), r + 1, a);
    let second = delta_object(events_in(&c.events, a + 3, c.head), a + 3, c.head);
    let (first_name, second_name) = (first.name.clone(), second.name.clone());
    let (target, before) = occupied_target();
    let err = restore::restore(target.inputs(
        &c.full_path,
        &c.full_name,
        vec![first, second],
        RestoreTarget::Latest,
    ))
    .await
    .unwrap_err();
    match &err {
        RestoreError::Replay(ReplayError::Gap {
            previous,
            object,
            missing_from,
            missing_to,
            ..
        }) => {
            assert_eq!(
                (previous, object, *missing_from, *missing_to),
                (&first_name, &second_name, a + 1, a + 2)
            );
        }
        other => panic!("expected a gap error, got {other:?}"),
    }
    assert_untouched(&target, &before);
}

#[tokio::test]
async fn a_delta_from_another_history_fails_naming_the_object_and_revision() {
    let c = captured(1).await;
    let r = c.full_revision;
    // Deleting a key the full snapshot does not have: the delta cannot belong to this full
    // snapshot (etcd would not even advance its revision).
    let foreign = DeltaEvent {
        etcd_event: EtcdEvent {
            kind: EVENT_DELETE,
            kv: Some(KeyValue {
                key: b"no/such/key".to_vec(),
                mod_revision: r + 1,
                ..KeyValue::default()
            }),
            prev_kv: None,
        },
        time: jiff::Timestamp::now().to_string(),
        lease_ttl: None,
    };
    let object = delta_object(vec![foreign], r + 1, r + 1);
    let name = object.name.clone();
    let (target, before) = occupied_target();
    let err = restore::restore(target.inputs(
        &c.full_path,
        &c.full_name,
        vec![object],
        RestoreTarget::Latest,
    ))
    .await
    .unwrap_err();
    match &err {
        RestoreError::Replay(ReplayError::Diverged {
            object,
            revision,
            key,
            problem,
        }) => {
            assert_eq!(
                (object, *revision, key.as_str()),
                (&name, r + 1, "no/such/key")
            );
            assert!(problem.contains("does not exist"), "{problem}");
        }
        other => panic!("expected a diverged delta, got {other:?}"),
    }
    assert!(err.to_string().contains(&name));
    assert_untouched(&target, &before);
}

#[tokio::test]
async fn a_delta_that_cannot_be_fetched_fails_naming_it_and_leaves_the_target_untouched() {
    let c = captured(1).await;
    let r = c.full_revision;
    let mut deltas = cut(&c.events, r + 1, &[r + (c.head - r) / 2, c.head]);
    let missing = deltas.pop().unwrap().name;
    let first = deltas.pop().unwrap();
    let failing = futures::stream::iter(vec![
        Ok(first),
        Err(restore::FetchError {
            object: missing.clone(),
            source: "connection reset by the object store".into(),
        }),
    ])
    .boxed();
    let (target, before) = occupied_target();
    let mut inputs = target.inputs(&c.full_path, &c.full_name, vec![], RestoreTarget::Latest);
    inputs.deltas = failing;
    let err = restore::restore(inputs).await.unwrap_err();
    assert!(
        matches!(&err, RestoreError::Fetch(e) if e.object == missing),
        "{err:?}"
    );
    assert!(err.to_string().contains(&missing), "{err}");
    assert_untouched(&target, &before);
}

/// Issue 12, defect 6: a full snapshot is named with the revision read just before it was taken
/// and may hold more. A point-in-time target between its name and its content used to fail with
/// `FullPastTarget` on every attempt (planning picked the same object again); now the restore is
/// planned again without it and reaches the target from the older full snapshot and the deltas.
#[tokio::test]
async fn a_target_inside_a_full_snapshot_that_holds_more_than_its_name_is_restored() {
    use quorate_backup::store::{SnapStore, StoreOptions};
    use quorate_backup::store_restore::{StoreRestoreOptions, restore_from_store};

    let c = captured(1).await;
    let files = tempfile::tempdir().unwrap();
    let store = SnapStore::open(
        &quorate_api::StoreSpec {
            container: Some("bucket".into()),
            endpoint_override: None,
            prefix: "main".into(),
            provider: Some("Local".into()),
            secret_ref: None,
        },
        &StoreOptions {
            local_root: files.path().to_path_buf(),
            secret_dir: None,
            encryption_keys: None,
        },
    )
    .unwrap();
    let upload_file = |name: SnapshotName, path: std::path::PathBuf| {
        let store = store.clone();
        async move {
            let bytes = std::fs::read(path).unwrap();
            let body = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(bytes))]);
            store.upload(&name, body).await.unwrap();
        }
    };
    // The older full snapshot, named correctly, and every change after it as one delta.
    upload_file(
        SnapshotName::full(c.full_revision, now_unix() - 60, None),
        c.full_path.clone(),
    )
    .await;
    let first = c.full_revision + 1;
    let deltas = events_in(&c.events, first, c.head);
    let encoded = quorate_backup::delta::encode(&deltas);
    store
        .upload(
            &SnapshotName::incr(first, c.head, now_unix() - 30, None),
            futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(encoded))]),
        )
        .await
        .unwrap();
    // A newer full snapshot holding everything up to the head, named 10 revisions earlier.
    let newer = tempfile::tempdir().unwrap();
    let (newer_path, _, newer_revision) = c.source.snapshot_file(newer.path()).await;
    assert_eq!(newer_revision, c.head);
    let named = newer_revision - 10;
    assert!(named > c.full_revision);
    upload_file(SnapshotName::full(named, now_unix(), None), newer_path).await;

    let target_revision = named + 5;
    let target = Target::new();
    let report = restore_from_store(
        &store,
        RestoreTarget::ToRevision(target_revision),
        target.identity(),
        &target.data_dir(),
        tools(),
        StoreRestoreOptions {
            keep_revision: true,
            ..StoreRestoreOptions::default()
        },
    )
    .await
    .expect("restored from the older full snapshot and the deltas");
    assert_eq!(report.full_revision, c.full_revision);
    assert_eq!(report.restored_revision, target_revision);
    let (_restored, client) = target.start().await;
    assert_same(
        &state_of(&client, None).await,
        &c.source.state(Some(target_revision)).await,
    );
}

/// Issue 12, defect 10: the source's last write was a delete and it was compacted at its head,
/// so the snapshot holds no key at the head revision (the tombstone is gone) and `snapshot
/// status` reports an older revision than etcd itself does once restored. The restore takes
/// etcd's own head as the snapshot's revision instead of failing with `StartRevision`, and the
/// deltas after it still apply.
#[tokio::test]
async fn a_snapshot_compacted_at_a_delete_at_its_head_restores() {
    let source = Source::start().await;
    let files = tempfile::tempdir().unwrap();
    let mut c = source.client.clone();
    c.put("kept", "v", None).await.unwrap();
    c.put("gone", "v", None).await.unwrap();
    let deleted = c
        .delete("gone", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    c.compact(deleted, None).await.unwrap();
    let (full_path, full_name, reported) = source.snapshot_file(files.path()).await;
    assert!(
        reported < deleted,
        "snapshot status reports {reported}, the head is {deleted}: the scenario needs the gap"
    );
    let capture = source.capture_from(deleted + 1).await;
    let after = c
        .put("after", "v", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let events = capture.until(after).await;

    let target = Target::new();
    let report = restore::restore(target.inputs(
        &full_path,
        &full_name,
        vec![delta_object(events, deleted + 1, after)],
        RestoreTarget::Latest,
    ))
    .await
    .expect("restored although the snapshot's keys end before its revision");
    assert_eq!(report.full_revision, deleted);
    assert_eq!(report.restored_revision, after);
    let (_restored, client) = target.start().await;
    assert_same(&state_of(&client, None).await, &source.state(None).await);
}
