//! Membership calls and their error classification against real etcd.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{MEMBERSHIP_WAIT, cluster_client, join_learner, member_client};
use quorate_etcd::{ClusterClient, ErrorKind, retry_while_retryable};
use quorate_testkit::EtcdTestCluster;

#[tokio::test]
async fn member_list_shows_every_member_with_its_urls() {
    let cluster = EtcdTestCluster::start(3).await;
    let client = cluster_client(&cluster).await;
    let members = client.member_list().await.unwrap();
    assert_eq!(members.len(), 3);
    let ids: HashSet<u64> = members.iter().map(|m| m.id).collect();
    assert_eq!(ids.len(), 3, "member IDs must be distinct");
    for process in cluster.members() {
        let m = members
            .iter()
            .find(|m| m.name == process.name())
            .unwrap_or_else(|| panic!("{} missing from {members:?}", process.name()));
        assert_eq!(m.peer_urls, vec![process.peer_url()]);
        assert_eq!(m.client_urls, vec![process.client_url()]);
        assert!(!m.is_learner && m.is_started());
    }
    // A single member answers with the same list.
    let from_m1 = member_client(cluster.member(1))
        .await
        .member_list()
        .await
        .unwrap();
    let ids_m1: HashSet<u64> = from_m1.iter().map(|m| m.id).collect();
    assert_eq!(ids, ids_m1);
}

#[tokio::test]
async fn learner_joins_is_limited_to_one_and_is_promoted_to_voter() {
    let mut cluster = EtcdTestCluster::start(3).await;
    let client = cluster_client(&cluster).await;
    let (learner_id, idx) = join_learner(&mut cluster, &client, "m3").await;

    // Listed as a started learner.
    let members = client.member_list().await.unwrap();
    let learner = members.iter().find(|m| m.id == learner_id).unwrap();
    assert!(learner.is_learner);
    assert_eq!(learner.name, "m3");

    // Its own status says learner and names the voters' leader.
    let learner_client = member_client(cluster.member(idx)).await;
    let status = learner_client.status().await.unwrap();
    assert!(status.is_learner);
    assert_eq!(status.member_id, learner_id);
    let (_, leader_status) = client.leader().await.unwrap();
    assert_eq!(status.leader_id, leader_status.member_id);
    // Healthy although it rejects the linearizable read a voter would be checked with.
    learner_client.check_health().await.unwrap();
    let read = learner_client.get("k").await.unwrap_err();
    assert_eq!(read.kind(), ErrorKind::LearnerRejected, "{read}");
    if status.version.starts_with("3.4.") {
        let list = learner_client.member_list().await.unwrap_err();
        assert_eq!(list.kind(), ErrorKind::LearnerRejected, "{list}");
    }

    // A cluster client whose first endpoint is the learner fails over to a voter.
    let via_learner = ClusterClient::new(
        &[
            cluster.member(idx).client_url(),
            cluster.member(0).client_url(),
        ],
        None,
        common::timeouts(),
    )
    .await
    .unwrap();
    via_learner.put(b"via-learner", b"1").await.unwrap();
    assert_eq!(via_learner.member_list().await.unwrap().len(), 4);

    // etcd allows one learner at a time.
    let second = cluster.new_member_config("m4").peer_url();
    let err = client.add_learner(&[second]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TooManyLearners, "{err}");
    assert!(err.is_retryable());

    // Promote: right after the start etcd may still find the learner behind; either way the
    // retry helper ends with a voter.
    let first_try = client.promote(learner_id).await;
    match &first_try {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::LearnerNotInSync, "{e}"),
    }
    let members = match first_try {
        Ok(members) => members,
        Err(_) => retry_while_retryable(|| client.promote(learner_id), MEMBERSHIP_WAIT)
            .await
            .unwrap(),
    };
    // The answer comes from the member that applied the change.
    assert_eq!(members.len(), 4);
    assert!(members.iter().all(|m| !m.is_learner), "{members:?}");
    // Member lists are served from each member's local view, which may lag briefly; every
    // member, the former learner included, soon agrees.
    let deadline = Instant::now() + Duration::from_secs(10);
    for member in client.member_clients() {
        loop {
            let list = member.member_list().await.unwrap();
            if list.iter().all(|m| !m.is_learner) {
                break;
            }
            assert!(Instant::now() < deadline, "{}: {list:?}", member.endpoint());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    loop {
        if !learner_client.status().await.unwrap().is_learner {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "m3 still reports itself a learner"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Promoting a voter again is reported distinctly (callers treat it as done).
    let again = client.promote(learner_id).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::MemberNotLearner, "{again}");
    assert!(!again.is_retryable());
}

#[tokio::test]
async fn remove_right_after_start_is_unhealthy_cluster_then_succeeds() {
    let mut cluster = EtcdTestCluster::start(3).await;
    // Ask m0 only, so the strict reconfig check runs on a member that has just connected.
    let client = ClusterClient::new(&[cluster.member(0).client_url()], None, common::timeouts())
        .await
        .unwrap();
    let members = client.member_list().await.unwrap();
    let target = members.iter().find(|m| m.name == "m2").unwrap().id;

    let started = Instant::now();
    let err = client
        .remove(target)
        .await
        .expect_err("etcd should refuse removing a voter within 5s of the members connecting");
    assert_eq!(err.kind(), ErrorKind::UnhealthyCluster, "{err}");
    assert!(err.is_retryable());
    assert!(
        err.to_string().contains("etcdserver: unhealthy cluster"),
        "{err}"
    );

    let remaining = retry_while_retryable(|| client.remove(target), MEMBERSHIP_WAIT)
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(remaining.len(), 2);
    assert!(remaining.iter().all(|m| m.id != target));
    cluster.member_mut(2).kill();

    // Removing it again: the ID is gone (if m2 led, the survivors elect a leader first).
    let gone = retry_while_retryable(|| client.remove(target), MEMBERSHIP_WAIT)
        .await
        .unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::MemberNotFound, "{gone}");
}

#[tokio::test]
async fn refusals_are_classified() {
    let cluster = EtcdTestCluster::start(1).await;
    let client = cluster_client(&cluster).await;
    let me = client.member_list().await.unwrap()[0].clone();

    let err = client.remove(0xdead_beef).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MemberNotFound, "{err}");
    assert!(
        err.message().contains("etcdserver: member not found"),
        "{err}"
    );

    let err = client.add_learner(&me.peer_urls).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PeerUrlExists, "{err}");
    assert!(!err.is_retryable());

    let err = client.promote(me.id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MemberNotLearner, "{err}");

    let err = client
        .update_peer_urls(0xdead_beef, &["http://127.0.0.1:1".to_string()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MemberNotFound, "{err}");

    // Updating to the URLs it already has is accepted and visible in the returned list.
    let list = client.update_peer_urls(me.id, &me.peer_urls).await.unwrap();
    assert_eq!(list[0].peer_urls, me.peer_urls);
}

#[tokio::test]
async fn update_peer_urls_changes_the_member_list() {
    let cluster = EtcdTestCluster::start(1).await;
    let client = cluster_client(&cluster).await;
    let me = client.member_list().await.unwrap()[0].clone();
    // Advertise the same port under "localhost": etcd stores the new URL, and the single
    // member keeps working because it does not talk to itself over the peer URL.
    let port = cluster.member(0).config().peer_port;
    let new_urls = vec![format!("http://localhost:{port}")];
    let list = client.update_peer_urls(me.id, &new_urls).await.unwrap();
    assert_eq!(list[0].peer_urls, new_urls);
    assert_eq!(client.member_list().await.unwrap()[0].peer_urls, new_urls);
}
