//! Maintenance calls against real etcd: alarms, defragment, snapshot, leader transfer.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{cluster_client, member_client};
use futures::TryStreamExt;
use quorate_etcd::{Alarm, AlarmKind, ErrorKind};
use quorate_testkit::{EtcdTestCluster, etcdctl_binary};

#[tokio::test]
async fn full_quota_raises_nospace_which_can_be_disarmed_after_defragment() {
    let cluster = EtcdTestCluster::start_with(1, |c| {
        c.extra_args.push("--quota-backend-bytes=1048576".into());
    })
    .await;
    let client = member_client(cluster.member(0)).await;
    assert!(client.alarms().await.unwrap().is_empty());
    let me = client.status().await.unwrap().member_id;

    let value = vec![b'x'; 64 * 1024];
    let mut nospace = None;
    for i in 0..200 {
        match client.put(format!("fill{i}"), value.clone()).await {
            Ok(_) => {}
            Err(e) => {
                nospace = Some(e);
                break;
            }
        }
    }
    let err = nospace.expect("a 1 MiB quota must fill up within 200 writes of 64 KiB");
    assert_eq!(err.kind(), ErrorKind::NoSpace, "{err}");
    assert!(!err.is_retryable());

    let alarms = client.alarms().await.unwrap();
    assert_eq!(
        alarms,
        vec![Alarm {
            member_id: me,
            kind: AlarmKind::NoSpace
        }]
    );
    let status = client.status().await.unwrap();
    assert!(
        status.errors.iter().any(|e| e.contains("NOSPACE")),
        "{:?}",
        status.errors
    );

    client.defragment().await.unwrap();
    client.disarm(alarms[0]).await.unwrap();
    assert!(client.alarms().await.unwrap().is_empty());
}

#[tokio::test]
async fn defragment_shrinks_the_database_file() {
    let cluster = EtcdTestCluster::start(1).await;
    let client = member_client(cluster.member(0)).await;
    let value = vec![b'y'; 32 * 1024];
    for i in 0..100 {
        client.put(format!("k{i}"), value.clone()).await.unwrap();
    }
    // Overwrite everything with tiny values and compact history via etcdctl (compaction is
    // not part of this adapter), leaving free pages that defragment returns.
    for i in 0..100 {
        client.put(format!("k{i}"), "z").await.unwrap();
    }
    let rev = client.status().await.unwrap().revision;
    let out = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.member(0).client_url()))
        .args(["compaction", "--physical", &rev.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = client.status().await.unwrap();
    client.defragment().await.unwrap();
    let after = client.status().await.unwrap();
    assert!(
        after.db_size < before.db_size,
        "db size {} -> {}",
        before.db_size,
        after.db_size
    );
}

#[tokio::test]
async fn snapshot_stream_restores_with_etcdctl() {
    let cluster = EtcdTestCluster::start(1).await;
    let client = member_client(cluster.member(0)).await;
    for i in 0..50 {
        client
            .put(format!("snap{i:02}"), format!("value{i}"))
            .await
            .unwrap();
    }
    let db_size = client.status().await.unwrap().db_size as u64;

    let mut stream = client.snapshot().await.unwrap();
    let mut data = Vec::new();
    while let Some(chunk) = stream.next_chunk().await.unwrap() {
        data.extend_from_slice(&chunk);
    }
    assert_eq!(stream.received(), data.len() as u64);
    // The database plus etcd's trailing SHA-256.
    assert!(data.len() as u64 >= db_size, "{} < {db_size}", data.len());

    // The same through the futures::Stream adapter.
    let chunks: Vec<_> = client
        .snapshot()
        .await
        .unwrap()
        .into_stream()
        .try_collect()
        .await
        .unwrap();
    assert!(chunks.iter().map(|c| c.len()).sum::<usize>() >= db_size as usize);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snap.db");
    std::fs::write(&file, &data).unwrap();
    let restored = dir.path().join("restored");
    let out = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "restore"])
        .arg(&file)
        .arg(format!("--data-dir={}", restored.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "restore failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(restored.join("member").join("snap").join("db").is_file());
}

#[tokio::test]
async fn leadership_moves_to_the_chosen_member() {
    let cluster = EtcdTestCluster::start(3).await;
    let client = cluster_client(&cluster).await;
    let (_, leader) = client.leader().await.unwrap();
    let statuses: Vec<_> = client
        .statuses()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let followers: Vec<_> = statuses.iter().filter(|s| !s.is_leader()).collect();
    assert_eq!(followers.len(), 2);
    let target = followers[0].member_id;

    // A follower cannot hand over leadership.
    let follower_client = client
        .member_clients()
        .iter()
        .find(|c| c.endpoint() == followers[1].endpoint)
        .unwrap();
    let err = follower_client.move_leader(target).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");

    client.move_leader(target).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, now) = client.leader().await.unwrap();
        if now.member_id == target {
            assert!(now.raft_term > leader.raft_term);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leader is still {:x}",
            now.member_id
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Moving to the current leader is a no-op.
    client.move_leader(target).await.unwrap();
}
