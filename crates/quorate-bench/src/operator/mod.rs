//! `quorate-bench operator`: `quorate operator` against a real kube-apiserver (v1.37.2, the
//! testkit's), with many `Etcd` objects created at once:
//!
//! 1. **baseline**, on a fresh API server with no operator: the same objects created the same
//!    way, and the requests of the operator's first pass over each (finalizer, ConfigMap read,
//!    13 server-side applies, event, status) replayed by a plain loop of as many workers as
//!    the operator has — the API server's cost of the work itself;
//! 2. **operator**, on another fresh API server: the real binary as its own process, default
//!    settings but the worker count; time from the first create until every `Etcd` is seen
//!    reconciled once (one watch, the same in both runs); then, with the benchmark quiet, the
//!    requests the operator makes per minute and cluster in steady state (the API server's
//!    `apiserver_request_total`, less its own background measured before the operator
//!    started), its passes from its own `/metrics`, and its resident memory throughout.

mod metrics;
mod process;
mod report;
mod results;
mod workload;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use kube::Client;
use quorate_api::Etcd;
use quorate_testkit::{KubeApiServer, install_etcd_crd};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::{BenchError, Result};
use crate::report::MachineFacts;
use metrics::{OperatorCounters, delta, parse_operator};
use process::OperatorGroup;
use results::{
    BaselineRun, Convergence, OperatorRun, Phase, Results, Round, Settings, median_round,
};
use workload::{Cached, ConvergenceWatch, Replay};

/// Options of `quorate-bench operator`.
#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// `Etcd` objects to create.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    clusters: u64,
    /// Namespaces they are spread over.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    namespaces: u64,
    /// The operator's `--etcd-workers`; with several (comma-separated), one baseline and one
    /// operator run each, the first being the headline.
    #[arg(long, value_delimiter = ',', default_value = "3",
          value_parser = clap::value_parser!(u16).range(1..))]
    workers: Vec<u16>,
    /// Rounds of the headline comparison (the first worker count), each a baseline then an
    /// operator run; the report's headline is the round with the median ratio.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    rounds: u32,
    /// Operator processes, each with `--shard I/REPLICAS` (one share of the `Etcd`s each);
    /// the baseline then gets REPLICAS × workers plain workers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    replicas: u32,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=256))]
    create_concurrency: u64,
    /// Minutes of the steady-state window.
    #[arg(long, default_value_t = 2.0)]
    steady_minutes: f64,
    /// Seconds from the last reconcile to the steady-state window, so the follow-up passes
    /// the first ones trigger are over.
    #[arg(long, default_value_t = 30)]
    settle_seconds: u64,
    /// Seconds the API server is watched alone before the operator starts; its own requests
    /// per minute are subtracted from the steady-state counts.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    background_seconds: u64,
    /// Give up waiting for every `Etcd` to be reconciled after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
    /// The quorate binary [default: `quorate` next to this executable].
    #[arg(long)]
    quorate: Option<PathBuf>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<PathBuf>,
}

/// The Service IP range the benchmark's API servers get: room for a ClusterIP per client
/// Service of every cluster (the testkit's /24 holds 254).
pub const SERVICE_CIDR: &str = "10.0.0.0/16";

/// Points the testkit at a `kube-apiserver` wrapper that runs the real binary with the
/// testkit's arguments plus `--service-cluster-ip-range=`[`SERVICE_CIDR`] (the last value of
/// a flag wins), next to a link to the real `kubectl`, by setting `QUORATE_K8S_HOME` to a
/// temporary directory, which the caller keeps for the run. The testkit's range, a /24, has
/// too few addresses for 500 client Services.
///
/// Call it before any other thread starts: it changes the process environment.
pub fn wide_service_range() -> Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let real = quorate_testkit::k8s_bin_dir();
    let apiserver = real.join("kube-apiserver");
    if !apiserver.is_file() {
        return Err(BenchError::failed(format!(
            "{} does not exist: run scripts/install-deps.sh once to build kube-apiserver v1.37.2",
            apiserver.display()
        )));
    }
    let home = tempfile::Builder::new()
        .prefix("quorate-bench-k8s-")
        .tempdir()
        .map_err(BenchError::io(
            "create a temporary directory in",
            &std::env::temp_dir(),
        ))?;
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).map_err(BenchError::io("create", &bin))?;
    let wrapper = bin.join("kube-apiserver");
    let script = format!(
        "#!/bin/sh\nexec '{}' \"$@\" --service-cluster-ip-range={SERVICE_CIDR}\n",
        apiserver.display()
    );
    std::fs::write(&wrapper, script).map_err(BenchError::io("write", &wrapper))?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
        .map_err(BenchError::io("make executable", &wrapper))?;
    let kubectl = bin.join("kubectl");
    std::os::unix::fs::symlink(real.join("kubectl"), &kubectl)
        .map_err(BenchError::io("link", &kubectl))?;
    // SAFETY: called from `main` before the runtime or any other thread exists, so nothing
    // reads the environment concurrently.
    unsafe {
        std::env::set_var(quorate_testkit::kube_apiserver::K8S_HOME_ENV, home.path());
    }
    Ok(home)
}

/// Runs the benchmark and prints (and optionally writes) the report.
pub async fn run(args: OperatorArgs) -> Result<()> {
    let quorate = match &args.quorate {
        Some(path) => path.clone(),
        None => crate::default_quorate()?,
    };
    if !quorate.is_file() {
        return Err(BenchError::failed(format!(
            "no quorate binary at {}; build it with `cargo build --release -p quorate -p \
             quorate-bench` or pass --quorate PATH",
            quorate.display()
        )));
    }
    if !args.steady_minutes.is_finite() || args.steady_minutes <= 0.0 {
        return Err(BenchError::failed("--steady-minutes must be above 0"));
    }
    let mut machine = probe_machine(&quorate).await;
    let settings = Settings {
        clusters: args.clusters as usize,
        namespaces: args.namespaces as usize,
        create_concurrency: args.create_concurrency as usize,
        steady: Duration::from_secs_f64(args.steady_minutes * 60.0),
        settle: Duration::from_secs(args.settle_seconds),
        background: Duration::from_secs(args.background_seconds),
        timeout: Duration::from_secs(args.timeout_seconds),
    };
    let etcds = workload::clusters(settings.clusters, settings.namespaces)?;
    let dir = tempfile::Builder::new()
        .prefix("quorate-bench-operator-")
        .tempdir()
        .map_err(BenchError::io(
            "create a temporary directory in",
            &std::env::temp_dir(),
        ))?;

    let mut baselines = Vec::new();
    let mut runs = Vec::new();
    let mut rounds = Vec::new();
    for (i, &workers) in args.workers.iter().enumerate() {
        let plain = workers as usize * args.replicas as usize;
        let count = if i == 0 { args.rounds } else { 1 };
        let mut pairs = Vec::new();
        for round in 1..=count {
            eprintln!(
                "round {round} of {count}, baseline, {plain} workers: {} Etcds, first passes \
                 replayed by a plain client ...",
                settings.clusters
            );
            let baseline = baseline_run(&settings, &etcds, plain).await?;
            eprintln!("  {}", baseline.convergence.progress_line());
            eprintln!(
                "round {round} of {count}, operator, {} × {workers} workers: {} Etcds ...",
                args.replicas, settings.clusters
            );
            let run = operator_run(
                &settings,
                &etcds,
                &quorate,
                workers,
                args.replicas,
                dir.path(),
            )
            .await?;
            pairs.push((baseline, run));
        }
        let summary: Vec<Round> = pairs
            .iter()
            .map(|(baseline, run)| Round {
                baseline: baseline.convergence.converged,
                operator: run.convergence.converged,
                peak_kib: run.peak_kib(),
            })
            .collect();
        let (baseline, run) = pairs.swap_remove(median_round(&summary));
        if i == 0 {
            rounds = summary;
        }
        baselines.push(baseline);
        runs.push(run);
    }
    machine.finish();

    let results = Results {
        settings,
        machine,
        baselines,
        runs,
        rounds,
    };
    crate::publish_report(&report::render(&results), args.output.as_deref())
}

/// A fresh API server with the CRD and the namespaces, and a client of it.
async fn prepare_server(settings: &Settings) -> Result<(KubeApiServer, Client)> {
    let server = KubeApiServer::start()
        .await
        .map_err(|e| BenchError::failed(format!("starting kube-apiserver: {e}")))?;
    let client = server
        .client()
        .await
        .map_err(|e| BenchError::failed(e.to_string()))?;
    // The testkit's helper panics on failure (it is test setup): turn that into an error.
    let crd_client = client.clone();
    tokio::spawn(async move { install_etcd_crd(&crd_client).await })
        .await
        .map_err(|e| BenchError::failed(format!("installing the Etcd CRD: {e}")))?;
    workload::create_namespaces(&client, settings.namespaces).await?;
    Ok((server, client))
}

/// CPU time of `pid` now.
fn cpu(pid: u32) -> Option<Duration> {
    crate::backup::cpu_time(Some(pid))
}

/// CPU time of all `pids` now.
fn cpu_all(pids: &[u32]) -> Option<Duration> {
    pids.iter().map(|&pid| cpu(pid)).sum()
}

fn cpu_between(before: Option<Duration>, after: Option<Duration>) -> Option<Duration> {
    Some(after?.saturating_sub(before?))
}

/// Creates every `Etcd` from `t0` and waits, with `watch`, until all are reconciled; `created`
/// receives each created object when given.
async fn create_and_converge(
    client: &Client,
    settings: &Settings,
    etcds: &[Etcd],
    mut watch: ConvergenceWatch,
    created: Option<mpsc::UnboundedSender<Etcd>>,
) -> Result<Convergence> {
    let t0 = Instant::now();
    let made =
        workload::create_all(client, etcds, settings.create_concurrency, t0, created).await?;
    eprintln!(
        "  {} created in {:.2} s; waiting for all to be reconciled ...",
        made.at.len(),
        made.elapsed.as_secs_f64()
    );
    let all = watch.wait_for(etcds.len(), settings.timeout).await;
    if !all {
        eprintln!(
            "  only {} of {} reconciled after {:?}",
            watch.count(),
            etcds.len(),
            settings.timeout
        );
    }
    let (done, watch_errors) = watch.stop();
    Ok(Convergence::new(
        t0,
        &made,
        &done,
        etcds.len(),
        watch_errors,
    ))
}

async fn baseline_run(settings: &Settings, etcds: &[Etcd], workers: usize) -> Result<BaselineRun> {
    let (server, client) = prepare_server(settings).await?;
    let (apiserver_pid, etcd_pid) = server.pids();
    let watch = ConvergenceWatch::start(&client).await?;
    let before = workload::apiserver_requests(&client).await?;
    let cpu_before = (cpu(apiserver_pid), cpu(etcd_pid));
    let (tx, rx) = mpsc::unbounded_channel();
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
    let replay = std::sync::Arc::new(Replay::new(client.clone()));
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let (rx, replay) = (rx.clone(), replay.clone());
        tasks.spawn(async move {
            loop {
                let next = rx.lock().await.recv().await;
                let Some(etcd) = next else {
                    return Ok::<_, BenchError>(());
                };
                replay.first_pass(etcd).await?;
            }
        });
    }
    // A worker that fails stops the run at once rather than at the convergence timeout.
    let first_failure = async {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return e,
                Err(e) => return BenchError::failed(format!("a baseline worker panicked: {e}")),
            }
        }
        std::future::pending().await
    };
    let convergence = tokio::select! {
        convergence = create_and_converge(&client, settings, etcds, watch, Some(tx)) => convergence?,
        failure = first_failure => return Err(failure),
    };
    let after = workload::apiserver_requests(&client).await?;
    let cpu_after = (cpu(apiserver_pid), cpu(etcd_pid));
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| BenchError::failed(format!("a baseline worker panicked: {e}")))??;
    }
    let components = workload::count_components(&client, etcds.len()).await?;
    drop(server);
    Ok(BaselineRun {
        workers,
        convergence,
        burst: delta(&before, &after),
        apiserver_cpu_burst: cpu_between(cpu_before.0, cpu_after.0),
        etcd_cpu_burst: cpu_between(cpu_before.1, cpu_after.1),
        components,
    })
}

async fn operator_metrics(operator: &OperatorGroup) -> Result<OperatorCounters> {
    Ok(parse_operator(&operator.metrics().await?))
}

/// Sleeps `duration` without a single API request, checking the operator is alive.
async fn quiet(operator: &mut OperatorGroup, duration: Duration) -> Result<()> {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tokio::time::sleep((end - Instant::now()).min(Duration::from_secs(1))).await;
        operator.check_running()?;
    }
    Ok(())
}

async fn operator_run(
    settings: &Settings,
    etcds: &[Etcd],
    quorate: &Path,
    workers: u16,
    replicas: u32,
    dir: &Path,
) -> Result<OperatorRun> {
    let (server, client) = prepare_server(settings).await?;
    let (apiserver_pid, etcd_pid) = server.pids();

    eprintln!(
        "  the API server alone for {} s ...",
        settings.background.as_secs()
    );
    let b0 = workload::apiserver_requests(&client).await?;
    tokio::time::sleep(settings.background).await;
    let b1 = workload::apiserver_requests(&client).await?;
    let background = Phase {
        requests: delta(&b0, &b1),
        elapsed: settings.background,
    };

    let mut operator =
        OperatorGroup::start(quorate, server.kubeconfig(), workers, replicas, dir).await?;
    let pids = operator.pids();
    // Its caches list and start watching; then it idles with nothing to reconcile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    operator.check_running()?;
    let rss_idle_kib = pids
        .iter()
        .filter_map(|&pid| process::read_status(pid).and_then(|s| s.rss_kib))
        .max()
        .unwrap_or(0);
    eprintln!(
        "  operator pid(s) {pids:?} idle at {:.1} MiB",
        rss_idle_kib as f64 / 1024.0
    );

    let watch = ConvergenceWatch::start(&client).await?;
    let r0 = workload::apiserver_requests(&client).await?;
    let m0 = operator_metrics(&operator).await?;
    let cpu0 = (cpu_all(&pids), cpu(apiserver_pid), cpu(etcd_pid));
    let convergence = create_and_converge(&client, settings, etcds, watch, None).await?;
    let r1 = workload::apiserver_requests(&client).await?;
    let m1 = operator_metrics(&operator).await?;
    let cpu1 = (cpu_all(&pids), cpu(apiserver_pid), cpu(etcd_pid));
    let rss_converged = operator.rss();
    eprintln!("  {}", convergence.progress_line());
    operator.check_running()?;

    eprintln!(
        "  settling {} s, then {:.1} min of steady state with the benchmark quiet ...",
        settings.settle.as_secs(),
        settings.steady.as_secs_f64() / 60.0
    );
    quiet(&mut operator, settings.settle).await?;
    let r2 = workload::apiserver_requests(&client).await?;
    let m2 = operator_metrics(&operator).await?;
    let cpu2 = (cpu_all(&pids), cpu(apiserver_pid), cpu(etcd_pid));
    let steady_start = Instant::now();
    quiet(&mut operator, settings.steady).await?;
    let r3 = workload::apiserver_requests(&client).await?;
    let steady_elapsed = steady_start.elapsed();
    let m3 = operator_metrics(&operator).await?;
    let cpu3 = (cpu_all(&pids), cpu(apiserver_pid), cpu(etcd_pid));
    let rss_steady_end_kib = operator.rss().last_kib;

    // What the operator caches, as the API server serves it (after the window).
    let cached = cached_sizes(&client).await?;
    let components = workload::count_components(&client, etcds.len()).await?;
    let logs = operator.logs();
    let (memory, exit) = tokio::task::block_in_place(|| operator.stop());
    drop(server);
    let run = OperatorRun {
        workers,
        replicas,
        convergence,
        background,
        burst: delta(&r0, &r1),
        burst_passes: m1.since(&m0),
        settle: Phase {
            requests: delta(&r1, &r2),
            elapsed: settings.settle,
        },
        settle_passes: m2.since(&m1),
        steady: Phase {
            requests: delta(&r2, &r3),
            elapsed: steady_elapsed,
        },
        steady_passes: m3.since(&m2),
        rss_idle_kib,
        rss_converged_kib: rss_converged.last_kib,
        rss_peak_burst_kib: rss_converged.peak_kib,
        rss_steady_end_kib,
        memory,
        cpu_burst: cpu_between(cpu0.0, cpu1.0),
        cpu_steady: cpu_between(cpu2.0, cpu3.0),
        apiserver_cpu_burst: cpu_between(cpu0.1, cpu1.1),
        apiserver_cpu_steady: cpu_between(cpu2.1, cpu3.1),
        etcd_cpu_burst: cpu_between(cpu0.2, cpu1.2),
        etcd_cpu_steady: cpu_between(cpu2.2, cpu3.2),
        cached,
        components,
        log_warnings: process::log_warnings(&logs),
        exit,
    };
    eprintln!("  {}", run.progress_line(settings.clusters));
    Ok(run)
}

/// The operator's cached kinds as listed now, and their size once deserialized.
async fn cached_sizes(client: &Client) -> Result<Vec<Cached>> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Pod;
    use quorate_operator::replay::trim;
    let kinds: [(&str, &str, bool, HeapOf); 4] = [
        ("etcds", workload::ETCDS_PATH, false, |text| {
            workload::heap_of_list::<Etcd>(text, trim::etcd)
        }),
        ("statefulsets", "/apis/apps/v1/statefulsets", true, |text| {
            workload::heap_of_list::<StatefulSet>(text, trim::statefulset)
        }),
        (
            "leases",
            "/apis/coordination.k8s.io/v1/leases",
            true,
            |text| workload::heap_of_list::<Lease>(text, trim::lease),
        ),
        ("pods", workload::PODS_PATH, true, |text| {
            workload::heap_of_list::<Pod>(text, trim::pod)
        }),
    ];
    let mut out = Vec::new();
    for (what, path, managed, heap_of) in kinds {
        let text = workload::list_text(client, path, managed).await?;
        let listed = workload::listed(what, &text)?;
        let (heap, heap_cached) = tokio::task::block_in_place(|| heap_of(&text))?;
        out.push(Cached {
            listed,
            heap,
            heap_cached,
        });
    }
    Ok(out)
}

/// Sizes a JSON list once deserialized: (as served, as the operator caches it).
type HeapOf = fn(&str) -> Result<(u64, u64)>;

/// What the operator report says of the machine: the API server's and quorate's versions
/// beside the facts of every run.
async fn probe_machine(quorate: &Path) -> MachineFacts {
    let apiserver = match quorate_testkit::kube_apiserver::kube_apiserver_binary() {
        Ok(bin) => crate::version_line(&bin).await,
        Err(e) => format!("unknown ({e})"),
    };
    MachineFacts {
        apiserver_version: Some(apiserver),
        quorate: Some(crate::quorate_binary(quorate).await),
        ..MachineFacts::at_start()
    }
}
