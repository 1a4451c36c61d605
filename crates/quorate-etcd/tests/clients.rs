//! Status, health, failover, time bounds and TLS of the clients against real etcd.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{cluster_client, member_client, timeouts};
use quorate_etcd::{
    ClusterClient, ErrorKind, EtcdTimeouts, EtcdTls, MemberClient, PemSource, retry_while_retryable,
};
use quorate_testkit::{EtcdMemberConfig, EtcdProcess, EtcdTestCluster, TestCerts, free_port};

/// Upper bound for a call against a dead or frozen endpoint with `timeouts()`, plus slack for
/// a loaded machine.
fn dead_endpoint_bound() -> Duration {
    let t = timeouts();
    t.connect + t.request + Duration::from_millis(1500)
}

#[tokio::test]
async fn status_reports_one_leader_and_consistent_cluster_facts() {
    let cluster = EtcdTestCluster::start(3).await;
    let client = cluster_client(&cluster).await;
    let ids: Vec<u64> = client
        .member_list()
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    let statuses: Vec<_> = client
        .statuses()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let leaders: Vec<_> = statuses.iter().filter(|s| s.is_leader()).collect();
    assert_eq!(leaders.len(), 1, "{statuses:#?}");
    let leader = leaders[0].member_id;
    for (status, process) in statuses.iter().zip(cluster.members()) {
        assert_eq!(status.endpoint, process.client_url());
        assert!(ids.contains(&status.member_id));
        assert_eq!(status.cluster_id, statuses[0].cluster_id);
        assert_eq!(status.leader_id, leader);
        assert!(!status.is_learner);
        assert!(status.raft_term >= 2, "{status:?}");
        assert!(status.raft_index >= status.raft_applied_index.min(status.raft_index));
        assert!(status.raft_applied_index > 0);
        assert!(status.db_size > 0 && status.db_size_in_use > 0);
        assert!(status.version.starts_with("3."), "{}", status.version);
        assert!(status.errors.is_empty(), "{:?}", status.errors);
    }
    let (leader_client, leader_status) = client.leader().await.unwrap();
    assert_eq!(leader_status.member_id, leader);
    assert_eq!(leader_client.status().await.unwrap().member_id, leader);

    let rev1 = client.put(b"k", b"v1").await.unwrap();
    let rev2 = client.put(b"k", b"v2").await.unwrap();
    assert_eq!(rev2, rev1 + 1);
    assert_eq!(client.get(b"k").await.unwrap().as_deref(), Some(&b"v2"[..]));
    assert_eq!(client.get(b"absent").await.unwrap(), None);
    for process in cluster.members() {
        assert!(member_client(process).await.is_healthy().await);
    }
}

#[tokio::test]
async fn closed_port_is_unreachable_quickly() {
    let url = format!("http://127.0.0.1:{}", free_port());
    // Lazy connect: preparing the client succeeds, the first call fails.
    let client = MemberClient::connect(&url, None, timeouts()).await.unwrap();
    let started = Instant::now();
    let err = client.status().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    assert!(
        started.elapsed() < dead_endpoint_bound(),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.endpoint(), url);
    assert!(
        err.to_string().contains("status on http://127.0.0.1:"),
        "{err}"
    );
    assert!(!client.is_healthy().await);
}

#[tokio::test]
async fn frozen_member_times_out_as_unreachable_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut member = ready_member("frozen", dir.path()).await;
    let client = member_client(&member).await;
    client.status().await.unwrap();

    // SIGSTOP: the kernel still accepts connections but nothing answers, like a black hole.
    member.child().freeze(Duration::from_secs(5)).unwrap();
    let started = Instant::now();
    let err = client.status().await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    assert!(took >= timeouts().request, "gave up too early: {took:?}");
    assert!(took < dead_endpoint_bound(), "not bounded: {took:?}");
    let err = client.put("k", "v").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");

    member.child().thaw(Duration::from_secs(5)).unwrap();
    retry_while_retryable(|| client.check_health(), Duration::from_secs(20))
        .await
        .unwrap();
    assert!(member.is_running());
}

/// Bounds whose connect allowance is long enough to tell apart from the request bound.
const LONG_CONNECT: EtcdTimeouts = EtcdTimeouts {
    connect: Duration::from_secs(6),
    request: Duration::from_secs(1),
    long_request: Duration::from_secs(60),
};

/// One ready member named `name` with its data in `dir`.
async fn ready_member(name: &str, dir: &Path) -> EtcdProcess {
    EtcdProcess::start_ready(EtcdMemberConfig::new(name, dir), Duration::from_secs(30))
        .await
        .unwrap()
}

/// Freezes `member` and checks that a put through `client` gets the request bound of
/// [`LONG_CONNECT`] alone, no connect allowance.
async fn assert_put_gets_no_connect_time(member: &EtcdProcess, client: &MemberClient) {
    member.child().freeze(Duration::from_secs(5)).unwrap();
    let started = Instant::now();
    let err = client.put("k", "w").await.unwrap_err();
    let took = started.elapsed();
    member.child().thaw(Duration::from_secs(5)).unwrap();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    assert!(took >= LONG_CONNECT.request, "gave up too early: {took:?}");
    assert!(
        took < LONG_CONNECT.connect,
        "waited for a connect: {took:?}"
    );
}

#[tokio::test]
async fn a_member_that_answered_gets_no_connect_time_on_its_next_call() {
    // A follower whose leader just died holds a write; with connect time allowed on a working
    // connection, the client waited connect + request there (3 s of the canary's 5 s) before
    // trying another member.
    let dir = tempfile::tempdir().unwrap();
    let member = ready_member("answered", dir.path()).await;
    let client = MemberClient::connect(&member.client_url(), None, LONG_CONNECT)
        .await
        .unwrap();
    client.put("k", "v").await.unwrap();
    assert_put_gets_no_connect_time(&member, &client).await;
}

#[tokio::test]
async fn a_cluster_client_connected_to_all_gives_a_member_no_connect_time_on_its_first_call() {
    // The canary's first write to a member came during a failover: a follower holding the
    // write its dead leader never answered cost connect + request. Connected to every member
    // at start, that first call gets the request bound alone.
    let dir = tempfile::tempdir().unwrap();
    let member = ready_member("all", dir.path()).await;
    let client = ClusterClient::new(&[member.client_url()], None, LONG_CONNECT)
        .await
        .unwrap();
    client.connect_all().await;
    assert_put_gets_no_connect_time(&member, &client.member_clients()[0]).await;
}

#[tokio::test]
async fn cluster_client_fails_over_past_dead_endpoints() {
    let mut cluster = EtcdTestCluster::start(3).await;
    let dead = format!("http://127.0.0.1:{}", free_port());
    let urls = vec![
        dead.clone(),
        cluster.member(0).client_url(),
        cluster.member(1).client_url(),
    ];
    let client = ClusterClient::new(&urls, None, timeouts()).await.unwrap();
    assert_eq!(client.endpoints(), urls);

    let started = Instant::now();
    assert_eq!(client.member_list().await.unwrap().len(), 3);
    assert!(started.elapsed() < dead_endpoint_bound());
    // Every call succeeds, unlike etcd-client's own round robin over the same endpoints.
    for i in 0..20 {
        client
            .put(format!("k{i}").as_bytes(), b"v")
            .await
            .unwrap_or_else(|e| panic!("put {i} failed: {e}"));
    }

    // Losing the endpoint that answered moves on to the next one.
    cluster.member_mut(0).kill();
    let value = retry_while_retryable(|| client.get(b"k7"), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(value.as_deref(), Some(&b"v"[..]));

    // With every endpoint dead the error names them all, quickly.
    cluster.member_mut(1).kill();
    let started = Instant::now();
    let err = client.member_list().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    assert!(err.endpoint().starts_with("all endpoints ["), "{err}");
    for url in &urls {
        assert!(err.message().contains(url.as_str()), "{err}");
    }
    assert!(
        started.elapsed() < dead_endpoint_bound() * 3,
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn member_without_quorum_reports_no_leader_fast() {
    let mut cluster = EtcdTestCluster::start(3).await;
    let survivor = member_client(cluster.member(2)).await;
    cluster.member_mut(0).kill();
    cluster.member_mut(1).kill();

    // Once the survivor notices (≤ a few election timeouts), calls that need a leader are
    // refused at once instead of hanging.
    let deadline = Instant::now() + Duration::from_secs(15);
    let err = loop {
        let err = survivor.put("k", "v").await.unwrap_err();
        if err.kind() == ErrorKind::NoLeader || Instant::now() > deadline {
            break err;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(err.kind(), ErrorKind::NoLeader, "{err}");
    assert!(err.is_retryable());
    let started = Instant::now();
    assert_eq!(
        survivor.get("k").await.unwrap_err().kind(),
        ErrorKind::NoLeader
    );
    assert!(started.elapsed() < Duration::from_secs(1));

    // Status still answers (it is served locally) and shows the missing leader.
    let status = survivor.status().await.unwrap();
    assert_eq!(status.leader_id, 0);
    assert_eq!(
        survivor.check_health().await.unwrap_err().kind(),
        ErrorKind::NoLeader
    );
    // So does the member list, which the agent needs when deciding how to recover.
    assert_eq!(survivor.member_list().await.unwrap().len(), 3);
}

#[tokio::test]
async fn mutual_tls_needs_the_right_ca_and_a_client_certificate() {
    let certs_dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(&certs_dir.path().join("good")).unwrap();
    let other = TestCerts::generate(&certs_dir.path().join("other")).unwrap();
    let cluster = EtcdTestCluster::start_with(1, |c| {
        c.client_tls = Some(certs.server_tls(true));
    })
    .await;
    let url = cluster.member(0).client_url();
    assert!(url.starts_with("https://"));

    let tls = EtcdTls::with_ca(PemSource::File(certs.ca.clone())).with_identity(
        PemSource::File(certs.client_cert.clone()),
        PemSource::Inline(std::fs::read_to_string(&certs.client_key).unwrap()),
    );
    let client = MemberClient::connect(&url, Some(&tls), timeouts())
        .await
        .unwrap();
    client.check_health().await.unwrap();
    client.put("tls", "yes").await.unwrap();
    assert_eq!(
        client.get("tls").await.unwrap().as_deref(),
        Some(&b"yes"[..])
    );

    // No client certificate: the server refuses the handshake.
    let no_identity = EtcdTls::with_ca(PemSource::File(certs.ca.clone()));
    let err = MemberClient::connect(&url, Some(&no_identity), timeouts())
        .await
        .unwrap()
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");

    // A CA that did not sign the server certificate: we refuse the server.
    let wrong_ca = EtcdTls::with_ca(PemSource::File(other.ca.clone())).with_identity(
        PemSource::File(other.client_cert.clone()),
        PemSource::File(other.client_key.clone()),
    );
    let err = MemberClient::connect(&url, Some(&wrong_ca), timeouts())
        .await
        .unwrap()
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
}

#[tokio::test]
async fn unusable_configuration_is_reported_before_any_call() {
    let t = EtcdTimeouts::default();
    let err = MemberClient::connect("https://127.0.0.1:2379", None, t)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");

    let missing = EtcdTls::with_ca(PemSource::File("/nonexistent/ca.pem".into()));
    let err = MemberClient::connect("https://127.0.0.1:2379", Some(&missing), t)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");

    let err = MemberClient::connect("127.0.0.1:2379", None, t)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");

    let err = ClusterClient::new(&[], None, t).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}
