//! One run of the suite: a 3-member local cluster with backups, the clients and watchers
//! running throughout, a seeded schedule of faults and operations, each healed and timed, then
//! the history checked.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;

use crate::checker::{self, CheckReport};
use crate::cluster::LocalCluster;
use crate::faults::disk::SmallDisks;
use crate::faults::network::Partitioner;
use crate::faults::store_proxy::StoreProxy;
use crate::faults::{Capabilities, Step, first_step, next_step};
use crate::history::History;
use crate::second_checker::{self, SecondVerdict, SecondVerdictKind};
use crate::steps::{StepContext, inject, wait_healthy, write_s3_secret};
use crate::watch::{final_watch, spawn_live_watchers};
use crate::workload::{ClientRecord, WorkloadPlan, run_client};

/// Cluster name of every run.
pub(crate) const CLUSTER: &str = "chaos";
/// How long the cluster may take to heal after a step before the run fails.
pub(crate) const HEAL_DEADLINE: Duration = Duration::from_secs(240);

/// What to run.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The `quorate` binary under test.
    pub quorate_bin: PathBuf,
    /// Seed of the schedule and the clients: the same seed replays the same run.
    pub seed: u64,
    /// The table a drawn schedule comes from (`faults::LATEST_DRAW` for new runs; a recorded
    /// seed replays with the table it was recorded with).
    pub draw: u32,
    /// How long to inject faults.
    pub duration: Duration,
    /// At most this many steps (the short CI run takes a fixed list).
    pub max_steps: Option<usize>,
    /// When set, exactly these steps in this order instead of a drawn schedule.
    pub steps: Option<Vec<Step>>,
    /// Concurrent clients.
    pub clients: u32,
    /// Where to write the run's history (JSON lines, `docs/reference/history-format.md`).
    pub history_file: Option<PathBuf>,
    /// The second checker (`tools/history-check`) to run on the history file; needs
    /// `history_file`.
    pub history_check: Option<PathBuf>,
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
    /// The table its schedule was drawn from.
    pub draw: u32,
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
    /// The history file written, if asked for.
    pub history_file: Option<PathBuf>,
    /// The second checker's verdict, if it ran.
    pub second: Option<SecondVerdict>,
    /// What the lease check found (its anomalies are in `other_anomalies` too).
    pub leases: crate::leases::LeaseReport,
}

impl RunReport {
    /// Whether the run found nothing wrong: quorate's checker passed, nothing outside the
    /// history went wrong, and the second checker, if it ran, found the history linearizable
    /// (so the two agree).
    pub fn passed(&self) -> bool {
        self.check.anomalies.is_empty()
            && self.other_anomalies.is_empty()
            && self
                .second
                .as_ref()
                .is_none_or(|s| s.kind == SecondVerdictKind::Linearizable)
    }

    /// Whether the two checkers disagree (always a failure: one of them is wrong).
    pub fn checkers_disagree(&self) -> bool {
        self.second
            .as_ref()
            .is_some_and(|s| !s.agrees_with(self.check.passed()))
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
        keys: 5,
        op_timeout: Duration::from_secs(5),
        think: Duration::from_millis(20),
        seed: plan.seed,
    };
    let lease_client = tokio::spawn(crate::leases::run_lease_client(
        workload.clone(),
        plan.clients,
        origin,
        stop.clone(),
        paused.clone(),
    ));
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
                next_step(&mut rng, caps, plan.draw)
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
        let ports = cluster.member_ports();
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
    history.leases = lease_client
        .await
        .map_err(|e| RunError::Harness(format!("the lease client panicked: {e}")))?;
    let leases = crate::leases::check_leases(&history.leases);
    other_anomalies.extend(leases.anomalies.iter().cloned());
    let (watched, watch_anomalies) = final_watch(&cluster.endpoints()?, live_watchers).await?;
    other_anomalies.extend(watch_anomalies);
    history.watched = watched;
    let check = checker::check(&history);
    let mut second = None;
    if let Some(path) = &plan.history_file {
        std::fs::write(path, history.to_jsonl()).map_err(|e| {
            RunError::Harness(format!(
                "cannot write the history to {}: {e}",
                path.display()
            ))
        })?;
        if let Some(binary) = &plan.history_check {
            second = Some(second_checker::run(binary, path));
        }
    }
    drop(disks);
    drop(cluster);
    Ok(RunReport {
        seed: plan.seed,
        draw: plan.draw,
        elapsed_s: origin.elapsed().as_secs_f64(),
        steps: records,
        check,
        other_anomalies,
        failed_reads,
        longest_write_ms: longest_write.as_millis() as u64,
        unavailable,
        history_file: plan.history_file.clone(),
        second,
        leases,
    })
}
