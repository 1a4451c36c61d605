//! Delta capture across failures, against real etcd: the watched member restarts, history is
//! compacted past the resume point, the leader changes and capture moves to the new leader.

mod capture_common;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use capture_common::{
    PATIENCE, check_covers, cut_through, drain, head, key_of, member_client, raw_client,
    ticked_config, wait_captured,
};
use quorate_backup::snapshotter::{CaptureError, DeltaBatch, DeltaWatcher};
use quorate_etcd::MemberClient;
use quorate_testkit::{CLUSTER_READY_TIMEOUT, EtcdTestCluster};

/// Every key that has a PUT in `batches`.
fn put_keys(batches: &[DeltaBatch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| &b.events)
        .filter(|e| !e.etcd_event.is_delete())
        .map(key_of)
        .collect()
}

#[tokio::test]
async fn watch_resumes_without_gap_after_the_member_restarts() {
    let mut cluster = EtcdTestCluster::start(3).await;
    let mut clients = Vec::new();
    for member in cluster.members() {
        clients.push(member_client(&member.client_url()).await);
    }
    // Watch a follower, so its death does not also cost an election (writes stay quick).
    let leader = leader_of(&clients).await;
    let watched = (leader + 1) % 3;
    let member = clients[watched].clone();
    let other = clients[leader].clone();
    let others: Vec<String> = (0..3)
        .filter(|&i| i != watched)
        .map(|i| cluster.member(i).client_url())
        .collect();
    let mut etcd = raw_client(&others).await;
    let start = head(&member).await + 1;

    let (config, _ticks) = ticked_config(start);
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    let mut written = Vec::new();
    let mut put = async |etcd: &mut etcd_client::Client, key: String| {
        etcd.put(key.clone(), "v", None).await.unwrap();
        written.push(key);
    };
    for i in 0..20 {
        put(&mut etcd, format!("r1/{i}")).await;
    }
    wait_captured(&handle, head(&other).await).await;
    // In flight when the member dies: captured before, or replayed after the restart.
    for i in 0..10 {
        put(&mut etcd, format!("r2/{i}")).await;
    }
    cluster.member_mut(watched).kill();
    // Written while the member is down: only a resumed watch can see them.
    for i in 0..20 {
        put(&mut etcd, format!("r3/{i}")).await;
    }
    cluster.member_mut(watched).restart().unwrap();
    cluster
        .member_mut(watched)
        .wait_ready(CLUSTER_READY_TIMEOUT)
        .await
        .unwrap();
    for i in 0..10 {
        put(&mut etcd, format!("r4/{i}")).await;
    }
    // The revision after every acknowledged write, from a linearizable read: the restart may
    // have moved leadership, and a follower's own status can lag the last write by a revision.
    let last = etcd
        .get("r4/", None)
        .await
        .unwrap()
        .header()
        .expect("a response header")
        .revision();

    let mut batches = Vec::new();
    cut_through(&handle, &mut rx, last, &mut batches).await;
    handle.stop().await;
    batches.extend(drain(&mut rx).await);
    assert_eq!(task.await.unwrap().unwrap().next_revision, last + 1);

    check_covers(&batches, start, last);
    assert_eq!(put_keys(&batches), written, "every write once, in order");
}

#[tokio::test]
async fn compaction_past_the_resume_point_is_reported() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    let start = head(&member).await + 1;

    let (config, _ticks) = ticked_config(start);
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    for i in 0..10 {
        etcd.put(format!("k/{i}"), "1", None).await.unwrap();
    }
    // Compaction behind a watch that keeps up does not disturb it.
    let compacted = head(&member).await;
    wait_captured(&handle, compacted).await;
    etcd.compact(compacted, None).await.unwrap();
    for i in 0..5 {
        etcd.put(format!("k/{i}"), "2", None).await.unwrap();
    }
    let last = head(&member).await;
    wait_captured(&handle, last).await;
    handle.stop().await;
    let batches = drain(&mut rx).await;
    let end = task.await.unwrap().unwrap();
    check_covers(&batches, start, last);
    assert_eq!(end.next_revision, last + 1);

    // While no capture ran, history moved on and was compacted past where it must resume.
    for i in 0..10 {
        etcd.put(format!("k/{i}"), "3", None).await.unwrap();
    }
    let compacted = head(&member).await;
    etcd.compact(compacted, None).await.unwrap();

    let (config, _ticks) = ticked_config(end.next_revision);
    let (_handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    let err = tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    match &err {
        CaptureError::Compacted {
            revision,
            compact_revision,
            ..
        } => {
            assert_eq!(*revision, end.next_revision);
            assert_eq!(*compact_revision, compacted);
        }
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(err.to_string().contains("take a full snapshot"), "{err}");
    assert!(drain(&mut rx).await.is_empty(), "nothing was captured");
}

async fn leader_of(clients: &[MemberClient]) -> usize {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        for (i, client) in clients.iter().enumerate() {
            if let Ok(status) = client.status().await
                && status.is_leader()
            {
                return i;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn capture_moves_to_the_new_leader_at_last_plus_one_without_overlap() {
    let mut cluster = EtcdTestCluster::start(3).await;
    let mut clients = Vec::new();
    for member in cluster.members() {
        clients.push(member_client(&member.client_url()).await);
    }
    let old = leader_of(&clients).await;
    let start = head(&clients[old]).await + 1;

    // The old leader's agent captures.
    let (config, _ticks_a) = ticked_config(start);
    let (handle_a, mut rx_a, task_a) = DeltaWatcher::spawn(clients[old].clone(), config).unwrap();

    // A client keeps writing through any member, retrying through the leader change.
    let confirmed = Rc::new(RefCell::new(Vec::new()));
    let stop_writing = Rc::new(RefCell::new(false));
    let writer = {
        let (confirmed, stop_writing) = (confirmed.clone(), stop_writing.clone());
        let mut etcd = raw_client(&cluster.client_urls()).await;
        async move {
            let mut i = 0;
            while !*stop_writing.borrow() {
                let key = format!("w/{i:05}");
                if etcd.put(key.clone(), "v", None).await.is_ok() {
                    confirmed.borrow_mut().push(key);
                    i += 1;
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    };
    let test = async {
        wait_captured(&handle_a, start + 30).await;

        // The leader dies mid-capture. Its agent gives up the backup role: stop, which
        // delivers everything it captured, and tells where the successor must continue.
        cluster.member_mut(old).kill();
        handle_a.stop().await;
        let batches_a = drain(&mut rx_a).await;
        let end_a = task_a.await.unwrap().unwrap();

        // The new leader's agent continues at last + 1.
        let survivors: Vec<MemberClient> = (0..3)
            .filter(|&i| i != old)
            .map(|i| clients[i].clone())
            .collect();
        let new = &survivors[leader_of(&survivors).await];
        let (config, _ticks_b) = ticked_config(end_a.next_revision);
        let (handle_b, mut rx_b, task_b) = DeltaWatcher::spawn(new.clone(), config).unwrap();
        wait_captured(&handle_b, end_a.next_revision + 30).await;
        *stop_writing.borrow_mut() = true;
        // Let the writer's last put settle before reading the head.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let last = head(new).await;
        let mut batches_b = Vec::new();
        cut_through(&handle_b, &mut rx_b, last, &mut batches_b).await;
        handle_b.stop().await;
        batches_b.extend(drain(&mut rx_b).await);
        task_b.await.unwrap().unwrap();
        (batches_a, batches_b, last)
    };
    let ((), (batches_a, batches_b, last)) = tokio::join!(writer, test);

    assert!(!batches_a.is_empty() && !batches_b.is_empty());
    let all: Vec<DeltaBatch> = batches_a.into_iter().chain(batches_b).collect();
    check_covers(&all, start, last);
    let captured: BTreeSet<String> = put_keys(&all).into_iter().collect();
    for key in confirmed.borrow().iter() {
        assert!(
            captured.contains(key),
            "confirmed write {key} is in no delta"
        );
    }
    assert!(confirmed.borrow().len() > 60);
}

#[tokio::test]
async fn a_hung_member_is_detected_and_capture_gives_up_naming_where_to_resume() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    let start = head(&member).await + 1;

    let (mut config, _ticks) = ticked_config(start);
    config.stall_timeout = Duration::from_millis(300);
    config.give_up_after = Duration::from_secs(2);
    let (handle, mut rx, task) = DeltaWatcher::spawn(member.clone(), config).unwrap();
    for i in 0..5 {
        etcd.put(format!("h/{i}"), "v", None).await.unwrap();
    }
    let last = head(&member).await;
    wait_captured(&handle, last).await;

    // SIGSTOP: the connection stays open but nothing answers, not even progress requests.
    cluster
        .member(0)
        .child()
        .freeze(Duration::from_secs(5))
        .unwrap();
    let err = tokio::time::timeout(PATIENCE, task)
        .await
        .expect("a hung watch must not hang the capture")
        .unwrap()
        .unwrap_err();
    match &err {
        CaptureError::Unavailable { next_revision, .. } => assert_eq!(*next_revision, last + 1),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains(&format!("resume capture from revision {}", last + 1)),
        "{err}"
    );
    // What was captured before is delivered, marked as cut by the failure.
    let batches = drain(&mut rx).await;
    check_covers(&batches, start, last);
    assert_eq!(
        batches.last().unwrap().reason,
        quorate_backup::snapshotter::CutReason::Failure
    );
}
