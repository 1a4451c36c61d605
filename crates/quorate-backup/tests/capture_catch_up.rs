//! Delta capture catches up with etcd periodically instead of following a watch that stays
//! open: against a real etcd member, a backlog of thousands of revisions (which etcd sends in
//! several responses) is captured exactly as a watch that stays open sees it, with no gap or
//! overlap at the edges of catch-ups and batches and no revision split; and a requested cut,
//! a period cut and the stop each hold everything up to the moment they were asked for.

mod capture_common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use capture_common::{
    PATIENCE, check_covers, cut_through, drain, head, member_client, next_batch, raw_client,
};
use etcd_client::{EventType, PutOptions, Txn, TxnOp, WatchOptions};
use futures::StreamExt;
use jiff::Timestamp;
use quorate_backup::delta::{EVENT_DELETE, EVENT_PUT};
use quorate_backup::snapshotter::{
    CutOutcome, CutReason, CutSchedule, DeltaBatch, DeltaConfig, DeltaWatcher,
};
use quorate_testkit::EtcdTestCluster;
use tokio::sync::mpsc;

/// An event as both sides see it: revision, kind, key, value, create revision, version,
/// lease.
type Seen = (i64, i32, Vec<u8>, Vec<u8>, i64, i64, i64);

fn seen_in(batches: &[DeltaBatch]) -> Vec<Seen> {
    batches
        .iter()
        .flat_map(|b| b.events.iter())
        .map(|e| {
            let kv = e.etcd_event.kv.as_ref().unwrap();
            (
                kv.mod_revision,
                e.etcd_event.kind,
                kv.key.clone(),
                kv.value.clone(),
                kv.create_revision,
                kv.version,
                kv.lease,
            )
        })
        .collect()
}

/// What a watch over every key that stays open from `start` sees, through `last`.
async fn open_watch_events(urls: &[String], start: i64, last: i64) -> Vec<Seen> {
    let mut etcd = raw_client(urls).await;
    let options = WatchOptions::new()
        .with_all_keys()
        .with_start_revision(start);
    let mut stream = etcd.watch("", Some(options)).await.unwrap();
    let mut seen = Vec::new();
    while seen.last().is_none_or(|s: &Seen| s.0 < last) {
        let response = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .expect("the reference watch stalled")
            .unwrap()
            .expect("the reference watch ended");
        for event in response.events() {
            let kv = event.kv().unwrap();
            let kind = match event.event_type() {
                EventType::Put => EVENT_PUT,
                EventType::Delete => EVENT_DELETE,
            };
            seen.push((
                kv.mod_revision(),
                kind,
                kv.key().to_vec(),
                kv.value().to_vec(),
                kv.create_revision(),
                kv.version(),
                kv.lease(),
            ));
        }
    }
    seen
}

/// A config whose catch-ups happen only at cuts (period ticks from the test, requests, the
/// stop), so each one has the backlog the test built up.
fn cuts_only_config(start: i64) -> (DeltaConfig, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel(16);
    let mut config = DeltaConfig::new(start);
    config.schedule = CutSchedule::Ticks(rx);
    config.catch_up_every = Duration::from_secs(3600);
    (config, tx)
}

#[tokio::test]
async fn catch_ups_over_large_backlogs_capture_exactly_what_an_open_watch_sees() {
    let cluster = EtcdTestCluster::start(1).await;
    let urls = cluster.client_urls();
    let member = member_client(&urls[0]).await;
    let mut etcd = raw_client(&urls).await;
    let start = head(&member).await + 1;
    let lease = etcd.lease_grant(3600, None).await.unwrap().id();

    // 2500 revisions before the capture starts: its first catch-up takes etcd several
    // responses (etcd 3.4 sends at most 1000 revisions in one). Many puts at a time, so
    // etcd's fsyncs serve many of them.
    let puts = (0..2500).map(|i| {
        let mut etcd = etcd.clone();
        async move {
            etcd.put(format!("pre/{:03}", i % 300), format!("v{i}"), None)
                .await
                .unwrap();
        }
    });
    futures::stream::iter(puts)
        .for_each_concurrent(32, |put| put)
        .await;

    let (mut config, ticks) = cuts_only_config(start);
    // Small batches, so memory-limit cuts fall inside catch-ups too.
    config.memory_limit = 64 * 1024;
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    let written_before = Timestamp::now();

    // Writers keep going while the test cuts: catch-ups end in the middle of their writes,
    // and responses bring revisions beyond the catch-up's target.
    let writing = Rc::new(Cell::new(true));
    let writes = Rc::new(RefCell::new(0u64));
    let mut writers = Vec::new();
    for w in 0..8 {
        let (writing, writes) = (writing.clone(), writes.clone());
        let mut etcd = raw_client(&urls).await;
        writers.push(async move {
            let mut i = 0u64;
            while writing.get() {
                let key = format!("w{w}/{:03}", i % 200);
                match i % 10 {
                    // A transaction: several events in one revision, a delete among them.
                    0 => {
                        let ops = vec![
                            TxnOp::put(format!("t{w}/a"), format!("{i}"), None),
                            TxnOp::put(format!("t{w}/b"), format!("{i}"), None),
                            TxnOp::delete(format!("w{w}/{:03}", (i + 1) % 200), None),
                            TxnOp::put(format!("t{w}/c"), format!("{i}"), None),
                        ];
                        etcd.txn(Txn::new().and_then(ops)).await.unwrap();
                    }
                    5 => {
                        let options = PutOptions::new().with_lease(lease);
                        etcd.put(key, format!("leased {i}"), Some(options))
                            .await
                            .unwrap();
                    }
                    _ => {
                        etcd.put(key, "x".repeat(50 + (i % 7) as usize * 40), None)
                            .await
                            .unwrap();
                    }
                }
                *writes.borrow_mut() += 1;
                i += 1;
            }
        });
    }
    let test = async {
        let mut batches = Vec::new();
        // Period cuts and requested cuts, each after another ~1200 writes.
        for round in 0..4 {
            let target = *writes.borrow() + 1200;
            while *writes.borrow() < target {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if round % 2 == 0 {
                ticks.send(()).await.unwrap();
                // The period cut comes after any memory-limit cuts of its catch-up.
                loop {
                    let batch = next_batch(&mut rx).await.unwrap();
                    let reason = batch.reason;
                    batches.push(batch);
                    if reason == CutReason::Period {
                        break;
                    }
                    assert_eq!(reason, CutReason::MemoryLimit);
                }
            } else {
                let now = head(&member).await;
                cut_through_now(&handle, &mut rx, now, &mut batches).await;
            }
        }
        writing.set(false);
        batches
    };
    let (mut batches, _) = tokio::join!(test, futures::future::join_all(writers));
    let last = head(&member).await;
    handle.stop().await;
    batches.extend(drain(&mut rx).await);
    assert_eq!(task.await.unwrap().unwrap().next_revision, last + 1);

    // No gap, no overlap, no revision in two batches, and exactly the revisions written.
    check_covers(&batches, start, last);
    assert!(
        batches.iter().any(|b| b.reason == CutReason::MemoryLimit),
        "memory-limit cuts inside catch-ups"
    );
    // The same events, in the same order, as a watch that stayed open all along.
    let reference = open_watch_events(&urls, start, last).await;
    let captured = seen_in(&batches);
    assert_eq!(captured.len(), reference.len());
    assert!(
        captured == reference,
        "captured events differ from the watch's"
    );
    assert!(captured.iter().any(|s| s.6 == lease));
    assert!(captured.iter().any(|s| s.1 == EVENT_DELETE));

    // Time stamps never go back, and none is before the capture's first write or after now.
    let times: Vec<Timestamp> = batches
        .iter()
        .flat_map(|b| b.events.iter())
        .filter(|e| e.etcd_event.mod_revision() > start + 2500)
        .map(|e| e.time.parse().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "stamps in order");
    assert!(times.first().unwrap() >= &written_before);
    assert!(times.last().unwrap() <= &Timestamp::now());
}

/// Asks for a cut right away (no waiting for the capture), which must still hold `now`,
/// taking the batches its catch-up cuts meanwhile.
async fn cut_through_now(
    handle: &quorate_backup::snapshotter::DeltaHandle,
    rx: &mut mpsc::Receiver<DeltaBatch>,
    now: i64,
    into: &mut Vec<DeltaBatch>,
) {
    let cut = handle.request_cut();
    tokio::pin!(cut);
    let outcome = tokio::time::timeout(PATIENCE, async {
        loop {
            tokio::select! {
                outcome = &mut cut => break outcome.expect("capture running"),
                batch = rx.recv() => into.push(batch.expect("a batch")),
            }
        }
    })
    .await
    .expect("the requested cut took too long");
    let CutOutcome::Cut(info) = outcome else {
        panic!("nothing captured up to {now}: {outcome:?}");
    };
    assert!(
        info.last_revision >= now,
        "the cut holds everything up to now"
    );
    while into.last().is_none_or(|b| b.info() != info) {
        into.push(next_batch(rx).await.expect("the cut batch"));
    }
    assert_eq!(into.last().unwrap().reason, CutReason::Requested);
}

#[tokio::test]
async fn a_requested_cut_a_period_cut_and_the_stop_hold_everything_up_to_now() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    let start = head(&member).await + 1;

    // Without ticks and with an hour between catch-ups, only cuts catch up.
    let (config, ticks) = cuts_only_config(start);
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    // The first catch-up runs at once; nothing to capture yet.
    assert_eq!(
        handle.request_cut().await.unwrap(),
        CutOutcome::NoEvents {
            next_revision: start
        }
    );
    let mut batches = Vec::new();

    // Requested (the agent's on-demand delta): no wait for the capture in between.
    for i in 0..5 {
        etcd.put(format!("r/{i}"), "1", None).await.unwrap();
    }
    let now = head(&member).await;
    assert_eq!(
        handle.captured_through(),
        start - 1,
        "nothing caught up yet"
    );
    cut_through_now(&handle, &mut rx, now, &mut batches).await;
    assert_eq!(batches.last().unwrap().reason, CutReason::Requested);
    assert_eq!(batches.last().unwrap().last_revision, now);

    // The period.
    for i in 0..5 {
        etcd.put(format!("p/{i}"), "2", None).await.unwrap();
    }
    let now = head(&member).await;
    ticks.send(()).await.unwrap();
    let batch = next_batch(&mut rx).await.unwrap();
    assert_eq!(batch.reason, CutReason::Period);
    assert_eq!(batch.last_revision, now);
    batches.push(batch);

    // The stop (leader change, shutdown): the last delta reaches the head too.
    for i in 0..5 {
        etcd.put(format!("s/{i}"), "3", None).await.unwrap();
    }
    let now = head(&member).await;
    handle.stop().await;
    let last = drain(&mut rx).await;
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].reason, CutReason::Stop);
    batches.extend(last);
    assert_eq!(task.await.unwrap().unwrap().next_revision, now + 1);
    check_covers(&batches, start, now);

    // Between cuts, the periodic catch-up alone brings the capture along.
    let (mut config, _ticks) = cuts_only_config(now + 1);
    config.catch_up_every = Duration::from_millis(100);
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    for i in 0..5 {
        etcd.put(format!("c/{i}"), "4", None).await.unwrap();
    }
    let later = head(&member).await;
    let mut more = Vec::new();
    cut_through(&handle, &mut rx, later, &mut more).await;
    handle.stop().await;
    more.extend(drain(&mut rx).await);
    task.await.unwrap().unwrap();
    check_covers(&more, now + 1, later);
}
