//! Shared helpers for the capture tests: clients for testkit members, a fixed clock, batch
//! collection and the no-gap/no-overlap check every delta test applies.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use jiff::Timestamp;
use quorate_backup::delta::{DeltaEvent, decode};
use quorate_backup::snapshotter::{
    Clock, CutOutcome, CutReason, CutSchedule, DeltaBatch, DeltaConfig, DeltaHandle,
};
use quorate_etcd::{EtcdTimeouts, MemberClient};
use tokio::sync::mpsc;

/// Bound for anything a loaded 2-core machine should still finish well within.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn timeouts() -> EtcdTimeouts {
    EtcdTimeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(3),
        long_request: Duration::from_secs(60),
    }
}

pub async fn member_client(url: &str) -> MemberClient {
    MemberClient::connect(url, None, timeouts())
        .await
        .expect("member client")
}

/// A plain etcd-client for writes the adapter does not offer (txn, leases, compaction).
pub async fn raw_client(urls: &[String]) -> Client {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(5));
    Client::connect(urls, Some(options))
        .await
        .expect("etcd client")
}

/// The member's current revision.
pub async fn head(client: &MemberClient) -> i64 {
    client.status().await.expect("status").revision
}

/// Always the same instant, so event times are exact.
pub struct FixedClock(pub Timestamp);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        self.0
    }
}

/// 2026-11-22T05:00:00.5Z
pub fn fixed_clock() -> Arc<FixedClock> {
    Arc::new(FixedClock(
        Timestamp::new(1_795_323_600, 500_000_000).unwrap(),
    ))
}

/// A config that cuts only when the test sends a tick (or asks, or the limit is reached).
pub fn ticked_config(start_revision: i64) -> (DeltaConfig, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel(16);
    let mut config = DeltaConfig::new(start_revision);
    config.schedule = CutSchedule::Ticks(rx);
    config.give_up_after = Duration::from_secs(120);
    (config, tx)
}

/// The next batch, failing the test after [`PATIENCE`].
pub async fn next_batch(rx: &mut mpsc::Receiver<DeltaBatch>) -> Option<DeltaBatch> {
    tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("no delta batch (or channel close) within the patience bound")
}

/// Waits until the capture has taken in revision `revision`.
pub async fn wait_captured(handle: &DeltaHandle, revision: i64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while handle.captured_through() < revision {
        assert!(
            tokio::time::Instant::now() < deadline,
            "capture stuck at revision {} (waiting for {revision})",
            handle.captured_through()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until revision `through` is captured, asks for a cut and collects every batch
/// delivered up to it into `into`.
pub async fn cut_through(
    handle: &DeltaHandle,
    rx: &mut mpsc::Receiver<DeltaBatch>,
    through: i64,
    into: &mut Vec<DeltaBatch>,
) {
    wait_captured(handle, through).await;
    match handle.request_cut().await.expect("capture running") {
        CutOutcome::Cut(info) => loop {
            let batch = next_batch(rx).await.expect("the cut batch");
            let done = batch.info() == info;
            if done {
                assert_eq!(batch.reason, CutReason::Requested);
            }
            into.push(batch);
            if done {
                break;
            }
        },
        CutOutcome::NoEvents { next_revision } => {
            // Everything was cut before (memory limit or period) and is already queued.
            while let Ok(batch) = rx.try_recv() {
                into.push(batch);
            }
            assert_eq!(
                into.last().map(|b| b.last_revision + 1),
                Some(next_revision)
            );
        }
    }
    assert!(into.last().unwrap().last_revision >= through);
}

/// Every batch until the channel closes.
pub async fn drain(rx: &mut mpsc::Receiver<DeltaBatch>) -> Vec<DeltaBatch> {
    let mut out = Vec::new();
    while let Some(batch) = next_batch(rx).await {
        out.push(batch);
    }
    out
}

/// Checks what every delta upload relies on and returns the events by revision:
/// - the first batch starts at `start`, each next one at the previous `last_revision + 1`;
/// - every event lies inside its batch's range, in non-decreasing revision order, and the
///   last event is at `last_revision`;
/// - `encoded` decodes to `events`;
/// - no revision appears in two batches (a transaction is never split).
pub fn check_chain(batches: &[DeltaBatch], start: i64) -> BTreeMap<i64, Vec<DeltaEvent>> {
    let mut next = start;
    let mut by_revision: BTreeMap<i64, Vec<DeltaEvent>> = BTreeMap::new();
    for (i, batch) in batches.iter().enumerate() {
        assert_eq!(
            batch.start_revision, next,
            "batch {i} must start right after the previous one ({batches:#?})"
        );
        assert!(!batch.events.is_empty(), "batch {i} is empty");
        assert_eq!(
            decode("batch", &batch.encoded).expect("batch decodes"),
            batch.events,
            "batch {i}: encoded bytes differ from events"
        );
        let mut previous = batch.start_revision;
        for event in &batch.events {
            let rev = event.etcd_event.mod_revision();
            assert!(
                rev >= previous && rev <= batch.last_revision,
                "batch {i}: event at {rev} outside [{previous}, {}]",
                batch.last_revision
            );
            previous = rev;
        }
        assert_eq!(
            previous, batch.last_revision,
            "batch {i} ends at its last event"
        );
        let revisions: std::collections::BTreeSet<i64> = batch
            .events
            .iter()
            .map(|e| e.etcd_event.mod_revision())
            .collect();
        for rev in revisions {
            assert!(
                !by_revision.contains_key(&rev),
                "revision {rev} appears in two batches"
            );
        }
        for event in &batch.events {
            by_revision
                .entry(event.etcd_event.mod_revision())
                .or_default()
                .push(event.clone());
        }
        next = batch.last_revision + 1;
    }
    by_revision
}

/// `check_chain` plus: every revision from `start` to `through` has events (no gap), none
/// beyond it.
pub fn check_covers(
    batches: &[DeltaBatch],
    start: i64,
    through: i64,
) -> BTreeMap<i64, Vec<DeltaEvent>> {
    let by_revision = check_chain(batches, start);
    let revisions: Vec<i64> = by_revision.keys().copied().collect();
    let expected: Vec<i64> = (start..=through).collect();
    assert_eq!(
        revisions, expected,
        "deltas must hold exactly the revisions {start}..={through}"
    );
    by_revision
}

pub fn key_of(event: &DeltaEvent) -> String {
    String::from_utf8(event.etcd_event.kv.as_ref().unwrap().key.clone()).unwrap()
}

pub fn value_of(event: &DeltaEvent) -> String {
    String::from_utf8(event.etcd_event.kv.as_ref().unwrap().value.clone()).unwrap()
}
