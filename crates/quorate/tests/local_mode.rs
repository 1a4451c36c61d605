//! Local mode end to end: the real `quorate` binary running real etcd members.

mod support;

use etcd_client::Client;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use support::{Local, dump, eventually, manifest, path_str, put_keys, runtime};

/// Every key under `prefix` on one member only, as (key, value) pairs.
async fn keys_on_member(url: &str, prefix: &str) -> Vec<(String, String)> {
    dump(url, prefix)
        .await
        .into_iter()
        .map(|(k, v, _)| (k, v))
        .collect()
}

/// Writes `w/<n>` continuously until stopped, as a client with failover does: a write goes to
/// the endpoint that worked last and moves on to the next when that one does not answer. A
/// write counts as failed only when no member accepted it within 5 seconds.
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    fn start(rt: &tokio::runtime::Runtime, endpoints: Vec<String>) -> Self {
        let (stop, acked, failed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, a, f) = (stop.clone(), acked.clone(), failed.clone());
        let task = rt.spawn(async move {
            let mut clients = Vec::new();
            for url in &endpoints {
                let options = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(Duration::from_millis(500))
                    .with_timeout(Duration::from_secs(1));
                clients.push(
                    Client::connect([url.as_str()], Some(options))
                        .await
                        .expect("connect writer"),
                );
            }
            let (mut n, mut current) = (0u64, 0usize);
            while !s.load(Ordering::SeqCst) {
                let started = std::time::Instant::now();
                loop {
                    let put = clients[current].put(format!("w/{n:08}"), format!("v{n}"), None);
                    if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), put).await {
                        a.fetch_add(1, Ordering::SeqCst);
                        n += 1;
                        break;
                    }
                    current = (current + 1) % clients.len();
                    if started.elapsed() > Duration::from_secs(5) {
                        eprintln!("write w/{n:08} was accepted by no member within 5 s");
                        f.fetch_add(1, Ordering::SeqCst);
                        n += 1;
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Self {
            stop,
            acked,
            failed,
            task,
        }
    }

    /// Stops the writer; returns (acknowledged, failed).
    fn finish(self, rt: &tokio::runtime::Runtime) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        rt.block_on(self.task).unwrap();
        (
            self.acked.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        )
    }
}

#[test]
fn single_and_three_member_clusters_come_up_and_serve() {
    let local = Local::new();
    let one = local.manifest("one.yaml", &manifest("solo", 1, ""));
    let three = local.manifest("three.yaml", &manifest("trio", 3, ""));
    local.ok(&["up", "-d", "-f", path_str(&one), "--timeout", "60s"]);
    local.ok(&["up", "-d", "-f", path_str(&three), "--timeout", "60s"]);

    let table = local.ok(&["get", "etcd", "-o", "wide"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NAME", "READY", "QUORATE", "ALL", "MEMBERS", "READY", "BACKUP", "READY", "SCALE",
            "AGE", "CLUSTER", "SIZE", "CURRENT", "REPLICAS", "READY", "REPLICAS"
        ]
    );
    let row = |name: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(name))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    let solo = row("solo");
    assert_eq!(&solo[1..4], ["true", "True", "True"], "{table}");
    assert_eq!(solo[5], "Complete", "{table}");
    assert_eq!(&solo[7..], ["1", "1", "1"], "{table}");
    let trio = row("trio");
    assert_eq!(&trio[1..4], ["true", "True", "True"], "{table}");
    assert_eq!(&trio[7..], ["3", "3", "3"], "{table}");

    let members = local.ok(&["members", "trio"]);
    let rows: Vec<Vec<&str>> = members
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{members}");
    assert_eq!(
        rows.iter().filter(|r| r[4] == "true").count(),
        1,
        "one leader:\n{members}"
    );
    assert!(
        rows.iter().all(|r| r[5] == "false" && r[6] == "true"),
        "voters, healthy:\n{members}"
    );
    let endpoints = local.endpoints("trio");
    assert_eq!(endpoints.len(), 3);

    let rt = runtime();
    rt.block_on(async {
        let mut client = Client::connect(endpoints.clone(), None).await.unwrap();
        client.put("greeting", "hello", None).await.unwrap();
        for url in &endpoints {
            let got = eventually_async(|| keys_on_member(url, "greeting")).await;
            assert_eq!(
                got,
                vec![("greeting".to_string(), "hello".to_string())],
                "member {url}"
            );
        }
    });

    let yaml = local.ok(&["get", "etcd", "trio", "-o", "yaml"]);
    assert!(yaml.contains("observedGeneration: 1"), "{yaml}");
    assert!(yaml.contains("LeaseSucceeded"), "{yaml}");
    local.ok(&["down", "solo"]);
    assert!(
        local.etcd_pid("solo", "solo-0").is_none(),
        "down stops etcd"
    );
    assert!(
        local
            .cluster_dir("solo")
            .join("members/solo-0/data/member")
            .is_dir(),
        "down keeps data"
    );
    local.ok(&["down", "solo", "--purge"]);
    assert!(
        !local.cluster_dir("solo").exists(),
        "--purge deletes the state"
    );
}

async fn eventually_async<F, Fut>(mut f: F) -> Vec<(String, String)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<(String, String)>>,
{
    for _ in 0..50 {
        let got = f().await;
        if !got.is_empty() {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    f().await
}

#[test]
fn scale_out_one_to_three_to_five_loses_no_write() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("grow", 1, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let rt = runtime();
    let writer = Writer::start(&rt, local.endpoints("grow"));
    std::thread::sleep(Duration::from_secs(1));

    for replicas in [3, 5] {
        local.manifest("c.yaml", &manifest("grow", replicas, ""));
        local.ok(&[
            "apply",
            "-f",
            path_str(&path),
            "--wait",
            "--timeout",
            "120s",
        ]);
        let members = local.ok(&["members", "grow"]);
        assert_eq!(members.lines().count(), replicas as usize + 1, "{members}");
        assert!(
            !members
                .lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(5) == Some("true")),
            "no learner left:\n{members}"
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let (acked, failed) = writer.finish(&rt);
    assert_eq!(failed, 0, "writes failed during scale-out");
    assert!(acked > 100, "the writer kept writing ({acked} writes)");

    let endpoints = local.endpoints("grow");
    assert_eq!(endpoints.len(), 5);
    rt.block_on(async {
        for url in &endpoints {
            let mut keys = Vec::new();
            for _ in 0..50 {
                keys = keys_on_member(url, "w/").await;
                if keys.len() as u64 >= acked {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(
                keys.len() as u64,
                acked,
                "every acknowledged write is on {url}"
            );
            for (i, (k, v)) in keys.iter().enumerate() {
                assert_eq!(
                    (k.as_str(), v.as_str()),
                    (format!("w/{i:08}").as_str(), format!("v{i}").as_str())
                );
            }
        }
    });
}

#[test]
fn killed_members_are_restarted_with_their_data() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("heal", 3, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let endpoints = local.endpoints("heal");
    let rt = runtime();
    rt.block_on(async {
        let mut client = Client::connect(endpoints.clone(), None).await.unwrap();
        for i in 0..50 {
            client.put(format!("k/{i:02}"), "x", None).await.unwrap();
        }
    });
    let ids_before = local.ok(&["members", "heal"]);

    // kill -9 the etcd of member 1: its agent restarts it.
    let etcd = local
        .etcd_pid("heal", "heal-1")
        .expect("etcd of heal-1 runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(etcd),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually(
        "heal-1's etcd to run again",
        Duration::from_secs(30),
        || local.etcd_pid("heal", "heal-1").filter(|p| *p != etcd),
    );
    // kill -9 the agent of member 2: its etcd keeps running; the supervisor restarts the agent,
    // which adopts it.
    let agent = local
        .agent_pid("heal", "heal-2")
        .expect("agent of heal-2 runs");
    let etcd2 = local
        .etcd_pid("heal", "heal-2")
        .expect("etcd of heal-2 runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually(
        "heal-2's agent to run again",
        Duration::from_secs(30),
        || local.agent_pid("heal", "heal-2").filter(|p| *p != agent),
    );

    let path_status = local.cluster_dir("heal").join("status.json");
    eventually("all members ready again", Duration::from_secs(60), || {
        let status = std::fs::read_to_string(&path_status).ok()?;
        status.contains("\"readyReplicas\": 3").then_some(())
    });
    assert_eq!(
        local.etcd_pid("heal", "heal-2"),
        Some(etcd2),
        "heal-2's etcd outlived its agent and was adopted"
    );
    // Same member IDs: the members rejoined with their data instead of being replaced.
    let ids = |table: &str| {
        table
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let after = local.ok(&["members", "heal"]);
    assert_eq!(
        ids(&ids_before),
        ids(&after),
        "before:\n{ids_before}\nafter:\n{after}"
    );
    rt.block_on(async {
        for url in &endpoints {
            let mut keys = Vec::new();
            for _ in 0..50 {
                keys = keys_on_member(url, "k/").await;
                if keys.len() == 50 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(keys.len(), 50, "member {url} has every key");
        }
    });
}

/// etcd that stops between creating its write-ahead log and writing its first entries (a CI run:
/// another process held its metrics port) leaves a log with only the header; etcd then starts
/// as a member of no configuration and never elects a leader. The agent moves such a directory
/// aside (kept) and the member bootstraps again. The state is made from a cluster that ran:
/// its log cut back to the header, its lease (which records the cluster it ran) removed.
#[test]
fn a_member_whose_log_holds_only_its_header_bootstraps_again() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("first", 1, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    local.ok(&["down", "first"]);
    std::fs::remove_file(local.cluster_dir("first").join("leases/first-0.json")).unwrap();
    let member = local.cluster_dir("first").join("members/first-0");
    let wal_dir = member.join("data/member/wal");
    let mut logs: Vec<_> = std::fs::read_dir(&wal_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    logs.sort();
    for later in &logs[1..] {
        std::fs::remove_file(later).unwrap();
    }
    // Keep etcd's first three records (checksum, metadata, empty snapshot marker): what it
    // writes when it creates the log. Zero everything after them, as a preallocated file is.
    let mut log = std::fs::read(&logs[0]).unwrap();
    let mut end = 0;
    for _ in 0..3 {
        let length = u64::from_le_bytes(log[end..end + 8].try_into().unwrap());
        let padding = if length >> 63 == 1 {
            (length >> 56) & 7
        } else {
            0
        };
        end += 8 + (length & 0x00ff_ffff_ffff_ffff) as usize + padding as usize;
    }
    log[end..].fill(0);
    std::fs::write(&logs[0], &log).unwrap();
    for snap in std::fs::read_dir(member.join("data/member/snap")).unwrap() {
        let snap = snap.unwrap().path();
        if snap.extension().is_some_and(|x| x == "snap") {
            std::fs::remove_file(snap).unwrap();
        }
    }

    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let aside: Vec<_> = std::fs::read_dir(&member)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("data.invalid-"))
        .collect();
    assert_eq!(
        aside.len(),
        1,
        "the header-only data moved aside: {aside:?}"
    );
    assert!(
        member.join(&aside[0]).join("member/wal").is_dir(),
        "kept, not deleted"
    );
    let agent_log = std::fs::read_to_string(member.join("agent.log")).unwrap();
    assert!(
        agent_log.contains("holds only the header"),
        "the agent says why: {agent_log}"
    );
}

#[test]
fn invalid_manifest_is_refused_and_nothing_starts() {
    let local = Local::new();
    // Nothing yet: said as kubectl says it, not a bare header.
    let out = local.quorate(&["get", "etcd"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("No resources found"));

    // A typo'd field is said (it is ignored), then the invalid value refuses the manifest.
    let bad = manifest("bad", 3, "")
        .replace("heartbeatDuration: 1s", "heartbeatDuration: 10 seconds")
        .replace("  replicas: 3\n", "  replicas: 3\n  replicass: 5\n");
    let path = local.manifest("bad.yaml", &bad);
    let out = local.quorate(&["up", "-d", "-f", path_str(&path)]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.etcd.heartbeatDuration"), "{stderr}");
    assert!(stderr.contains("10 seconds"), "{stderr}");
    assert!(
        stderr.contains("Warning:")
            && stderr
                .contains("spec.replicass: unknown field, ignored (did you mean \"replicas\"?)"),
        "{stderr}"
    );
    assert!(!local.cluster_dir("bad").exists(), "nothing was created");

    let not_yaml = local.manifest(
        "junk.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
    );
    let out = local.quorate(&["up", "-f", path_str(&not_yaml)]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Etcd"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn port_conflict_is_reported_before_anything_starts() {
    let local = Local::new();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    let text = manifest("clash", 1, "").replace(
        "heartbeatDuration: 1s",
        &format!("heartbeatDuration: 1s\n    clientPort: {taken}"),
    );
    let path = local.manifest("clash.yaml", &text);
    let out = local.quorate(&["up", "-d", "-f", path_str(&path)]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "port {taken} (client port of member clash-0) is already in use"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("spec.etcd.clientPort"), "{stderr}");
    assert!(local.etcd_pid("clash", "clash-0").is_none());
}

#[test]
fn missing_etcd_binary_is_actionable() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("nobin", 1, ""));
    let out = local.quorate(&[
        "up",
        "-d",
        "-f",
        path_str(&path),
        "--etcd-binary",
        "/nonexistent/etcd",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/etcd is not a runnable etcd")
            && stderr.contains("nothing was started"),
        "{stderr}"
    );
}

#[test]
fn member_removed_on_purpose_stays_down() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("prune", 3, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let members = local.ok(&["members", "prune"]);
    let id = members
        .lines()
        .find(|l| l.contains("prune-2"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let endpoints = local.endpoints("prune");
    // etcd refuses removals within 5 s of a member connecting ("unhealthy cluster"): retry.
    eventually(
        "etcdctl member remove to be accepted",
        Duration::from_secs(30),
        || {
            let out = std::process::Command::new(quorate_testkit::etcdctl_binary())
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &endpoints[0], "member", "remove", &id])
                .output()
                .unwrap();
            out.status.success().then_some(())
        },
    );

    let marker = local.cluster_dir("prune").join("members/prune-2/removed");
    eventually(
        "the removed member to be marked",
        Duration::from_secs(30),
        || marker.exists().then_some(()),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        local.etcd_pid("prune", "prune-2").is_none(),
        "a removed member is not restarted"
    );
    assert!(
        local.agent_pid("prune", "prune-2").is_none(),
        "nor is its agent"
    );
    let members = local.ok(&["members", "prune"]);
    assert_eq!(members.lines().count(), 3, "two members remain:\n{members}");
}

/// Three members with client TLS (client certificates required) and peer TLS from the
/// Secrets `ca`, `server`, `client`, `peer-ca` and `peer-server` (generated locally).
fn with_client_and_peer_tls(name: &str) -> String {
    manifest(name, 3, "").replace(
        "    heartbeatDuration: 1s\n",
        "    heartbeatDuration: 1s\n    clientUrlTls:\n      tlsCASecretRef: {name: ca}\n      \
         serverTLSSecretRef: {name: server}\n      clientTLSSecretRef: {name: client}\n    \
         peerUrlTls:\n      tlsCASecretRef: {name: peer-ca}\n      serverTLSSecretRef: {name: \
         peer-server}\n",
    )
}

#[test]
fn tls_cluster_requires_client_certificates() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_client_and_peer_tls("secure"));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let members = local.ok(&["members", "secure"]);
    assert_eq!(
        members
            .lines()
            .filter(|l| l.contains("https://127.0.0.1"))
            .count(),
        3,
        "{members}"
    );
    let lease =
        std::fs::read_to_string(local.cluster_dir("secure").join("leases/secure-0.json")).unwrap();
    assert!(
        lease.contains("\"member.etcd.gardener.cloud/tls-enabled\": \"true\""),
        "{lease}"
    );

    let secrets = local.cluster_dir("secure").join("secrets");
    let endpoint = local.endpoints("secure")[0].clone();
    assert!(endpoint.starts_with("https://"));
    let etcdctl = |with_cert: bool| {
        let mut cmd = std::process::Command::new(quorate_testkit::etcdctl_binary());
        cmd.env("ETCDCTL_API", "3").args([
            "--endpoints",
            &endpoint,
            "--dial-timeout",
            "2s",
            "--command-timeout",
            "3s",
        ]);
        cmd.arg(format!("--cacert={}", secrets.join("ca/ca.crt").display()));
        if with_cert {
            cmd.arg(format!(
                "--cert={}",
                secrets.join("client/tls.crt").display()
            ));
            cmd.arg(format!(
                "--key={}",
                secrets.join("client/tls.key").display()
            ));
        }
        cmd.args(["put", "k", "v"]).output().unwrap()
    };
    let with = etcdctl(true);
    assert!(
        with.status.success(),
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    assert!(
        !etcdctl(false).status.success(),
        "a client without a certificate is refused"
    );
}

/// etcd reads its CA bundle only at start, its certificates per connection. Rotating the CA of
/// client and peer TLS through a bundle: (1) old+new CA in the bundle restarts every member
/// once, in turn, with no write failing; (2) leaves from the new CA are served with nothing
/// restarted; (3) the bundle without the old CA restarts every member once more, after which a
/// certificate of the old CA is refused.
#[test]
fn etcds_ca_rotates_through_a_bundle_one_member_at_a_time() {
    let local = Local::new();
    let name = "rotate";
    let path = local.manifest("c.yaml", &with_client_and_peer_tls(name));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let secrets = local.cluster_dir(name).join("secrets");
    let file = |p: &str| secrets.join(p);
    let read = |p: &str| std::fs::read(file(p)).unwrap();
    let (old_ca, old_peer_ca) = (read("ca/ca.crt"), read("peer-ca/ca.crt"));
    let pids = || -> Vec<Option<i32>> {
        (0..3)
            .map(|i| local.etcd_pid(name, &format!("{name}-{i}")))
            .collect()
    };
    // What each member's lease says its etcd runs (the configuration hash and CA digests).
    let published = || -> Vec<String> {
        (0..3)
            .map(|i| {
                let lease = local
                    .cluster_dir(name)
                    .join(format!("leases/{name}-{i}.json"));
                let lease: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(lease).unwrap_or_default())
                        .unwrap_or_default();
                lease["annotations"]["quorate.io/etcd-config-hash"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    // Every etcd restarted since `before`, and every member's lease says it trusts what the CA
    // files hold now (the agents' logs and leases when not in time).
    let all_restarted_since = |what: &str, before: &[Option<i32>]| {
        use quorate_core::membership::rollout::content_digest;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let digests = [read("ca/ca.crt"), read("peer-ca/ca.crt")].map(|pem| content_digest(&pem));
        let trusted = format!("+ca-{}", content_digest(digests.join(",").as_bytes()));
        loop {
            let now = pids();
            if now.iter().all(Option::is_some)
                && now.iter().zip(before).all(|(a, b)| a != b)
                && published().iter().all(|key| key.ends_with(&trusted))
            {
                return now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}: pids {now:?} (before {before:?}), trust {:?} \
                 (want {trusted})\n{}",
                published(),
                local.log_tails()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let endpoints = local.endpoints(name);
    let work = tempfile::tempdir().unwrap();
    let next = quorate_testkit::TestCerts::generate(work.path()).unwrap();
    let new_ca = std::fs::read(&next.ca).unwrap();
    let tls_args = |ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path| {
        vec![
            format!("--cacert={}", ca.display()),
            format!("--cert={}", cert.display()),
            format!("--key={}", key.display()),
        ]
    };
    let trust_both = work.path().join("both.crt");
    std::fs::write(&trust_both, [old_ca.clone(), new_ca.clone()].concat()).unwrap();
    let old_client = (file("client/tls.crt"), file("client/tls.key"));
    let kept_old_client = (work.path().join("old.crt"), work.path().join("old.key"));
    std::fs::copy(&old_client.0, &kept_old_client.0).unwrap();
    std::fs::copy(&old_client.1, &kept_old_client.1).unwrap();
    let put = |ca: &std::path::Path, (cert, key): (&std::path::Path, &std::path::Path)| {
        std::process::Command::new(quorate_testkit::etcdctl_binary())
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoints.join(","), "--dial-timeout", "2s"])
            .args(["--command-timeout", "5s"])
            .args(tls_args(ca, cert, key))
            .args(["put", "rotation", "ok"])
            .output()
            .unwrap()
    };

    // 1: both CAs trusted. Every etcd restarts once, in turn, while a client of the old CA
    // writes on.
    let before = pids();
    let canary = support::canary::Canary::start_with(
        &endpoints,
        &tls_args(&trust_both, &kept_old_client.0, &kept_old_client.1),
    );
    std::fs::write(file("ca/ca.crt"), [old_ca.clone(), new_ca.clone()].concat()).unwrap();
    std::fs::write(
        file("peer-ca/ca.crt"),
        [old_peer_ca, new_ca.clone()].concat(),
    )
    .unwrap();
    let after_bundle = all_restarted_since("every etcd to restart onto the CA bundle", &before);
    let last = canary.finish();
    assert_eq!(last["failed"], 0, "no write failed: {last}");
    assert!(
        last["longest_wait_ms"].as_u64().unwrap() <= 5000,
        "no write waited more than 5 s: {last}"
    );

    // 2: leaves of the new CA, re-read by etcd per connection: a client that trusts only the
    // new CA and presents a new certificate is served, and nothing restarted.
    for (from, to) in [
        (&next.server_cert, "server/tls.crt"),
        (&next.server_key, "server/tls.key"),
        (&next.server_cert, "peer-server/tls.crt"),
        (&next.server_key, "peer-server/tls.key"),
        (&next.client_cert, "client/tls.crt"),
        (&next.client_key, "client/tls.key"),
    ] {
        std::fs::copy(from, file(to)).unwrap();
    }
    let new_client = (next.client_cert.as_path(), next.client_key.as_path());
    let served = put(&next.ca, new_client);
    assert!(
        served.status.success(),
        "{}",
        String::from_utf8_lossy(&served.stderr)
    );
    assert_eq!(pids(), after_bundle, "new leaves need no restart");

    // 3: the old CA leaves the bundle: every etcd restarts once more, and the old CA's
    // certificates are refused afterwards.
    let canary = support::canary::Canary::start_with(
        &endpoints,
        &tls_args(&next.ca, new_client.0, new_client.1),
    );
    std::fs::write(file("ca/ca.crt"), &new_ca).unwrap();
    std::fs::write(file("peer-ca/ca.crt"), &new_ca).unwrap();
    all_restarted_since("every etcd to restart onto the new CA alone", &after_bundle);
    let last = canary.finish();
    assert_eq!(last["failed"], 0, "no write failed: {last}");
    assert!(
        last["longest_wait_ms"].as_u64().unwrap() <= 5000,
        "no write waited more than 5 s: {last}"
    );
    let refused = put(
        &trust_both,
        (kept_old_client.0.as_path(), kept_old_client.1.as_path()),
    );
    assert!(
        !refused.status.success(),
        "a client certificate of the retired CA was accepted"
    );
    assert!(put(&next.ca, new_client).status.success());
}

#[test]
fn changed_etcd_flags_roll_through_the_members_one_at_a_time() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("roll", 3, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let pids_before: Vec<i32> = (0..3)
        .map(|i| local.etcd_pid("roll", &format!("roll-{i}")).unwrap())
        .collect();
    let rt = runtime();
    let writer = Writer::start(&rt, local.endpoints("roll"));
    std::thread::sleep(Duration::from_secs(1));

    // Sample which members answer; at most one may be away at any time.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (sampling, endpoints) = (sampling.clone(), local.endpoints("roll"));
        rt.spawn(async move {
            let mut clients = Vec::new();
            for url in &endpoints {
                let options = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(Duration::from_millis(300));
                clients.push(
                    Client::connect([url.as_str()], Some(options))
                        .await
                        .unwrap(),
                );
            }
            let mut fewest = clients.len();
            while sampling.load(Ordering::SeqCst) {
                let mut up = 0;
                for c in &mut clients {
                    if let Ok(Ok(_)) =
                        tokio::time::timeout(Duration::from_millis(500), c.status()).await
                    {
                        up += 1;
                    }
                }
                fewest = fewest.min(up);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            fewest
        })
    };

    let changed = manifest("roll", 3, "").replace(
        "heartbeatDuration: 1s",
        "heartbeatDuration: 1s\n    quota: 4Gi",
    );
    local.manifest("c.yaml", &changed);
    // `--wait` returns once the rolling restart is through: every member runs the new quota.
    local.ok(&["apply", "-f", path_str(&path), "--wait", "--timeout", "90s"]);
    let quota = format!("--quota-backend-bytes={}", 4u64 << 30);
    for i in 0..3 {
        let data = local
            .cluster_dir("roll")
            .join(format!("members/roll-{i}/data"));
        assert!(
            local
                .find_pid(&["etcd", &format!("--data-dir={}", data.display()), &quota])
                .is_some(),
            "apply --wait returned before roll-{i} ran with the new quota"
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    sampling.store(false, Ordering::SeqCst);
    assert_eq!(
        rt.block_on(sampler).unwrap(),
        2,
        "members restarted one at a time"
    );
    let (acked, failed) = writer.finish(&rt);
    assert_eq!(failed, 0, "quorum held through the rolling restart");
    assert!(acked > 100, "{acked} writes");
    for (i, before) in pids_before.iter().enumerate() {
        assert_ne!(
            local.etcd_pid("roll", &format!("roll-{i}")),
            Some(*before),
            "roll-{i} restarted"
        );
    }
}

#[test]
fn foreground_up_runs_until_interrupted_and_keeps_data() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("front", 1, ""));
    let mut command = local.command(&["up", "-f", path_str(&path)]);
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut up = quorate_testkit::ChildGuard::spawn(&mut command).unwrap();
    let status = local.cluster_dir("front").join("status.json");
    eventually(
        "the foreground cluster to be ready",
        Duration::from_secs(60),
        || {
            std::fs::read_to_string(&status)
                .ok()?
                .contains("\"readyReplicas\": 1")
                .then_some(())
        },
    );
    assert!(local.etcd_pid("front", "front-0").is_some());

    up.signal(nix::sys::signal::Signal::SIGINT).unwrap();
    let exit = up
        .wait_timeout(Duration::from_secs(30))
        .unwrap()
        .expect("up exits after SIGINT");
    assert!(exit.success(), "{exit}");
    assert!(
        local.etcd_pid("front", "front-0").is_none(),
        "members stop with the foreground supervisor"
    );
    assert!(
        local
            .cluster_dir("front")
            .join("members/front-0/data/member")
            .is_dir(),
        "data is kept"
    );
}

#[test]
fn peer_tls_is_turned_on_with_one_etcd_restart_then_the_cluster_grows_over_tls() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("tlsup", 1, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let rt = runtime();
    rt.block_on(put_keys(&local.endpoints("tlsup"), "before/", 20));
    let first_pid = local.etcd_pid("tlsup", "tlsup-0").expect("etcd runs");
    let lease_file = local.cluster_dir("tlsup").join("leases/tlsup-0.json");
    let tls_reported = |want: &str| {
        std::fs::read_to_string(&lease_file)
            .unwrap_or_default()
            .contains(&format!(
                "\"member.etcd.gardener.cloud/tls-enabled\": \"{want}\""
            ))
    };
    assert!(tls_reported("false"));

    let peer_tls = "    peerUrlTls:
      tlsCASecretRef: {name: peer-ca}
      serverTLSSecretRef: {name: peer-server}
";
    let with_tls = |replicas| {
        manifest("tlsup", replicas, "").replace(
            "    heartbeatDuration: 1s\n",
            &format!("    heartbeatDuration: 1s\n{peer_tls}"),
        )
    };
    local.manifest("c.yaml", &with_tls(1));
    local.ok(&["apply", "-f", path_str(&path), "--wait", "--timeout", "60s"]);
    // etcd restarted in place once; the member list now has the https peer URL and the lease
    // says so.
    eventually(
        "the lease to report peer TLS",
        Duration::from_secs(30),
        || tls_reported("true").then_some(()),
    );
    let members = local.ok(&["members", "tlsup"]);
    assert!(members.contains("https://127.0.0.1"), "{members}");
    let restarted_pid = local.etcd_pid("tlsup", "tlsup-0").expect("etcd runs");
    assert_ne!(
        restarted_pid, first_pid,
        "etcd restarted with the TLS listener"
    );

    local.manifest("c.yaml", &with_tls(3));
    local.ok(&[
        "apply",
        "-f",
        path_str(&path),
        "--wait",
        "--timeout",
        "120s",
    ]);
    let members = local.ok(&["members", "tlsup"]);
    assert_eq!(
        members
            .lines()
            .filter(|l| l.contains("https://127.0.0.1"))
            .count(),
        3,
        "every member joined over TLS:\n{members}"
    );
    assert_eq!(
        local.etcd_pid("tlsup", "tlsup-0"),
        Some(restarted_pid),
        "growing the cluster did not restart the first member again"
    );
    for url in local.endpoints("tlsup") {
        let keys = rt.block_on(dump(&url, "before/"));
        assert_eq!(keys.len(), 20, "every write is on {url}");
    }
}

/// READY, QUORATE and ALL MEMBERS READY of cluster `name` as `quorate get etcd` prints them.
fn readiness_columns(local: &Local, name: &str) -> Vec<String> {
    let table = local.ok(&["get", "etcd", name]);
    let row = table
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no row for {name}:\n{table}"));
    row.split_whitespace()
        .skip(1)
        .take(3)
        .map(String::from)
        .collect()
}

#[test]
fn stopped_and_orphaned_clusters_are_not_shown_ready() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("halt", 1, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    assert_eq!(readiness_columns(&local, "halt"), ["true", "True", "True"]);

    // The supervisor is killed on its own; its agent and etcd keep running, but nothing
    // watches them: the cluster is not shown ready.
    let lock = local.cluster_dir("halt").join("supervisor.lock");
    let pid: i32 = std::fs::read_to_string(lock)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let etcd = local.etcd_pid("halt", "halt-0").expect("etcd runs");
    let agent = local.agent_pid("halt", "halt-0").expect("the agent runs");
    eventually("the supervisor to go", Duration::from_secs(15), || {
        let state = local.state.path().display().to_string();
        local
            .find_pid(&[&state, "supervise", "halt"])
            .is_none()
            .then_some(())
    });
    assert_eq!(
        local.agent_pid("halt", "halt-0"),
        Some(agent),
        "the agent kept running"
    );
    assert_eq!(
        local.etcd_pid("halt", "halt-0"),
        Some(etcd),
        "etcd kept running"
    );
    assert_eq!(
        readiness_columns(&local, "halt"),
        ["false", "False", "False"],
        "a cluster whose supervisor was killed"
    );

    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    assert_eq!(readiness_columns(&local, "halt"), ["true", "True", "True"]);
    assert_eq!(
        local.etcd_pid("halt", "halt-0"),
        Some(etcd),
        "etcd kept running"
    );
    assert_eq!(
        local.agent_pid("halt", "halt-0"),
        Some(agent),
        "the agent was adopted"
    );
    local.ok(&["down", "halt"]);
    assert_eq!(local.etcd_pid("halt", "halt-0"), None, "down stopped etcd");
    assert_eq!(
        readiness_columns(&local, "halt"),
        ["false", "False", "False"],
        "a cluster stopped with down"
    );
}

#[test]
fn enable_grpc_gateway_reaches_etcd() {
    let local = Local::new();
    let text = manifest("gw", 1, "").replace(
        "heartbeatDuration: 1s",
        "heartbeatDuration: 1s\n    enableGRPCGateway: true",
    );
    let path = local.manifest("c.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let data = local.cluster_dir("gw").join("members/gw-0/data");
    assert!(
        local
            .find_pid(&[
                "etcd",
                &format!("--data-dir={}", data.display()),
                "--enable-grpc-gateway=true",
            ])
            .is_some(),
        "etcd runs with the gateway the manifest enables"
    );
}

#[test]
fn a_cluster_refusing_writes_with_nospace_is_not_shown_ready() {
    let local = Local::new();
    let text = manifest("full", 1, "").replace(
        "heartbeatDuration: 1s",
        "heartbeatDuration: 1s\n    quota: 2Mi",
    );
    let path = local.manifest("c.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    assert_eq!(readiness_columns(&local, "full"), ["true", "True", "True"]);

    let rt = runtime();
    rt.block_on(async {
        let mut client = Client::connect(local.endpoints("full"), None)
            .await
            .unwrap();
        let value = vec![b'x'; 64 * 1024];
        let mut refused = false;
        for i in 0..200 {
            if let Err(e) = client.put(format!("k{i}"), value.clone(), None).await {
                assert!(e.to_string().contains("space exceeded"), "{e}");
                refused = true;
                break;
            }
        }
        assert!(refused, "etcd raised NOSPACE");
    });
    eventually(
        "get to show the NOSPACE cluster not ready",
        Duration::from_secs(30),
        || (readiness_columns(&local, "full") == ["false", "False", "False"]).then_some(()),
    );
    let yaml = local.ok(&["get", "etcd", "full", "-o", "yaml"]);
    assert!(yaml.contains("NOSPACE on member full-0"), "{yaml}");
}

/// A base port with it and the next two member ports (stride 10) free right now, below the
/// ephemeral range as quorate chooses its own (an outgoing connection cannot take it).
fn free_base() -> u16 {
    loop {
        let base = quorate_local::ports::free_port();
        if (0..3).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + 10 * i)).is_ok()) {
            return base;
        }
    }
}

/// A port the manifest names that was refused does not stay recorded: fixing the manifest
/// lets `up` start on the new ports. A port moved while the cluster runs is kept, and `apply`
/// says so and how to move it.
#[test]
fn a_refused_port_is_chosen_again_and_a_kept_port_is_said() {
    let local = Local::new();
    let (blocked, _holder) = loop {
        let port = quorate_local::ports::free_port();
        if let Ok(holder) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            break (port, holder);
        }
    };
    let with_port = |port: u16| {
        manifest("ported", 1, "").replace(
            "    heartbeatDuration: 1s\n",
            &format!("    heartbeatDuration: 1s\n    clientPort: {port}\n"),
        )
    };
    let path = local.manifest("c.yaml", &with_port(blocked));
    let refused = local.quorate(&["up", "-d", "-f", path_str(&path), "--timeout", "30s"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&format!("port {blocked}")) && said.contains("spec.etcd.clientPort"),
        "{said}"
    );

    let free = free_base();
    local.manifest("c.yaml", &with_port(free));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    assert_eq!(
        local.endpoints("ported"),
        vec![format!("http://127.0.0.1:{free}")],
        "the member took the manifest's new port"
    );

    let moved = free_base();
    local.manifest("c.yaml", &with_port(moved));
    let applied = local.quorate(&["apply", "-f", path_str(&path)]);
    assert!(applied.status.success());
    let note = String::from_utf8_lossy(&applied.stderr);
    assert!(
        note.contains(&format!(
            "ported-0 keeps port {free} although spec.etcd.clientPort now gives it {moved}"
        )) && note.contains("quorate down ported"),
        "{note}"
    );
    local.ok(&["down", "ported"]);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    assert_eq!(
        local.endpoints("ported"),
        vec![format!("http://127.0.0.1:{moved}")],
        "a stopped cluster's client port moves"
    );
}
