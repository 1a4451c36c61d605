//! One run of the suite: a 3-member local cluster with backups, the clients and watchers
//! running throughout, a seeded schedule of faults and operations, each healed and timed, then
//! the history checked.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;

use crate::checker::{self, CheckReport};
use crate::cluster::LocalCluster;
use crate::faults::disk::SmallDisks;
use crate::faults::network::{MemberPorts, Partitioner};
use crate::faults::store_proxy::{StoreFault, StoreProxy};
use crate::faults::{Capabilities, Step, Target, first_step, next_step};
use crate::history::History;
use crate::watch::{WatchRecord, watch_until};
use crate::workload::{ClientRecord, PREFIX, WorkloadPlan, run_client};
use tokio::task::JoinHandle;

/// Cluster name of every run.
const CLUSTER: &str = "chaos";
/// How long the cluster may take to heal after a step before the run fails.
const HEAL_DEADLINE: Duration = Duration::from_secs(240);

/// What to run.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The `quorate` binary under test.
    pub quorate_bin: PathBuf,
    /// Seed of the schedule and the clients: the same seed replays the same run.
    pub seed: u64,
    /// How long to inject faults.
    pub duration: Duration,
    /// At most this many steps (the short CI run takes a fixed list).
    pub max_steps: Option<usize>,
    /// When set, exactly these steps in this order instead of a drawn schedule.
    pub steps: Option<Vec<Step>>,
    /// Concurrent clients.
    pub clients: u32,
}

/// One step as it happened.
#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    /// The step.
    pub step: Step,
    /// Seconds since the run's start when it was injected.
    pub at_s: f64,
    /// Seconds from the end of the fault (or of the operation) until every member answered
    /// linearizable reads again, and, after a store fault or a clock skew, the bucket caught up
    /// with the cluster.
    pub heal_s: f64,
}

/// Everything a run produced.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// The run's seed.
    pub seed: u64,
    /// Wall time of the run.
    pub elapsed_s: f64,
    /// Steps injected.
    pub steps: Vec<StepRecord>,
    /// What the checker found.
    pub check: CheckReport,
    /// Anomalies outside the history: watch streams that disagree with the first one or broke
    /// for good, a corrupted backup a restore did not refuse.
    pub other_anomalies: Vec<String>,
    /// Gets that failed (not part of the history).
    pub failed_reads: u64,
    /// The longest time one acknowledged write waited.
    pub longest_write_ms: u64,
    /// Fault kinds this machine could not inject, with why.
    pub unavailable: Vec<String>,
}

impl RunReport {
    /// Whether the run found nothing wrong.
    pub fn passed(&self) -> bool {
        self.check.anomalies.is_empty() && self.other_anomalies.is_empty()
    }
}

/// A run that could not be carried out (not an anomaly: the harness or cluster failed).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A `quorate` command failed.
    #[error(transparent)]
    Command(#[from] crate::cluster::CommandFailed),
    /// The cluster did not heal in time after a step.
    #[error("the cluster did not heal within {HEAL_DEADLINE:?} after {step}")]
    NotHealed { step: String },
    /// A step failed; the cluster's directory (logs, leases, status, data) was copied.
    #[error("step {step}: {error}\nthe cluster's directory is kept in {kept}; log tails:\n{logs}")]
    Failed {
        step: String,
        error: Box<RunError>,
        kept: String,
        logs: String,
    },
    /// Anything else the harness could not do.
    #[error("{0}")]
    Harness(String),
}

/// Where the run's backups go.
#[derive(Clone, Debug)]
pub enum Bucket {
    /// A directory (the Local provider).
    Local,
    /// An S3 server, reached through the fault proxy at `endpoint`.
    S3 { endpoint: String, bucket: String },
}

/// The manifest of the run's cluster: 3 members, a delta snapshot every second, leases renewed
/// every second.
pub fn manifest(replicas: u32, quota: &str, bucket: &Bucket) -> String {
    let store = match bucket {
        Bucket::Local => {
            format!("      provider: Local\n      container: bucket\n      prefix: {CLUSTER}\n")
        }
        Bucket::S3 { endpoint, bucket } => format!(
            "      provider: aws\n      container: {bucket}\n      prefix: {CLUSTER}\n      \
             endpointOverride: {endpoint}\n      secretRef:\n        name: s3-creds\n"
        ),
    };
    format!(
        "apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: {CLUSTER}
  namespace: default
spec:
  replicas: {replicas}
  labels:
    app: {CLUSTER}
  etcd:
    heartbeatDuration: 1s
    quota: {quota}
  backup:
    store:
{store}    deltaSnapshotPeriod: 1s
    fullSnapshotSchedule: \"*/5 * * * *\"
    garbageCollectionPeriod: 60s
"
    )
}

/// Runs the suite once.
pub async fn run(plan: RunPlan) -> Result<RunReport, RunError> {
    let members: Vec<String> = (0..3).map(|i| format!("{CLUSTER}-{i}")).collect();
    let mut unavailable = Vec::new();
    let partitioner = match Partitioner::install(CLUSTER, &members) {
        Ok(p) => Some(p),
        Err(e) => {
            unavailable.push(format!("partitions: {e}"));
            None
        }
    };
    let clock_dir = tempfile::Builder::new()
        .prefix("quorate-chaos-clock-")
        .tempdir()
        .map_err(|e| RunError::Harness(e.to_string()))?;
    let mut env: Vec<(String, String)> = partitioner.iter().map(Partitioner::env).collect();
    env.push((
        "QUORATE_CLOCK_SKEW_DIR".into(),
        clock_dir.path().display().to_string(),
    ));
    let cluster = LocalCluster::new(&plan.quorate_bin, CLUSTER, env)
        .map_err(|e| RunError::Harness(e.to_string()))?;
    let member_dirs: Vec<PathBuf> = members.iter().map(|m| cluster.member_dir(m)).collect();
    let disks = if nix::unistd::Uid::effective().is_root() {
        match SmallDisks::mount(&member_dirs) {
            Ok(d) => Some(d),
            Err(e) => {
                unavailable.push(format!("disk full: {e}"));
                None
            }
        }
    } else {
        unavailable.push("disk full: not root (tmpfs mounts)".into());
        None
    };
    let moto = quorate_testkit::MotoServer::start("chaos-backups");
    let proxy = match &moto {
        Some(moto) => {
            let upstream = moto
                .endpoint
                .trim_start_matches("http://")
                .parse()
                .map_err(|e| RunError::Harness(format!("moto endpoint: {e}")))?;
            Some(
                StoreProxy::start(upstream)
                    .await
                    .map_err(|e| RunError::Harness(format!("store proxy: {e}")))?,
            )
        }
        None => {
            unavailable
                .push("store faults: moto is not installed (scripts/install-deps.sh)".into());
            None
        }
    };
    let bucket = match (&moto, &proxy) {
        (Some(moto), Some(proxy)) => {
            write_s3_secret(&cluster)?;
            Bucket::S3 {
                endpoint: format!("http://{}", proxy.addr),
                bucket: moto.bucket.clone(),
            }
        }
        _ => Bucket::Local,
    };
    let caps = Capabilities {
        partitions: partitioner.is_some(),
        disks: disks.is_some(),
        store: proxy.is_some(),
    };
    let mut quota_flip = false;
    cluster.up(&manifest(1, "8Gi", &bucket))?;
    let endpoints = Arc::new(std::sync::Mutex::new(cluster.endpoints()?));

    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let workload = WorkloadPlan {
        endpoints: endpoints.clone(),
        clients: plan.clients,
        keys: 5,
        op_timeout: Duration::from_secs(5),
        think: Duration::from_millis(20),
        seed: plan.seed,
    };
    let clients: Vec<_> = (0..plan.clients)
        .map(|id| {
            tokio::spawn(run_client(
                workload.clone(),
                id,
                origin,
                stop.clone(),
                paused.clone(),
            ))
        })
        .collect();

    let mut rng = StdRng::seed_from_u64(plan.seed);
    let mut records = Vec::new();
    let mut other_anomalies = Vec::new();
    let mut live_watchers = Vec::new();
    let fixed = plan.steps.clone();
    let mut index = 0;
    loop {
        let step = match &fixed {
            _ if index == 0 => first_step(&mut rng),
            Some(steps) => match steps.get(index - 1) {
                Some(s) => s.clone(),
                None => break,
            },
            None => {
                if origin.elapsed() >= plan.duration
                    || plan.max_steps.is_some_and(|max| index >= max)
                {
                    break;
                }
                next_step(&mut rng, caps)
            }
        };
        index += 1;
        let allowed = match step {
            Step::Partition { .. } => caps.partitions,
            Step::DiskFull { .. } => caps.disks,
            Step::Store { .. } => caps.store,
            _ => true,
        };
        if !allowed {
            eprintln!("[chaos] step {index} left out (not available here): {step}");
            continue;
        }
        let at_s = origin.elapsed().as_secs_f64();
        eprintln!("[chaos] {at_s:7.1}s step {index}: {step}");
        let ports = member_ports(&cluster);
        let ctx = StepContext {
            cluster: &cluster,
            members: &members,
            partitioner: partitioner.as_ref(),
            ports: &ports,
            clock_dir: clock_dir.path(),
            anomalies: &mut other_anomalies,
            paused: &paused,
            bucket: &bucket,
            proxy: proxy.as_ref(),
        };
        if let Step::RollingUpdate = step {
            quota_flip = !quota_flip;
        }
        let healed = async {
            let healed = inject(ctx, &step, quota_flip).await?;
            let now_endpoints = cluster.endpoints()?;
            *endpoints.lock().expect("endpoints") = now_endpoints.clone();
            wait_healthy(&now_endpoints)
                .await
                .map_err(|_| RunError::NotHealed {
                    step: step.to_string(),
                })?;
            Ok((healed, now_endpoints))
        }
        .await;
        let (healed, now_endpoints) = healed.map_err(|e| RunError::Failed {
            step: step.to_string(),
            kept: cluster.preserve(),
            logs: cluster.log_tails(30),
            error: Box::new(e),
        })?;
        let heal_s = healed.elapsed().as_secs_f64();
        eprintln!("[chaos]          healed in {heal_s:.1}s");
        records.push(StepRecord { step, at_s, heal_s });
        if live_watchers.is_empty() {
            // After the scale-out: one watcher per member, through every later fault.
            live_watchers = spawn_live_watchers(&now_endpoints);
        }
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }

    stop.store(true, Ordering::Relaxed);
    let mut history = History::default();
    let mut failed_reads = 0;
    let mut longest_write = Duration::ZERO;
    for client in clients {
        let ClientRecord {
            events,
            failed_reads: f,
            longest_write: w,
        } = client
            .await
            .map_err(|e| RunError::Harness(format!("a client panicked: {e}")))?;
        history.events.extend(events);
        failed_reads += f;
        longest_write = longest_write.max(w);
    }
    let (watched, watch_anomalies) = final_watch(&cluster.endpoints()?, live_watchers).await?;
    other_anomalies.extend(watch_anomalies);
    history.watched = watched;
    let check = checker::check(&history);
    drop(disks);
    drop(cluster);
    Ok(RunReport {
        seed: plan.seed,
        elapsed_s: origin.elapsed().as_secs_f64(),
        steps: records,
        check,
        other_anomalies,
        failed_reads,
        longest_write_ms: longest_write.as_millis() as u64,
        unavailable,
    })
}

/// What a step needs to act on.
struct StepContext<'a> {
    cluster: &'a LocalCluster,
    clock_dir: &'a std::path::Path,
    anomalies: &'a mut Vec<String>,
    members: &'a [String],
    partitioner: Option<&'a Partitioner>,
    ports: &'a BTreeMap<String, MemberPorts>,
    paused: &'a AtomicBool,
    bucket: &'a Bucket,
    proxy: Option<&'a StoreProxy>,
}

impl StepContext<'_> {
    fn pid(&self, member: usize, target: Target) -> Option<i32> {
        let name = &self.members[member];
        match target {
            Target::Etcd => self.cluster.etcd_pid(name),
            Target::Agent => self.cluster.agent_pid(name),
        }
    }

    /// Stops a member (agent and etcd), removes its data and kills it, so its agent restarts
    /// on an empty directory.
    fn wipe(&self, member: usize) {
        let pids = self.member_pids(member);
        for pid in &pids {
            LocalCluster::signal(*pid, Signal::SIGSTOP);
        }
        let data = self.cluster.member_dir(&self.members[member]).join("data");
        let _ = std::fs::remove_dir_all(&data);
        for pid in pids {
            LocalCluster::signal(pid, Signal::SIGKILL);
        }
    }

    fn member_pids(&self, member: usize) -> Vec<i32> {
        [
            self.pid(member, Target::Agent),
            self.pid(member, Target::Etcd),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Carries out `step`, returning once its fault is healed (or its operation done), with the
/// instant the fault itself ended (before any catching up it waited for).
async fn inject(ctx: StepContext<'_>, step: &Step, quota_flip: bool) -> Result<Instant, RunError> {
    let mut ended = None;
    match step {
        Step::ScaleOut { kill_after } => {
            let data = ctx.cluster.member_dir(&ctx.members[1]).join("data");
            let killer = tokio::spawn(kill_etcd_after(data, *kill_after));
            let applied = ctx.cluster.apply(&manifest(3, "8Gi", ctx.bucket));
            killer.abort();
            applied?;
        }
        Step::ClockSkew {
            member,
            skew_s,
            hold,
        } => {
            let file = ctx.clock_dir.join(&ctx.members[*member]);
            std::fs::write(&file, skew_s.to_string())
                .map_err(|e| RunError::Harness(format!("{}: {e}", file.display())))?;
            tokio::time::sleep(*hold).await;
            let _ = std::fs::remove_file(&file);
            ended = Some(Instant::now());
            // Backups go on, whoever's clock is wrong: the bucket's evidence.
            let head = current_revision(&ctx.cluster.endpoints()?)
                .await
                .ok_or_else(|| RunError::Harness("no revision after the clock skew".into()))?;
            bucket_reaches(&ctx, head, Duration::from_secs(120)).await?;
        }
        Step::CorruptBackup => corrupt_backup(ctx).await?,
        Step::Kill { member, target } => {
            if let Some(pid) = ctx.pid(*member, *target) {
                LocalCluster::signal(pid, Signal::SIGKILL);
            }
        }
        Step::Pause {
            member,
            target,
            hold,
        } => {
            if let Some(pid) = ctx.pid(*member, *target) {
                LocalCluster::signal(pid, Signal::SIGSTOP);
                tokio::time::sleep(*hold).await;
                LocalCluster::signal(pid, Signal::SIGCONT);
            }
        }
        Step::CrashAll => {
            ctx.cluster.crash();
            ctx.cluster
                .quorate(&["up", "-d", "-f", &manifest_path(&ctx), "--timeout", "120s"])?;
        }
        Step::PauseSupervisor { hold } => {
            if let Some(pid) = ctx.cluster.supervisor_pid() {
                LocalCluster::signal(pid, Signal::SIGSTOP);
                tokio::time::sleep(*hold).await;
                LocalCluster::signal(pid, Signal::SIGCONT);
            }
        }
        Step::Partition { member, hold } => {
            let partitioner = ctx
                .partitioner
                .ok_or_else(|| RunError::Harness("partitions are not available".into()))?;
            partitioner
                .cut(&ctx.members[*member], ctx.ports)
                .map_err(RunError::Harness)?;
            let cut_off = Instant::now();
            // The fault must be real: the cut member stops serving linearizable reads.
            let endpoint = ctx.cluster.endpoints()?[*member].clone();
            let isolated = async {
                while answers_linearizable(&endpoint).await {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            };
            let proved = tokio::time::timeout(Duration::from_secs(15), isolated).await;
            tokio::time::sleep(hold.saturating_sub(cut_off.elapsed())).await;
            partitioner.heal().map_err(RunError::Harness)?;
            if proved.is_err() {
                return Err(RunError::Harness(format!(
                    "member {member} still served linearizable reads 15 s after it was cut off: \
                     the partition did not take effect"
                )));
            }
        }
        Step::Store { fault, hold } => {
            let proxy = ctx
                .proxy
                .ok_or_else(|| RunError::Harness("the store proxy is not running".into()))?;
            proxy.set(*fault);
            tokio::time::sleep(*hold).await;
            proxy.set(StoreFault::None);
            ended = Some(Instant::now());
            // Healed means backups caught up again, on the bucket's own evidence.
            let head = current_revision(&ctx.cluster.endpoints()?)
                .await
                .ok_or_else(|| RunError::Harness("no revision after the store fault".into()))?;
            bucket_reaches(&ctx, head, Duration::from_secs(120)).await?;
        }
        Step::DiskFull { member, hold } => {
            let dir = ctx.cluster.member_dir(&ctx.members[*member]);
            SmallDisks::fill(&dir).map_err(|e| RunError::Harness(format!("fill: {e}")))?;
            tokio::time::sleep(*hold).await;
            SmallDisks::free(&dir);
        }
        Step::SlowRestart {
            stopped,
            wiped,
            hold,
        } => {
            let held = ctx.member_pids(*stopped);
            for pid in &held {
                LocalCluster::signal(*pid, Signal::SIGSTOP);
            }
            ctx.wipe(*wiped);
            tokio::time::sleep(*hold).await;
            for pid in held {
                LocalCluster::signal(pid, Signal::SIGCONT);
            }
        }
        Step::QuorumLoss { survivor } => {
            for member in 0..3 {
                if member != *survivor {
                    ctx.wipe(member);
                }
            }
        }
        Step::TotalLoss => {
            // Evidence first: the bucket must hold every acknowledged write, so the clients
            // pause until it does (a total loss loses what was never backed up, by design).
            ctx.paused.store(true, Ordering::Relaxed);
            let result = total_loss(&ctx, true).await;
            ctx.paused.store(false, Ordering::Relaxed);
            result?;
        }
        Step::TotalLossUnbacked => total_loss(&ctx, false).await?,
        Step::BackupLeaderChange => {
            if let Some(leader) = leader_index(&ctx).await
                && let Some(pid) = ctx.pid(leader, Target::Etcd)
            {
                LocalCluster::signal(pid, Signal::SIGKILL);
            }
        }
        Step::RollingUpdate => {
            let quota = if quota_flip { "9Gi" } else { "8Gi" };
            ctx.cluster.apply(&manifest(3, quota, ctx.bucket))?;
        }
    }
    Ok(ended.unwrap_or_else(Instant::now))
}

/// Kills the etcd whose data directory is `data` once `after` has passed and it runs.
async fn kill_etcd_after(data: PathBuf, after: Duration) {
    tokio::time::sleep(after).await;
    let needle = format!("--data-dir={}", data.display());
    loop {
        if let Some(pid) = crate::cluster::find_process(&["etcd", &needle]) {
            LocalCluster::signal(pid, Signal::SIGKILL);
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Corrupts the newest delta; a restore while it is corrupt must refuse and name it.
async fn corrupt_backup(ctx: StepContext<'_>) -> Result<(), RunError> {
    let manifest = std::fs::read_to_string(manifest_path(&ctx))
        .map_err(|e| RunError::Harness(format!("read the manifest: {e}")))?;
    let secret_dir = ctx.cluster.dir().join("secrets/s3-creds");
    let options = quorate_backup::store::StoreOptions {
        local_root: ctx.cluster.dir().join("backups"),
        secret_dir: secret_dir.is_dir().then_some(secret_dir),
    };
    let corrupted = crate::faults::bucket::corrupt_newest_delta(&manifest, &options)
        .await
        .map_err(RunError::Harness)?;
    let scratch = tempfile::tempdir().map_err(|e| RunError::Harness(e.to_string()))?;
    let target = scratch.path().join("data");
    let restore = ctx.cluster.quorate(&[
        "restore",
        "-f",
        &manifest_path(&ctx),
        "--data-dir",
        &target.display().to_string(),
    ]);
    let name = corrupted
        .snapshot
        .path
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    match restore {
        Ok(_) => ctx.anomalies.push(format!(
            "a restore through the corrupted {name} succeeded instead of refusing it"
        )),
        Err(e) if !e.to_string().contains(&name) => ctx.anomalies.push(format!(
            "a restore through the corrupted {name} failed without naming it: {e}"
        )),
        Err(_) => {}
    }
    corrupted.heal().await.map_err(RunError::Harness)
}

fn manifest_path(ctx: &StepContext<'_>) -> String {
    ctx.cluster.dir().join("etcd.yaml").display().to_string()
}

/// Crashes every member, wipes their data and starts the cluster again (which restores from
/// the bucket); first waits until the bucket holds the cluster's revision when `backed_up`.
async fn total_loss(ctx: &StepContext<'_>, backed_up: bool) -> Result<(), RunError> {
    if backed_up {
        tokio::time::sleep(Duration::from_secs(6)).await; // the clients' last writes return
        let endpoints = ctx.cluster.endpoints()?;
        let head = current_revision(&endpoints)
            .await
            .ok_or_else(|| RunError::Harness("no revision before the total loss".into()))?;
        bucket_reaches(ctx, head, Duration::from_secs(60)).await?;
    }
    ctx.cluster.crash();
    for member in ctx.members {
        let _ = std::fs::remove_dir_all(ctx.cluster.member_dir(member).join("data"));
    }
    let up = ctx
        .cluster
        .quorate(&["up", "-d", "-f", &manifest_path(ctx), "--timeout", "180s"]);
    if let Err(e) = &up {
        let ss = std::process::Command::new("ss").arg("-tanp").output();
        eprintln!(
            "[chaos] up failed: {e}\n{}",
            ss.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        );
    }
    up?;
    Ok(())
}

/// Waits until the bucket holds revision `head`.
async fn bucket_reaches(
    ctx: &StepContext<'_>,
    head: i64,
    within: Duration,
) -> Result<(), RunError> {
    let deadline = Instant::now() + within;
    loop {
        let listed = ctx.cluster.quorate(&["backups", "list", CLUSTER])?;
        if newest_backed_up(&listed) >= head {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RunError::Harness(format!(
                "the bucket did not reach revision {head} within {within:?}:\n{listed}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The S3 server's credentials where the local cluster reads its store Secret.
fn write_s3_secret(cluster: &LocalCluster) -> Result<(), RunError> {
    let dir = cluster.dir().join("secrets/s3-creds");
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        for (k, v) in [
            ("accessKeyID", "testing"),
            ("secretAccessKey", "testing"),
            ("region", "us-east-1"),
        ] {
            std::fs::write(dir.join(k), v)?;
        }
        Ok(())
    };
    write().map_err(|e| RunError::Harness(format!("{}: {e}", dir.display())))
}

/// The highest revision any listed snapshot covers.
fn newest_backed_up(listing: &str) -> i64 {
    listing
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2)?.parse::<i64>().ok())
        .max()
        .unwrap_or(0)
}

async fn current_revision(endpoints: &[String]) -> Option<i64> {
    let mut client = etcd_client::Client::connect(endpoints, None).await.ok()?;
    let r = client.get("chaos-revision-probe", None).await.ok()?;
    r.header().map(|h| h.revision())
}

/// Index of the member whose etcd leads.
async fn leader_index(ctx: &StepContext<'_>) -> Option<usize> {
    let endpoints = ctx.cluster.endpoints().ok()?;
    for (i, url) in endpoints.iter().enumerate() {
        let Ok(mut client) = etcd_client::Client::connect([url.as_str()], None).await else {
            continue;
        };
        if let Ok(status) = client.status().await
            && status.leader() == status.header().map_or(0, |h| h.member_id())
        {
            return Some(i);
        }
    }
    None
}

/// Waits until every member answers a linearizable read on its own.
async fn wait_healthy(endpoints: &[String]) -> Result<(), ()> {
    let deadline = Instant::now() + HEAL_DEADLINE;
    'poll: loop {
        if Instant::now() > deadline {
            return Err(());
        }
        for url in endpoints {
            if !answers_linearizable(url).await {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue 'poll;
            }
        }
        return Ok(());
    }
}

/// Whether the member at `url` answers a linearizable read within 2 s.
async fn answers_linearizable(url: &str) -> bool {
    tokio::time::timeout(Duration::from_secs(2), async {
        let mut client = etcd_client::Client::connect([url], None).await?;
        client.get("chaos-health", None).await
    })
    .await
    .is_ok_and(|r| r.is_ok())
}

/// The key the run writes last; every watch ends when it sees it.
fn end_key() -> String {
    format!("{PREFIX}end")
}

/// Watchers that run through every fault, one per member, from revision 1.
fn spawn_live_watchers(endpoints: &[String]) -> Vec<(String, JoinHandle<WatchRecord>)> {
    endpoints
        .iter()
        .map(|url| {
            let watch = watch_until(url.clone(), end_key(), Duration::from_secs(10));
            (format!("the live watch on {url}"), tokio::spawn(watch))
        })
        .collect()
}

/// Writes the end marker, and watches every member once more from revision 1 to it; returns
/// the first complete record (minus the marker) and every way the others, and the live
/// watchers, differ from it.
async fn final_watch(
    endpoints: &[String],
    live: Vec<(String, JoinHandle<WatchRecord>)>,
) -> Result<(Vec<crate::history::WatchChange>, Vec<String>), RunError> {
    let end_key = end_key();
    let mut client = etcd_client::Client::connect(endpoints, None)
        .await
        .map_err(|e| RunError::Harness(format!("connect for the end marker: {e}")))?;
    client
        .put(end_key.as_str(), "end", None)
        .await
        .map_err(|e| RunError::Harness(format!("write the end marker: {e}")))?;
    let replays = endpoints.iter().map(|url| {
        let watch = watch_until(url.clone(), end_key.clone(), Duration::from_secs(10));
        async move {
            let record = tokio::time::timeout(Duration::from_secs(120), watch).await;
            (format!("the replay watch on {url}"), record.ok())
        }
    });
    let live = live.into_iter().map(|(what, handle)| async move {
        let record = tokio::time::timeout(Duration::from_secs(120), handle).await;
        (what, record.ok().and_then(Result::ok))
    });
    let mut records = futures::future::join_all(replays).await;
    records.extend(futures::future::join_all(live).await);
    let mut anomalies = Vec::new();
    let mut reference: Option<Vec<crate::history::WatchChange>> = None;
    for (what, record) in records {
        let Some(record) = record else {
            anomalies.push(format!("{what} never reached the end marker"));
            continue;
        };
        if let Some(at) = record.compacted_at {
            anomalies.push(format!(
                "{what} could not resume: history compacted at {at}"
            ));
            continue;
        }
        let mut changes = record.changes;
        changes.retain(|c| c.key != end_key);
        match &reference {
            None => reference = Some(changes),
            Some(first) if *first != changes => {
                let at = first
                    .iter()
                    .zip(&changes)
                    .position(|(a, b)| a != b)
                    .unwrap_or(first.len().min(changes.len()));
                anomalies.push(format!(
                    "{what} differs from the first at change {at}: {:?} vs {:?}",
                    changes.get(at),
                    first.get(at)
                ));
            }
            Some(_) => {}
        }
    }
    let reference =
        reference.ok_or_else(|| RunError::Harness("no watch reached the end marker".into()))?;
    Ok((reference, anomalies))
}

/// Every member's ports, from the cluster record.
fn member_ports(cluster: &LocalCluster) -> BTreeMap<String, MemberPorts> {
    let record: serde_json::Value = std::fs::read_to_string(cluster.dir().join("cluster.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    record["ports"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(member, p)| {
            let port = |k: &str| p[k].as_u64().and_then(|v| u16::try_from(v).ok());
            Some((
                member.clone(),
                [port("client")?, port("peer")?, port("agent")?],
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_backed_up_revision_is_read_from_the_listing() {
        let listing = "s3://chaos-backups/chaos at http://127.0.0.1:4000
KIND  START  LAST  SIZE  CREATED               OBJECT
Full  0      1     120   2026-11-25T12:00:00Z  chaos/v2/Full-00000000-00000001-1795000000
Incr  2      57    900   2026-11-25T12:00:01Z  chaos/v2/Incr-00000002-00000057-1795000001
Incr  58     63    90    2026-11-25T12:00:02Z  chaos/v2/Incr-00000058-00000063-1795000002
";
        assert_eq!(newest_backed_up(listing), 63);
        assert_eq!(newest_backed_up("(no snapshots)"), 0);
    }
}
