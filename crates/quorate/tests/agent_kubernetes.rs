//! `quorate agent --kubernetes` as a member pod runs it, against the real kube-apiserver and a
//! real etcd: the agent reads its configuration from the ConfigMap through the API, runs etcd,
//! renews its member lease and, as backup leader, records its snapshots on the snapshot
//! leases. It runs as the member pods' ServiceAccount (impersonated through its kubeconfig) so
//! the Role the operator renders is what allows it all. The etcd listens on loopback ports
//! because pod DNS names do not resolve here; everything else is what a pod gets.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use quorate_api::Etcd;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::components::cluster_config::render_for_kubernetes;
use quorate_core::lease::TLS_ENABLED_ANNOTATION;
use quorate_testkit::{AgentConfig, ChildGuard, KubeApiServer, create_agent_objects, free_port};

const NAME: &str = "etcd-main";
const POD: &str = "etcd-main-0";

/// One member, backups to a `Local` bucket with a delta every `period`.
fn etcd(namespace: &str, period: &str) -> Etcd {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "uid": "7e57a9e1-0000-4000-8000-000000000001",
        },
        "spec": {
            "replicas": 1,
            "labels": {"app": NAME},
            "etcd": {},
            "backup": {
                "store": {"provider": "Local", "container": "bucket", "prefix": NAME},
                "deltaSnapshotPeriod": period,
            },
        },
    }))
    .expect("a valid Etcd")
}

/// The operator's configuration for the pod, moved to loopback: free ports (metrics too), 127.0.0.1
/// instead of the pod's DNS name, the bucket in `local_root`, a 500 ms lease heartbeat.
fn loopback_config(etcd: &Etcd, local_root: &Path) -> ClusterConfig {
    let ctx = quorate_core::components::ComponentContext::new("quorate:test", "alpine:test");
    let mut config = render_for_kubernetes(etcd, &ctx).expect("cluster config");
    config.listen_host = "127.0.0.1".into();
    config.heartbeat_millis = 500;
    for m in &mut config.members {
        (m.client_port, m.peer_port, m.agent_port) = (free_port(), free_port(), free_port());
        // Not the pod's fixed 2381: this file's two tests run at once on one host, and the
        // second etcd to bind it died ("address already in use") until the first stopped.
        m.metrics_port = Some(free_port());
        m.client_url = format!("http://127.0.0.1:{}", m.client_port);
        m.peer_url = format!("http://127.0.0.1:{}", m.peer_port);
        m.agent_url = format!("http://127.0.0.1:{}", m.agent_port);
    }
    if let Some(backup) = config.backup.as_mut() {
        backup.local_root = local_root.display().to_string();
    }
    config
}

/// The admin kubeconfig, acting as the member pods' ServiceAccount (`as:`).
fn service_account_kubeconfig(server: &KubeApiServer, namespace: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(server.kubeconfig()).expect("read kubeconfig");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("JSON kubeconfig");
    config["users"][0]["user"]["as"] =
        serde_json::Value::String(format!("system:serviceaccount:{namespace}:{NAME}"));
    let path = dir.join("kubeconfig");
    std::fs::write(&path, config.to_string()).expect("write kubeconfig");
    path
}

/// Runs `quorate agent` as the StatefulSet does, with `KUBECONFIG` instead of the pod's token.
fn start_agent(namespace: &str, kubeconfig: &Path, dir: &Path) -> ChildGuard {
    let log = std::fs::File::create(dir.join("agent.log")).expect("agent log");
    let log_err = log.try_clone().expect("agent log");
    let data_dir = dir.join("data").join("new.etcd");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorate"));
    cmd.args(["agent", "--kubernetes", "--namespace", namespace])
        .args(["--cluster", NAME, "--member-from-pod", POD, "--data-dir"])
        .arg(&data_dir)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", POD)
        .env("POD_NAMESPACE", namespace)
        .env("QUORATE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    ChildGuard::spawn(&mut cmd).expect("start quorate agent")
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `f` until it returns `Some`; on timeout panics with `what` and the agent's log.
async fn eventually<T, F, Fut>(what: &str, log: &Path, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; agent log (with etcd's):\n{}",
            tail(log, 60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

fn renew_time(lease: &Lease) -> Option<jiff::Timestamp> {
    Some(lease.spec.as_ref()?.renew_time.as_ref()?.0)
}

fn revision(lease: &Lease) -> Option<i64> {
    holder(lease)?.parse().ok()
}

/// What each test starts from: its own namespace of the shared API server, a temp dir with the
/// `Local` bucket, the member's objects (ConfigMap, RBAC, leases) for an `Etcd` with a delta
/// every `delta_period`, and the ServiceAccount's kubeconfig the agent runs with.
struct Member {
    admin: kube::Client,
    namespace: String,
    dir: tempfile::TempDir,
    local_root: PathBuf,
    config: ClusterConfig,
    kubeconfig: PathBuf,
}

/// `None` (the test skips) without the shared API server's binaries.
async fn prepare(test: &str, prefix: &str, delta_period: &str) -> Option<Member> {
    let server = KubeApiServer::shared_or_skip(test).await?;
    let admin = server.client().await.expect("admin client");
    let namespace = server
        .create_namespace(&admin, prefix)
        .await
        .expect("namespace");
    let dir = tempfile::tempdir().expect("temp dir");
    let local_root = dir.path().join("buckets");
    std::fs::create_dir_all(local_root.join("bucket")).expect("bucket");
    let etcd = etcd(&namespace, delta_period);
    let config = loopback_config(&etcd, &local_root);
    create_agent_objects(&admin, &etcd, AgentConfig::Replaced(&config)).await;
    let kubeconfig = service_account_kubeconfig(server, &namespace, dir.path());
    Some(Member {
        admin,
        namespace,
        dir,
        local_root,
        config,
        kubeconfig,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_with_kubernetes_coordination_renews_its_lease_and_snapshot_leases_advance() {
    let Some(Member {
        admin,
        namespace,
        dir,
        local_root,
        config,
        kubeconfig,
    }) = prepare(
        "agent_with_kubernetes_coordination_renews_its_lease_and_snapshot_leases_advance",
        "agent",
        "1s",
    )
    .await
    else {
        return;
    };
    let before = Api::<Lease>::namespaced(admin.clone(), &namespace)
        .get(POD)
        .await
        .expect("member lease");

    let _agent = start_agent(&namespace, &kubeconfig, dir.path());
    let log = dir.path().join("agent.log");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &namespace);

    // The member lease names etcd's own member and cluster IDs, as the leader.
    let endpoint = config.members[0].client_url.clone();
    let mut etcd_client = eventually("etcd to answer", &log, Duration::from_secs(30), || {
        let endpoint = endpoint.clone();
        async move {
            let mut c = etcd_client::Client::connect([endpoint], None).await.ok()?;
            c.status().await.ok()?;
            Some(c)
        }
    })
    .await;
    let status = etcd_client.status().await.expect("etcd status");
    let header = status.header().expect("status header");
    let expected = format!("{:x}:{:x}:Leader", header.member_id(), header.cluster_id());
    let first = eventually(
        "the member lease to name the leader",
        &log,
        Duration::from_secs(30),
        || async {
            let lease = leases.get(POD).await.ok()?;
            (holder(&lease).as_deref() == Some(expected.as_str())).then_some(lease)
        },
    )
    .await;
    let annotations = first.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations[TLS_ENABLED_ANNOTATION], "false");
    assert_eq!(first.metadata.labels, before.metadata.labels);
    assert_eq!(
        first.metadata.owner_references,
        before.metadata.owner_references
    );

    // It keeps renewing (heartbeat 500 ms).
    let t1 = renew_time(&first).expect("renewTime");
    let t2 = eventually(
        "the member lease to be renewed again",
        &log,
        Duration::from_secs(10),
        || async {
            let t = renew_time(&leases.get(POD).await.ok()?)?;
            (t > t1).then_some(t)
        },
    )
    .await;
    assert!(t2 > t1);

    // As backup leader it takes a full snapshot and records it.
    let full = eventually(
        "the full-snapshot lease to record a revision",
        &log,
        Duration::from_secs(30),
        || async { revision(&leases.get("etcd-main-full-snap").await.ok()?) },
    )
    .await;
    assert!(full >= 1, "full snapshot revision {full}");
    let delta_before = revision(
        &leases
            .get("etcd-main-delta-snap")
            .await
            .expect("delta lease"),
    );

    // Writes reach a delta snapshot within a delta period or two.
    for i in 0..20 {
        etcd_client
            .put(format!("/k8s-agent/{i}"), format!("value-{i}"), None)
            .await
            .expect("put");
    }
    let written = etcd_client
        .get("/k8s-agent/19", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    let delta = eventually(
        "the delta-snapshot lease to reach the written revision",
        &log,
        Duration::from_secs(15),
        || async {
            let r = revision(&leases.get("etcd-main-delta-snap").await.ok()?)?;
            (r >= written).then_some(r)
        },
    )
    .await;
    assert!(
        delta > delta_before.unwrap_or(0),
        "{delta} after {delta_before:?}"
    );
    assert!(
        delta > full,
        "delta {delta} must be past the full snapshot {full}"
    );
    let snapshots = std::fs::read_dir(local_root.join("bucket").join(NAME).join("v2"))
        .expect("the bucket has a v2 directory")
        .count();
    assert!(
        snapshots >= 2,
        "a full and at least one delta in the bucket"
    );
    eprintln!(
        "member lease {expected} renewed {t1} -> {t2}; full snapshot at {full}, delta at \
         {delta}; agent log:\n{}",
        tail(&log, 25)
    );
}

/// What a member pod's container runtime does on delete: SIGTERM to the agent alone (it is
/// the container's PID 1; etcd, its child, gets no signal from the runtime). The agent takes
/// its last delta first (the writes made after the full snapshot, with no periodic delta due
/// for a minute, reach the bucket), then stops etcd and exits 0, well inside the pod's
/// `terminationGracePeriodSeconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_on_sigterm_takes_its_last_delta_stops_etcd_and_exits_within_the_grace() {
    let Some(Member {
        admin,
        namespace,
        dir,
        local_root,
        config,
        kubeconfig,
    }) = prepare(
        "agent_on_sigterm_takes_its_last_delta_stops_etcd_and_exits_within_the_grace",
        "agent-stop",
        "60s",
    )
    .await
    else {
        return;
    };
    let mut agent = start_agent(&namespace, &kubeconfig, dir.path());
    let log = dir.path().join("agent.log");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &namespace);

    let endpoint = config.members[0].client_url.clone();
    let mut etcd_client = eventually("etcd to answer", &log, Duration::from_secs(30), || {
        let endpoint = endpoint.clone();
        async move {
            let mut c = etcd_client::Client::connect([endpoint], None).await.ok()?;
            c.status().await.ok()?;
            Some(c)
        }
    })
    .await;
    let full = eventually(
        "the full-snapshot lease to record a revision",
        &log,
        Duration::from_secs(30),
        || async { revision(&leases.get("etcd-main-full-snap").await.ok()?) },
    )
    .await;
    let mut written = 0;
    for i in 0..20 {
        written = etcd_client
            .put(format!("/last-delta/{i}"), format!("value-{i}"), None)
            .await
            .expect("put")
            .header()
            .expect("header")
            .revision();
    }
    assert!(written > full, "writes after the full snapshot at {full}");
    drop(etcd_client);

    let signalled = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM to the agent");
    let grace = Duration::from_secs(quorate_core::agent_exit::termination_grace_seconds());
    let status = tokio::task::block_in_place(|| agent.wait_timeout(grace + grace))
        .expect("wait for the agent");
    let took = signalled.elapsed();
    let status = status.unwrap_or_else(|| {
        panic!(
            "the agent did not exit within {:?} of SIGTERM; its log:\n{}",
            grace + grace,
            tail(&log, 40)
        )
    });
    assert!(status.success(), "exit {status}; log:\n{}", tail(&log, 40));
    assert!(
        took < grace,
        "SIGTERM -> exit took {took:?}, more than the pod's grace {grace:?}; log:\n{}",
        tail(&log, 40)
    );
    // Its etcd is gone with it: nothing answers on the client port.
    assert!(
        std::net::TcpStream::connect_timeout(
            &format!("127.0.0.1:{}", config.members[0].client_port)
                .parse()
                .expect("address"),
            Duration::from_millis(500),
        )
        .is_err(),
        "etcd still listens after the agent exited"
    );
    let delta = revision(
        &leases
            .get("etcd-main-delta-snap")
            .await
            .expect("delta lease"),
    )
    .unwrap_or(0);
    assert!(
        delta >= written,
        "the last delta reaches revision {delta}, not the last write {written}; log:\n{}",
        tail(&log, 40)
    );
    let deltas: Vec<String> = std::fs::read_dir(local_root.join("bucket").join(NAME).join("v2"))
        .expect("the bucket has a v2 directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("Incr-"))
        .collect();
    assert!(!deltas.is_empty(), "a delta object in the bucket");
    eprintln!(
        "SIGTERM -> exit 0 in {took:?} (grace {grace:?}); last delta through {delta}, deltas {deltas:?}"
    );
}

/// The children of process `parent` one of whose arguments is exactly `arg`.
fn children(parent: u32, arg: &str) -> Vec<u32> {
    quorate_proc::children_of(parent)
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|pid| quorate_proc::has_arg(*pid, arg))
        .collect()
}

/// In a pod the container's main process is the agent's keeper: a `kill -9` of the agent (the
/// keeper's worker) leaves etcd serving, reparented to the keeper; the next worker adopts it
/// (same etcd PID) and renews the member lease; SIGTERM to the keeper still stops everything
/// gracefully within the pod's grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_in_a_pod_leaves_etcd_serving_and_the_next_worker_adopts_it() {
    let Some(Member {
        admin,
        namespace,
        dir,
        config,
        kubeconfig,
        ..
    }) = prepare(
        "a_killed_agent_in_a_pod_leaves_etcd_serving_and_the_next_worker_adopts_it",
        "agent-keeper",
        "1s",
    )
    .await
    else {
        return;
    };
    let mut keeper = start_agent(&namespace, &kubeconfig, dir.path());
    let log = dir.path().join("agent.log");
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &namespace);
    let endpoint = config.members[0].client_url.clone();
    let data_dir = format!("--data-dir={}", dir.path().join("data/new.etcd").display());

    let serving = || {
        let endpoint = endpoint.clone();
        async move {
            let mut c = etcd_client::Client::connect([endpoint], None).await.ok()?;
            c.put("/keeper/k", "v", None).await.ok()?;
            Some(())
        }
    };
    eventually(
        "etcd to take a write",
        &log,
        Duration::from_secs(30),
        serving,
    )
    .await;
    let worker = eventually("the worker", &log, Duration::from_secs(10), || async {
        children(keeper.pid(), "agent").first().copied()
    })
    .await;
    let etcd_pid = eventually(
        "etcd under the worker",
        &log,
        Duration::from_secs(10),
        || async { children(worker, &data_dir).first().copied() },
    )
    .await;

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9 the worker");
    let killed = jiff::Timestamp::now();
    // etcd keeps serving, now the keeper's child.
    eventually(
        "etcd to be reparented to the keeper",
        &log,
        Duration::from_secs(10),
        || async {
            children(keeper.pid(), &data_dir)
                .contains(&etcd_pid)
                .then_some(())
        },
    )
    .await;
    serving().await.expect("etcd serves while no agent runs");
    let next = eventually("a new worker", &log, Duration::from_secs(30), || async {
        children(keeper.pid(), "agent")
            .into_iter()
            .find(|p| *p != worker)
    })
    .await;
    // The new worker renews the member lease with the same etcd: it adopted it.
    eventually(
        "the new worker to renew the member lease",
        &log,
        Duration::from_secs(30),
        || async {
            let t = renew_time(&leases.get(POD).await.ok()?)?;
            (t > killed).then_some(())
        },
    )
    .await;
    assert!(
        children(keeper.pid(), &data_dir).contains(&etcd_pid),
        "the same etcd runs; log:\n{}",
        tail(&log, 40)
    );
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("adopted the running etcd"),
        "the worker {next} adopted etcd; log:\n{}",
        tail(&log, 40)
    );

    keeper
        .signal(nix::sys::signal::Signal::SIGTERM)
        .expect("SIGTERM to the keeper");
    let grace = Duration::from_secs(quorate_core::agent_exit::termination_grace_seconds());
    let status = tokio::task::block_in_place(|| keeper.wait_timeout(grace))
        .expect("wait for the keeper")
        .unwrap_or_else(|| {
            panic!(
                "the keeper did not exit within {grace:?}; log:\n{}",
                tail(&log, 40)
            )
        });
    assert!(status.success(), "exit {status}; log:\n{}", tail(&log, 40));
    assert!(
        !std::path::Path::new(&format!("/proc/{etcd_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{etcd_pid}/stat"))
                .is_ok_and(|s| s.contains(") Z")),
        "etcd stopped with the pod"
    );
}
