//! `quorate-bench upgrade`: a 3-member cluster goes 3.5 → 3.6 → 3.7 → 3.6 → 3.5, one minor
//! step at a time, with `quorate apply` and by hand in the same run. By hand is what etcd's
//! upgrade guides describe: each member in turn is stopped and started on the other binary,
//! followers first, the leader last after `etcdctl move-leader` to an updated member; a
//! downgrade first runs `etcdctl downgrade validate` and `downgrade enable` and waits until
//! etcd reports the lower cluster version. Before the 3.6 → 3.7 step both wait until every
//! member's newest raft snapshot records cluster version 3.6 (etcd 3.7 cannot replay the 3.5
//! entries an older write-ahead log holds); the hand cluster's 3.6 members run with the same
//! `--snapshot-count` quorate gives them for that wait. Each step runs under its own
//! `quorate canary --write-timeout 5s` (a write every 20 ms, failing over between members) and
//! ends when every member answers `/version` with the new server and cluster version.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Args;
use quorate_api::EtcdVersion;
use quorate_etcd::binaries::EtcdBinaries;
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::EtcdTestCluster;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::error::{BenchError, Result};
use crate::hand::ETCD_DEFAULT_TIMING;
use crate::quorate_run::{LocalCluster, NAME};
use crate::report::{MachineFacts, Markdown, Table, met};

/// The chain both methods take, one minor step each.
const CHAIN: [&str; 5] = ["3.5", "3.6", "3.7", "3.6", "3.5"];
/// Bound on one step.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a member may take to stop gracefully before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// `quorate-bench upgrade` arguments.
#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// The quorate binary [default: `quorate` next to this executable].
    #[arg(long)]
    quorate: Option<PathBuf>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<PathBuf>,
}

/// What the canary of one step reported.
#[derive(Clone, Debug, Default)]
struct CanaryReport {
    acknowledged: u64,
    failed: u64,
    longest_wait_ms: u64,
}

/// One measured step.
struct Step {
    from: EtcdVersion,
    to: EtcdVersion,
    elapsed: Duration,
    canary: CanaryReport,
}

fn v(text: &str) -> EtcdVersion {
    EtcdVersion::parse(text).expect("a version of the chain")
}

/// Runs the benchmark and prints (and writes) the report.
pub async fn run(args: UpgradeArgs) -> Result<()> {
    let quorate = match args.quorate {
        Some(path) => path,
        None => crate::default_quorate()?,
    };
    let binaries = EtcdBinaries::default();
    let mut versions = Vec::new();
    for version in ["3.5", "3.6", "3.7"] {
        let etcd = binaries
            .etcd(v(version))
            .map_err(|e| BenchError::failed(e.to_string()))?;
        let line = crate::version_line(&etcd).await;
        versions.push(
            line.strip_prefix("etcd Version: ")
                .unwrap_or(&line)
                .to_string(),
        );
    }
    let mut machine = MachineFacts {
        etcd_version: Some(versions.join(", ")),
        quorate: Some(crate::quorate_binary(&quorate).await),
        ..MachineFacts::at_start()
    };
    eprintln!("quorate ...");
    let by_quorate = quorate_chain(&quorate).await?;
    eprintln!("by hand ...");
    let by_hand = hand_chain(&quorate, &binaries).await?;
    machine.finish();
    crate::publish_report(
        &render(&by_quorate, &by_hand, &machine),
        args.output.as_deref(),
    )
}

/// A running `quorate canary` against `endpoints`.
struct Canary {
    child: tokio::process::Child,
    lines: tokio::task::JoinHandle<Option<String>>,
}

impl Canary {
    fn start(quorate: &Path, endpoints: &[String], prefix: &str) -> Result<Canary> {
        let mut child = tokio::process::Command::new(quorate)
            .args(["canary", "--endpoints", &endpoints.join(",")])
            .args(["--prefix", prefix, "--interval", "20ms"])
            .args(["--report-every", "500ms", "--write-timeout", "5s"])
            .env("QUORATE_LOG", "warn")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(BenchError::io("run", quorate))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| BenchError::failed("the canary's output is not piped"))?;
        let lines = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut last = None;
            while let Ok(Some(line)) = lines.next_line().await {
                last = Some(line);
            }
            last
        });
        Ok(Canary { child, lines })
    }

    /// Stops the canary (SIGTERM: it reports once more and ends) and reads its last report.
    async fn finish(mut self) -> Result<CanaryReport> {
        if let Some(pid) = self.child.id() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        let last = self
            .lines
            .await
            .ok()
            .flatten()
            .ok_or_else(|| BenchError::failed("the canary reported nothing"))?;
        let json: serde_json::Value = serde_json::from_str(&last)
            .map_err(|e| BenchError::failed(format!("the canary's report {last:?}: {e}")))?;
        let number = |key: &str| json[key].as_u64().unwrap_or_default();
        Ok(CanaryReport {
            acknowledged: number("acknowledged_through"),
            failed: number("failed"),
            longest_wait_ms: number("longest_wait_ms"),
        })
    }
}

/// etcd's `/version` answer of the member at `client_url`: (server, cluster); `None` while it
/// does not answer.
async fn versions(client_url: &str) -> Option<(String, String)> {
    let address = client_url.trim_start_matches("http://").to_string();
    let answer = tokio::time::timeout(Duration::from_secs(1), async move {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream
            .write_all(b"GET /version HTTP/1.0\r\n\r\n")
            .await
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    })
    .await
    .ok()??;
    let body = answer.split("\r\n\r\n").nth(1)?;
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    Some((
        json["etcdserver"].as_str()?.to_string(),
        json["etcdcluster"].as_str()?.to_string(),
    ))
}

/// Every member runs `version` and reports it as the cluster version.
async fn all_at(endpoints: &[String], version: EtcdVersion) -> bool {
    for url in endpoints {
        match versions(url).await {
            Some((server, cluster))
                if server.starts_with(&format!("{version}."))
                    && cluster == format!("{version}.0") => {}
            _ => return false,
        }
    }
    true
}

/// Waits (polling every 100 ms) until every member runs `version` and reports it.
async fn wait_all_at(endpoints: &[String], version: EtcdVersion, started: Instant) -> Result<()> {
    while !all_at(endpoints, version).await {
        if started.elapsed() > STEP_TIMEOUT {
            return Err(BenchError::failed(format!(
                "the members did not all reach etcd {version} within {STEP_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn manifest(version: EtcdVersion) -> String {
    format!(
        "apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: {NAME}
  annotations:
    quorate.io/etcd-version: \"{version}\"
spec:
  replicas: 3
  labels:
    app: {NAME}
  etcd:
    heartbeatDuration: 1s
  backup: {{}}
"
    )
}

/// The chain with quorate: `up -d` on 3.5, then one `apply` per step.
async fn quorate_chain(bin: &Path) -> Result<Vec<Step>> {
    let cluster = LocalCluster::up(bin, manifest(v(CHAIN[0]))).await?;
    let endpoints = cluster.endpoints().await?;
    let started = Instant::now();
    wait_all_at(&endpoints, v(CHAIN[0]), started).await?;
    let mut steps = Vec::new();
    for (i, pair) in CHAIN.windows(2).enumerate() {
        let (from, to) = (v(pair[0]), v(pair[1]));
        let apply = async || cluster.apply(manifest(to)).await;
        let prefix = format!("q{i}/");
        steps.push(measure_step("quorate", bin, &endpoints, &prefix, (from, to), apply).await?);
    }
    if let Some(note) = cluster.down().await {
        eprintln!("  {note}");
    }
    Ok(steps)
}

/// Measures one step of the chain the same way for both methods (`who`): a canary writes
/// under `prefix` from a second before `step` until a second after every member reached the
/// step's target; the time is from the step's start until then.
async fn measure_step(
    who: &str,
    quorate: &Path,
    endpoints: &[String],
    prefix: &str,
    (from, to): (EtcdVersion, EtcdVersion),
    step: impl AsyncFnOnce() -> Result<()>,
) -> Result<Step> {
    let canary = Canary::start(quorate, endpoints, prefix)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t0 = Instant::now();
    step().await?;
    wait_all_at(endpoints, to, t0).await?;
    let elapsed = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let canary = canary.finish().await?;
    eprintln!(
        "  {who} {from} → {to}: {:.1} s, {} failed, longest {} ms",
        elapsed.as_secs_f64(),
        canary.failed,
        canary.longest_wait_ms
    );
    Ok(Step {
        from,
        to,
        elapsed,
        canary,
    })
}

/// Runs `etcdctl <args>` of `version` against `endpoints`.
async fn etcdctl(
    binaries: &EtcdBinaries,
    version: EtcdVersion,
    endpoints: &str,
    args: &[&str],
) -> Result<String> {
    let etcd = binaries
        .etcd(version)
        .map_err(|e| BenchError::failed(e.to_string()))?;
    let etcdctl = etcd.with_file_name("etcdctl");
    let output = tokio::process::Command::new(&etcdctl)
        .arg(format!("--endpoints={endpoints}"))
        .args(["--dial-timeout=2s", "--command-timeout=10s"])
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(BenchError::io("run", &etcdctl))?;
    if !output.status.success() {
        return Err(BenchError::failed(format!(
            "etcdctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The hand cluster's members' IDs and which leads, read from member `url`.
async fn leader_and_ids(url: &str) -> Result<(u64, Vec<(String, u64)>)> {
    let client = MemberClient::connect(url, None, EtcdTimeouts::fast()).await?;
    let status = client.status().await?;
    let ids = client
        .member_list()
        .await?
        .into_iter()
        .map(|m| (m.name, m.id))
        .collect();
    Ok((status.leader_id, ids))
}

/// Whether every member's newest raft snapshot records cluster version `version` or later.
fn snapshots_at(cluster: &EtcdTestCluster, version: EtcdVersion) -> bool {
    cluster.members().iter().all(|m| {
        quorate_etcd::snap_file::newest(&m.config().data_dir)
            .ok()
            .flatten()
            .and_then(|f| f.cluster_version)
            .and_then(|c| EtcdVersion::parse(&c).ok())
            .is_some_and(|c| c >= version)
    })
}

/// One step by hand: for a downgrade, etcd's downgrade API first; then each member in turn on
/// the `to` binary, followers first, the leader last after a handover.
async fn hand_step(
    cluster: &mut EtcdTestCluster,
    binaries: &EtcdBinaries,
    from: EtcdVersion,
    to: EtcdVersion,
    final_target: EtcdVersion,
) -> Result<()> {
    let endpoints = cluster.client_urls();
    let all = endpoints.join(",");
    if to < from {
        let target = to.to_string();
        // etcd ends the previous downgrade job a moment after its last member restarted
        // (its leader checks every few seconds); until then it refuses a new one.
        let started = Instant::now();
        while let Err(e) = etcdctl(binaries, from, &all, &["downgrade", "validate", &target]).await
        {
            if started.elapsed() > STEP_TIMEOUT
                || !e.to_string().contains("downgrade job in progress")
            {
                return Err(e);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        etcdctl(binaries, from, &all, &["downgrade", "enable", &target]).await?;
        let started = Instant::now();
        loop {
            let mut lowered = true;
            for url in &endpoints {
                lowered &= versions(url)
                    .await
                    .is_some_and(|(_, c)| c == format!("{to}.0"));
            }
            if lowered {
                break;
            }
            if started.elapsed() > STEP_TIMEOUT {
                return Err(BenchError::failed(format!(
                    "etcd did not lower the cluster version to {to}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    if from == EtcdVersion::V3_6 && to == EtcdVersion::V3_7 {
        let started = Instant::now();
        while !snapshots_at(cluster, from) {
            if started.elapsed() > STEP_TIMEOUT {
                return Err(BenchError::failed(
                    "the members took no raft snapshot at cluster version 3.6",
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let binary = binaries
        .etcd(to)
        .map_err(|e| BenchError::failed(e.to_string()))?;
    // The same snapshot count quorate gives 3.6 members of a chain that goes on to 3.7.
    let extra = quorate_core::etcd_version::snapshot_count(
        to,
        Some(final_target),
        quorate_api::defaults::DEFAULT_SNAPSHOT_COUNT,
    );
    let extra_args = vec![format!("--snapshot-count={extra}")];
    let (leader, ids) = leader_and_ids(&endpoints[0]).await?;
    let leader_index = ids
        .iter()
        .position(|(_, id)| *id == leader)
        .and_then(|_| {
            let name = ids.iter().find(|(_, id)| *id == leader)?.0.clone();
            cluster.members().iter().position(|m| m.name() == name)
        })
        .ok_or_else(|| BenchError::failed(format!("no leader among {ids:?}")))?;
    let mut order: Vec<usize> = (0..cluster.members().len())
        .filter(|i| *i != leader_index)
        .collect();
    order.push(leader_index);
    for (n, i) in order.iter().copied().enumerate() {
        if n + 1 == order.len() {
            let to_name = cluster.member(order[0]).name().to_string();
            let to_id = ids
                .iter()
                .find(|(name, _)| *name == to_name)
                .map(|(_, id)| *id)
                .ok_or_else(|| BenchError::failed(format!("no member {to_name}")))?;
            etcdctl(
                binaries,
                from.max(to),
                &cluster.member(i).client_url(),
                &["move-leader", &format!("{to_id:x}")],
            )
            .await?;
        }
        cluster
            .member_mut(i)
            .restart_on(binary.clone(), extra_args.clone(), STOP_GRACE)
            .map_err(|e| BenchError::failed(format!("restarting member {i}: {e}")))?;
        cluster
            .member_mut(i)
            .wait_ready(Duration::from_secs(60))
            .await?;
    }
    Ok(())
}

/// The chain by hand on a cluster started on 3.5 with etcd's default raft timing.
async fn hand_chain(quorate: &Path, binaries: &EtcdBinaries) -> Result<Vec<Step>> {
    let first = binaries
        .etcd(v(CHAIN[0]))
        .map_err(|e| BenchError::failed(e.to_string()))?;
    let mut cluster = EtcdTestCluster::start_with(3, |c| {
        c.timing = Some(ETCD_DEFAULT_TIMING);
        c.binary = Some(first.clone());
    })
    .await;
    let endpoints = cluster.client_urls();
    wait_all_at(&endpoints, v(CHAIN[0]), Instant::now()).await?;
    let mut steps = Vec::new();
    for (i, pair) in CHAIN.windows(2).enumerate() {
        let (from, to) = (v(pair[0]), v(pair[1]));
        // The target a person has in mind for this leg of the chain (3.7 up, 3.5 down).
        let final_target = if to > from { v("3.7") } else { v("3.5") };
        let by_hand = async || hand_step(&mut cluster, binaries, from, to, final_target).await;
        let prefix = format!("h{i}/");
        let step = measure_step("by hand", quorate, &endpoints, &prefix, (from, to), by_hand);
        steps.push(step.await?);
    }
    drop(cluster);
    Ok(steps)
}

fn render(quorate: &[Step], hand: &[Step], machine: &MachineFacts) -> String {
    let mut doc = Markdown::new();
    doc.heading(
        1,
        "etcd upgrades and downgrades: quorate vs. the same steps by hand",
    );
    doc.paragraph(
        "One run: a local 3-member cluster goes 3.5 → 3.6 → 3.7 → 3.6 → 3.5, one minor step \
         at a time, with `quorate apply` (one per step) and by hand. By hand is etcd's own \
         procedure: each member in turn is stopped (SIGTERM) and started on the other binary, \
         followers first, the leader last after `etcdctl move-leader` to an updated member; a \
         downgrade first runs `etcdctl downgrade validate` and `downgrade enable` and waits \
         until etcd reports the lower cluster version. Before the 3.6 → 3.7 step both wait \
         until every member's newest raft snapshot records cluster version 3.6 (etcd 3.7 \
         cannot replay the 3.5 entries an older write-ahead log may hold); the 3.6 members of \
         both run with the `--snapshot-count` quorate sets for that wait. Each step runs under \
         its own `quorate canary --write-timeout 5s` (a write every 20 ms, failing over \
         between the members); time runs from `quorate apply` (or the first etcdctl call or \
         restart) until every member answers `/version` with the new server and cluster \
         version (read every 100 ms).",
    );
    let mut table = Table::numeric(
        "step",
        [
            "quorate",
            "by hand",
            "quorate / by hand",
            "failed writes (quorate / hand)",
            "longest write (quorate / hand)",
            "writes (quorate / hand)",
        ],
    );
    let mut total = (0.0, 0.0);
    for (q, h) in quorate.iter().zip(hand) {
        let (qs, hs) = (q.elapsed.as_secs_f64(), h.elapsed.as_secs_f64());
        total.0 += qs;
        total.1 += hs;
        table.row([
            format!("{} → {}", q.from, q.to),
            format!("{qs:.1} s"),
            format!("{hs:.1} s"),
            format!("{:.2}x", qs / hs.max(f64::EPSILON)),
            format!("{} / {}", q.canary.failed, h.canary.failed),
            format!(
                "{} ms / {} ms",
                q.canary.longest_wait_ms, h.canary.longest_wait_ms
            ),
            format!("{} / {}", q.canary.acknowledged, h.canary.acknowledged),
        ]);
    }
    doc.table(&table);
    let ratio = total.0 / total.1.max(f64::EPSILON);
    doc.paragraph(format!(
        "**All four steps: quorate {:.1} s, by hand {:.1} s: {ratio:.2}x the hand procedure's \
         time.**",
        total.0, total.1
    ));
    let failed: u64 = quorate.iter().map(|s| s.canary.failed).sum();
    let longest = quorate
        .iter()
        .map(|s| s.canary.longest_wait_ms)
        .max()
        .unwrap_or(0);
    doc.bullets([
        format!("0 failed writes with quorate: {}", met(failed == 0)),
        format!(
            "no write waited 5 s with quorate (longest {longest} ms): {}",
            met(longest < 5000)
        ),
    ]);
    doc.machine(
        machine,
        "scripts/install-etcd.sh 3.5 3.6 3.7 && cargo build --release -p quorate -p \
         quorate-bench && target/release/quorate-bench upgrade --output \
         docs/benchmarks/upgrade.md",
    );
    doc.into_string()
}
