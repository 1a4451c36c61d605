//! The testkit's etcd helpers against the real etcd binary.

use std::time::{Duration, Instant};

use quorate_testkit::{EtcdMemberConfig, EtcdProcess, EtcdTestCluster, TestCerts};

fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn three_member_cluster_has_one_leader_and_dies_with_its_guard() {
    let cluster = EtcdTestCluster::start(3).await;
    assert_eq!(cluster.members().len(), 3);
    let mut leaders = 0;
    for member in cluster.members() {
        assert!(
            member.health().await.unwrap(),
            "{} unhealthy",
            member.name()
        );
        let metrics = member.metrics().await.unwrap();
        assert_eq!(metric(&metrics, "etcd_server_has_leader"), Some(1.0));
        leaders += metric(&metrics, "etcd_server_is_leader").unwrap() as usize;
    }
    assert_eq!(leaders, 1, "exactly one member should lead");
    let urls = cluster.client_urls();
    assert_eq!(urls.len(), 3);
    assert!(urls.iter().all(|u| u.starts_with("http://127.0.0.1:")));

    let pids: Vec<u32> = cluster.members().iter().map(|m| m.child().pid()).collect();
    let dir = cluster.dir().to_path_buf();
    assert!(dir.join("m0.etcd").is_dir());
    drop(cluster);
    for pid in pids {
        assert!(!pid_alive(pid), "etcd {pid} survived the cluster drop");
    }
    assert!(!dir.exists(), "temp dir should be removed");
}

#[tokio::test]
async fn wait_ready_fails_fast_with_log_tail_when_etcd_exits() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EtcdMemberConfig::new("bad", dir.path());
    config.extra_args.push("--no-such-flag".to_string());
    let mut process = EtcdProcess::start(config).unwrap();
    let started = Instant::now();
    let err = process
        .wait_ready(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(err.exited, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(err.to_string().contains("no-such-flag"), "{err}");
}

#[tokio::test]
async fn member_restarts_on_its_data_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let config = EtcdMemberConfig::new("solo", dir.path());
    let mut member = EtcdProcess::start_ready(config, Duration::from_secs(20))
        .await
        .unwrap();
    member.kill();
    assert!(!member.is_running());
    assert!(
        member.health().await.is_err(),
        "killed member still answers"
    );
    member.restart().unwrap();
    member.wait_ready(Duration::from_secs(20)).await.unwrap();
    assert!(
        member
            .log_tail(200)
            .contains("ready to serve client requests")
    );
}

#[tokio::test]
async fn tls_cluster_serves_https_and_reports_ready() {
    let certs_dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(certs_dir.path()).unwrap();
    let cluster = EtcdTestCluster::start_with(3, |c| {
        c.client_tls = Some(certs.server_tls(true));
        c.peer_tls = Some(certs.server_tls(true));
    })
    .await;
    for member in cluster.members() {
        assert!(member.client_url().starts_with("https://"));
        assert!(member.peer_url().starts_with("https://"));
    }
    // etcdctl with the client certificate proves the certificates are usable end to end.
    let out = std::process::Command::new(quorate_testkit::etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.client_urls().join(",")))
        .arg(format!("--cacert={}", certs.ca.display()))
        .arg(format!("--cert={}", certs.client_cert.display()))
        .arg(format!("--key={}", certs.client_key.display()))
        .args(["endpoint", "health"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl endpoint health failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
