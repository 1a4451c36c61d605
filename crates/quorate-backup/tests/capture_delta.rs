//! Delta capture against a real etcd member: contiguous batches after a full snapshot, cut by
//! period, memory limit and request; transactions whole; deletes and lease TTLs recorded.

mod capture_common;

use std::time::Duration;

use capture_common::{
    PATIENCE, check_covers, cut_through, drain, fixed_clock, head, key_of, member_client,
    next_batch, raw_client, ticked_config, value_of, wait_captured,
};
use etcd_client::{DeleteOptions, PutOptions, Txn, TxnOp};
use quorate_backup::delta::{EVENT_DELETE, EVENT_PUT};
use quorate_backup::snapshotter::{
    CaptureError, CutOutcome, CutReason, CutSchedule, DeltaBatch, DeltaConfig, DeltaWatcher,
    full_snapshot,
};
use quorate_testkit::EtcdTestCluster;

#[tokio::test]
async fn deltas_hold_exactly_the_revisions_after_the_full_snapshot() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    for i in 0..20 {
        etcd.put(format!("before/{i}"), "old", None).await.unwrap();
    }
    let full = full_snapshot(&member).await.unwrap();
    drop(full.stream);

    let (mut config, ticks) = ticked_config(full.revision + 1);
    config.clock = fixed_clock();
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    let mut batches = Vec::new();

    // Round 1: puts, then the period elapses.
    for i in 0..30 {
        etcd.put(format!("a/{i}"), format!("a{i}"), None)
            .await
            .unwrap();
    }
    let through = head(&member).await;
    wait_captured(&handle, through).await;
    ticks.send(()).await.unwrap();
    let batch = next_batch(&mut rx).await.unwrap();
    assert_eq!(batch.reason, CutReason::Period);
    assert_eq!(batch.last_revision, through);
    batches.push(batch);

    // Round 2: a transaction of several keys, a delete, then a requested cut.
    let txn = Txn::new().and_then(vec![
        TxnOp::put("t/1", "one", None),
        TxnOp::put("t/2", "two", None),
        TxnOp::delete("a/0", None),
        TxnOp::put("t/3", "three", None),
    ]);
    etcd.txn(txn).await.unwrap();
    let txn_revision = head(&member).await;
    etcd.delete("a/", Some(DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    cut_through(&handle, &mut rx, head(&member).await, &mut batches).await;

    // Round 3: more puts, delivered by the stop.
    for i in 0..10 {
        etcd.put(format!("c/{i}"), "c", None).await.unwrap();
    }
    let last = head(&member).await;
    wait_captured(&handle, last).await;
    handle.stop().await;
    batches.extend(drain(&mut rx).await);
    let end = task.await.unwrap().unwrap();
    assert_eq!(end.next_revision, last + 1);
    assert_eq!(batches.last().unwrap().reason, CutReason::Stop);

    let by_revision = check_covers(&batches, full.revision + 1, last);
    let reasons: Vec<CutReason> = batches.iter().map(|b| b.reason).collect();
    assert_eq!(
        reasons,
        vec![CutReason::Period, CutReason::Requested, CutReason::Stop]
    );

    // The transaction is one revision with all four events, in one batch.
    let txn_events = &by_revision[&txn_revision];
    let kinds: Vec<(i32, String)> = txn_events
        .iter()
        .map(|e| (e.etcd_event.kind, key_of(e)))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EVENT_PUT, "t/1".into()),
            (EVENT_PUT, "t/2".into()),
            (EVENT_DELETE, "a/0".into()),
            (EVENT_PUT, "t/3".into())
        ]
    );
    // The range delete removed the 29 remaining a/ keys in one revision.
    let range_delete = &by_revision[&(txn_revision + 1)];
    assert_eq!(range_delete.len(), 29);
    assert!(range_delete.iter().all(|e| e.etcd_event.is_delete()));
    // Nothing from before the snapshot; event times from the injected clock.
    let all: Vec<_> = by_revision.values().flatten().collect();
    assert!(all.iter().all(|e| !key_of(e).starts_with("before/")));
    assert!(all.iter().all(|e| e.time == "2026-11-22T05:00:00.5Z"));
    assert_eq!(
        all.iter()
            .filter(|e| !e.etcd_event.is_delete() && key_of(e).starts_with("a/"))
            .count(),
        30
    );
}

#[tokio::test]
async fn memory_limit_cuts_small_batches_and_keeps_a_large_transaction_whole() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    let start = head(&member).await + 1;
    let limit = 2048;

    // Written before the capture starts, so the watch replays them in large responses.
    for i in 0..60 {
        etcd.put(format!("m/{i:02}"), "x".repeat(100), None)
            .await
            .unwrap();
    }
    let big: Vec<TxnOp> = (0..12)
        .map(|i| TxnOp::put(format!("big/{i:02}"), "y".repeat(300), None))
        .collect();
    etcd.txn(Txn::new().and_then(big)).await.unwrap();
    let txn_revision = head(&member).await;
    for i in 0..20 {
        etcd.put(format!("n/{i:02}"), "z".repeat(100), None)
            .await
            .unwrap();
    }
    let last = head(&member).await;

    let (mut config, _ticks) = ticked_config(start);
    config.memory_limit = limit;
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    let mut batches = Vec::new();
    while batches
        .last()
        .is_none_or(|b: &DeltaBatch| b.last_revision < txn_revision)
    {
        batches.push(next_batch(&mut rx).await.unwrap());
    }
    wait_captured(&handle, last).await;
    handle.stop().await;
    batches.extend(drain(&mut rx).await);
    task.await.unwrap().unwrap();

    let by_revision = check_covers(&batches, start, last);
    assert!(batches.len() > 5, "{} batches", batches.len());
    for batch in &batches {
        let revisions: std::collections::BTreeSet<i64> = batch
            .events
            .iter()
            .map(|e| e.etcd_event.mod_revision())
            .collect();
        if revisions.contains(&txn_revision) {
            assert_eq!(batch.events.len(), 12, "the transaction alone, whole");
            assert!(batch.encoded.len() > limit);
        } else {
            assert!(
                batch.encoded.len() <= limit,
                "{} bytes",
                batch.encoded.len()
            );
        }
        if batch.reason != CutReason::Stop {
            assert_eq!(batch.reason, CutReason::MemoryLimit);
        }
    }
    assert_eq!(by_revision[&txn_revision].len(), 12);
}

#[tokio::test]
async fn requested_cut_replies_no_events_or_the_batch_and_period_without_events_cuts_nothing() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    let start = head(&member).await + 1;

    // A real timer: a short period, so both the cut and the quiet afterwards are observable.
    let mut config = DeltaConfig::new(start);
    config.schedule = CutSchedule::Every(Duration::from_millis(300));
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();

    assert_eq!(
        handle.request_cut().await.unwrap(),
        CutOutcome::NoEvents {
            next_revision: start
        }
    );
    // Periods pass with nothing captured: no batch.
    assert!(
        tokio::time::timeout(Duration::from_millis(1000), rx.recv())
            .await
            .is_err(),
        "no events, no batch"
    );

    etcd.put("p/1", "1", None).await.unwrap();
    etcd.put("p/2", "2", None).await.unwrap();
    let batch = next_batch(&mut rx).await.unwrap();
    assert_eq!(batch.reason, CutReason::Period);
    assert_eq!(batch.start_revision, start);
    let mut batches = vec![batch];
    if batches[0].last_revision < start + 1 {
        batches.push(next_batch(&mut rx).await.unwrap());
    }
    check_covers(&batches, start, start + 1);

    // Requested: the reply describes the batch that is queued.
    etcd.put("p/3", "3", None).await.unwrap();
    cut_through(&handle, &mut rx, start + 2, &mut batches).await;
    check_covers(&batches, start, start + 2);
    assert_eq!(
        handle.request_cut().await.unwrap(),
        CutOutcome::NoEvents {
            next_revision: start + 3
        }
    );

    handle.stop().await;
    assert!(drain(&mut rx).await.is_empty());
    assert_eq!(task.await.unwrap().unwrap().next_revision, start + 3);
    assert!(!handle.is_running());
    assert!(matches!(
        handle.request_cut().await,
        Err(CaptureError::NotRunning)
    ));
}

#[tokio::test]
async fn puts_record_the_granted_ttl_of_their_lease() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    let start = head(&member).await + 1;

    let live = etcd.lease_grant(120, None).await.unwrap().id();
    let gone = etcd.lease_grant(90, None).await.unwrap().id();
    etcd.put("l/live", "1", Some(PutOptions::new().with_lease(live)))
        .await
        .unwrap();
    etcd.put("l/gone", "2", Some(PutOptions::new().with_lease(gone)))
        .await
        .unwrap();
    etcd.put("l/plain", "3", None).await.unwrap();
    etcd.put("l/live2", "4", Some(PutOptions::new().with_lease(live)))
        .await
        .unwrap();
    // Revoking deletes l/gone; the capture starts later, when the lease no longer exists.
    etcd.lease_revoke(gone).await.unwrap();
    let last = head(&member).await;

    let (config, _ticks) = ticked_config(start);
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    let mut batches = Vec::new();
    cut_through(&handle, &mut rx, last, &mut batches).await;
    handle.stop().await;
    batches.extend(drain(&mut rx).await);
    task.await.unwrap().unwrap();

    let by_revision = check_covers(&batches, start, last);
    let events: Vec<_> = by_revision.values().flatten().collect();
    let summary: Vec<(String, i32, i64, Option<i64>)> = events
        .iter()
        .map(|e| {
            let kv = e.etcd_event.kv.as_ref().unwrap();
            (key_of(e), e.etcd_event.kind, kv.lease, e.lease_ttl)
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("l/live".into(), EVENT_PUT, live, Some(120)),
            ("l/gone".into(), EVENT_PUT, gone, None),
            ("l/plain".into(), EVENT_PUT, 0, None),
            ("l/live2".into(), EVENT_PUT, live, Some(120)),
            ("l/gone".into(), EVENT_DELETE, 0, None),
        ]
    );
    assert_eq!(value_of(events[0]), "1");
}

#[tokio::test]
async fn invalid_start_and_a_dropped_receiver_are_reported() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let err = DeltaWatcher::new(member.clone(), DeltaConfig::new(0)).unwrap_err();
    assert!(matches!(err, CaptureError::InvalidStart { revision: 0 }));

    let mut etcd = raw_client(&cluster.client_urls()).await;
    let start = head(&member).await + 1;
    let (mut config, _ticks) = ticked_config(start);
    config.memory_limit = 1;
    let (_handle, rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    drop(rx);
    etcd.put("x", "1", None).await.unwrap();
    let err = tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, CaptureError::ConsumerGone { next_revision } if next_revision == start),
        "{err:?}"
    );
}
