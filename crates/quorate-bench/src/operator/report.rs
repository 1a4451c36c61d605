//! Results of `quorate-bench operator` and its markdown report: the headline against the
//! targets, the reconcile of the new clusters next to the baseline, the steady state by verb
//! and resource, memory, and the machine.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::metrics::{
    OperatorCounters, RequestCounts, by_verb_resource, failures, operator_share, resource_total,
};
use super::process::Memory;
use super::workload::{Cached, Created, Listed};

/// Target from the issue: every `Etcd` reconciled once within this time of the first create.
pub const TARGET_CONVERGENCE: Duration = Duration::from_secs(60);
/// Target from the issue: the operator's peak resident memory stays under this.
pub const TARGET_PEAK_RSS_KIB: u64 = 64 * 1024;

/// How the runs were set up.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `Etcd` objects created.
    pub clusters: usize,
    /// Namespaces they are spread over.
    pub namespaces: usize,
    /// Creates in flight at once.
    pub create_concurrency: usize,
    /// Length of the steady-state window.
    pub steady: Duration,
    /// Pause between the last reconcile and the window.
    pub settle: Duration,
    /// Length of the API server's background measurement.
    pub background: Duration,
    /// Longest wait for all to be reconciled.
    pub timeout: Duration,
}

/// Where the benchmark ran.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// CPUs available (what `nproc` prints).
    pub cpus: usize,
    /// `quorate --version`.
    pub quorate_version: String,
    /// The quorate binary benchmarked.
    pub quorate_path: String,
    /// `kube-apiserver --version`.
    pub apiserver_version: String,
    /// `/proc/loadavg` (1, 5, 15 min) when the run started.
    pub load_before: String,
    /// The same when it ended.
    pub load_after: String,
    /// When the run started (UTC).
    pub started: String,
    /// The command line.
    pub command: String,
}

/// Creating the clusters and waiting until every one is reconciled.
#[derive(Clone, Debug, Default)]
pub struct Convergence {
    /// Clusters created.
    pub clusters: usize,
    /// First create sent until the last create acknowledged.
    pub created: Duration,
    /// First create sent until the last cluster was seen reconciled; `None` if some never were
    /// within the timeout.
    pub converged: Option<Duration>,
    /// Clusters seen reconciled.
    pub reconciled: usize,
    /// Per cluster: its create acknowledged until it was seen reconciled.
    pub latencies: Vec<Duration>,
    /// Errors of the watch (retried).
    pub watch_errors: Vec<String>,
}

impl Convergence {
    /// From the creates (`t0` = first create sent) and when each cluster was seen reconciled.
    pub fn new(
        t0: Instant,
        created: &Created,
        done: &HashMap<String, Instant>,
        clusters: usize,
        watch_errors: Vec<String>,
    ) -> Convergence {
        let latencies = done
            .iter()
            .filter_map(|(key, at)| Some(at.saturating_duration_since(*created.at.get(key)?)))
            .collect();
        let converged = (done.len() >= clusters)
            .then(|| {
                done.values()
                    .max()
                    .map(|last| last.saturating_duration_since(t0))
            })
            .flatten();
        Convergence {
            clusters,
            created: created.elapsed,
            converged,
            reconciled: done.len(),
            latencies,
            watch_errors,
        }
    }

    /// One line for the progress output.
    pub fn progress_line(&self) -> String {
        format!(
            "{} of {} reconciled, all after {}; creates took {}",
            self.reconciled,
            self.clusters,
            self.converged
                .map(secs)
                .unwrap_or_else(|| "(never)".to_string()),
            secs(self.created)
        )
    }

    /// The `p`-th percentile (nearest rank) of the per-cluster latencies.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        percentile(&self.latencies, p)
    }
}

/// Nearest-rank percentile.
pub fn percentile(values: &[Duration], p: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// API requests over a period.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    /// Requests by series.
    pub requests: RequestCounts,
    /// Length of the period.
    pub elapsed: Duration,
}

impl Phase {
    fn minutes(&self) -> f64 {
        self.elapsed.as_secs_f64() / 60.0
    }

    /// Resource requests per minute.
    pub fn per_minute(&self) -> f64 {
        resource_total(&self.requests) / self.minutes().max(f64::MIN_POSITIVE)
    }
}

/// The baseline: no operator; the first passes replayed by a plain client.
#[derive(Clone, Debug, Default)]
pub struct BaselineRun {
    /// Workers replaying passes.
    pub workers: usize,
    /// Creating and reconciling.
    pub convergence: Convergence,
    /// API requests from just before the first create until all were reconciled.
    pub burst: RequestCounts,
    /// The API server's CPU time meanwhile.
    pub apiserver_cpu_burst: Option<Duration>,
    /// Its etcd's CPU time meanwhile.
    pub etcd_cpu_burst: Option<Duration>,
    /// Components stored at the end, against the expected counts.
    pub components: Vec<(Listed, usize)>,
}

/// One run of `quorate operator`.
#[derive(Clone, Debug, Default)]
pub struct OperatorRun {
    /// `--etcd-workers`.
    pub workers: u16,
    /// Creating and reconciling.
    pub convergence: Convergence,
    /// The API server alone, before the operator started.
    pub background: Phase,
    /// API requests from just before the first create until all were reconciled.
    pub burst: RequestCounts,
    /// The operator's passes meanwhile.
    pub burst_passes: OperatorCounters,
    /// From then until the steady-state window.
    pub settle: Phase,
    /// The operator's passes meanwhile.
    pub settle_passes: OperatorCounters,
    /// The steady-state window.
    pub steady: Phase,
    /// The operator's passes in the window.
    pub steady_passes: OperatorCounters,
    /// `VmRSS` after the start, before any `Etcd` existed.
    pub rss_idle_kib: u64,
    /// `VmRSS` when all were reconciled.
    pub rss_converged_kib: u64,
    /// Highest `VmRSS` sampled until all were reconciled.
    pub rss_peak_burst_kib: u64,
    /// `VmRSS` at the end of the window.
    pub rss_steady_end_kib: u64,
    /// Final memory figures.
    pub memory: Memory,
    /// The operator's CPU time while reconciling the new clusters.
    pub cpu_burst: Option<Duration>,
    /// Its CPU time in the window.
    pub cpu_steady: Option<Duration>,
    /// The API server's CPU time while reconciling.
    pub apiserver_cpu_burst: Option<Duration>,
    /// Its CPU time in the window.
    pub apiserver_cpu_steady: Option<Duration>,
    /// The API server's etcd's CPU time while reconciling.
    pub etcd_cpu_burst: Option<Duration>,
    /// Its CPU time in the window.
    pub etcd_cpu_steady: Option<Duration>,
    /// What the operator caches, as listed from the API server, and its size in memory.
    pub cached: Vec<Cached>,
    /// Components stored at the end, against the expected counts.
    pub components: Vec<(Listed, usize)>,
    /// WARN/ERROR lines in the operator's log, and the first few.
    pub log_warnings: (usize, Vec<String>),
    /// How the operator exited when stopped.
    pub exit: String,
}

impl OperatorRun {
    /// The label in tables.
    pub fn label(&self) -> String {
        format!("`quorate operator`, {} workers", self.workers)
    }

    /// Requests the operator made in the window: the verbs it uses on the resources it uses,
    /// less the API server's own on the same verb and resource at the rate measured alone.
    pub fn steady_operator_requests(&self) -> f64 {
        self.steady_share().values().sum::<f64>() + 0.0
    }

    /// The operator's requests in the window by `VERB resource`: see [`operator_share`].
    pub fn steady_share(&self) -> BTreeMap<String, f64> {
        operator_share(
            &self.steady.requests,
            self.steady.minutes(),
            &self.background.requests,
            self.background.minutes(),
        )
    }

    /// [`OperatorRun::steady_operator_requests`] per minute and cluster.
    pub fn steady_per_minute_per_cluster(&self, clusters: usize) -> f64 {
        self.steady_operator_requests()
            / self.steady.minutes().max(f64::MIN_POSITIVE)
            / clusters.max(1) as f64
    }

    /// Passes per minute in the window.
    pub fn steady_passes_per_minute(&self) -> f64 {
        self.steady_passes.total_passes() / self.steady.minutes().max(f64::MIN_POSITIVE)
    }

    /// Peak resident memory: `VmHWM`, else the highest sample.
    pub fn peak_kib(&self) -> u64 {
        self.memory.hwm_kib.unwrap_or(self.memory.peak_sampled_kib)
    }

    /// One line for the progress output.
    pub fn progress_line(&self, clusters: usize) -> String {
        format!(
            "steady state: {:.2} requests/min/cluster, {:.0} passes/min; peak RSS {}",
            self.steady_per_minute_per_cluster(clusters),
            self.steady_passes_per_minute(),
            mib(self.peak_kib())
        )
    }
}

/// Everything the report shows.
#[derive(Clone, Debug)]
pub struct Results {
    /// Setup.
    pub settings: Settings,
    /// Machine facts.
    pub machine: Machine,
    /// One baseline per operator run, with its worker count, in the same order.
    pub baselines: Vec<BaselineRun>,
    /// The operator runs; the first is the headline.
    pub runs: Vec<OperatorRun>,
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn opt_secs(d: Option<Duration>) -> String {
    d.map(secs).unwrap_or_else(|| "–".to_string())
}

fn mib_bytes(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / 1048576.0)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// CPU time as a share of one core over `over`.
fn cpu_share(cpu: Option<Duration>, over: Duration) -> String {
    match cpu {
        Some(c) if !over.is_zero() => format!(
            "{:.1} s ({:.0}% of a core)",
            c.as_secs_f64(),
            100.0 * c.as_secs_f64() / over.as_secs_f64()
        ),
        _ => "–".to_string(),
    }
}

fn number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn check(ok: bool) -> &'static str {
    if ok { "PASS" } else { "**FAIL**" }
}

/// The verdict against both targets, for the headline run.
pub fn verdict(run: &OperatorRun, clusters: usize) -> String {
    let time_ok = run
        .convergence
        .converged
        .is_some_and(|c| c <= TARGET_CONVERGENCE);
    let rss_ok = run.peak_kib() < TARGET_PEAK_RSS_KIB;
    let overall = if time_ok && rss_ok { "PASS" } else { "FAIL" };
    format!(
        "**Verdict: {overall}** — all {clusters} reconciled after {} (target ≤ {} s: {}), \
         peak RSS {} (target < {}: {}).",
        opt_secs(run.convergence.converged),
        TARGET_CONVERGENCE.as_secs(),
        if time_ok { "met" } else { "**missed**" },
        mib(run.peak_kib()),
        mib(TARGET_PEAK_RSS_KIB),
        if rss_ok { "met" } else { "**missed**" },
    )
}

fn ratio(a: Option<Duration>, b: Option<Duration>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if !b.is_zero() => {
            format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64())
        }
        _ => "–".to_string(),
    }
}

/// The full markdown report.
pub fn render(r: &Results) -> String {
    let mut out = String::new();
    let s = &r.settings;
    let n = s.clusters;
    let _ = writeln!(
        out,
        "# Operator: {n} `Etcd` objects on a real kube-apiserver\n"
    );
    let _ = writeln!(
        out,
        "{n} `Etcd` objects made from `examples/etcd-cluster.yaml` (3 replicas, backups to a \
         `Local` store; each with its own name, in {} namespaces) are created, {} in flight at \
         a time, on a private {} started by the testkit (its own etcd; the Service range widened \
         from the testkit's /24 to `{}` so every client Service gets its ClusterIP; no \
         kubelet, scheduler or controller-manager, so no pods ever run and no lease is \
         renewed). `quorate operator` runs as \
         its own process with `--disable-webhooks --leader-election=false`, `KUBECONFIG` \
         pointing at that server and every other setting at its default (status sync every \
         15 s, 3 workers unless said otherwise). A cluster counts as reconciled when one watch \
         on all `Etcd`s (the same in every run) first shows `status.observedGeneration == 1` \
         and `lastOperation.state == Succeeded`; time runs from the first create.\n",
        s.namespaces,
        s.create_concurrency,
        r.machine.apiserver_version,
        super::SERVICE_CIDR
    );
    let _ = writeln!(
        out,
        "**Baseline**, in the same run on a fresh API server with no operator: the same \
         objects created the same way, and for each, as soon as its create returns, the \
         requests of the operator's first pass over a new `Etcd` replayed by a plain loop (with \
         as many workers as the operator run it is compared with): merge-patch the finalizer, GET the ConfigMap \
         (absent), server-side apply the 12 components and the StatefulSet (the operator's own \
         `apply` functions and objects), POST the `ReconcileSucceeded` event, merge-patch the \
         status (the operator's `compute_status`). That is the API server's cost of the work \
         itself, with no watch, queue, cache or second pass. Each baseline runs just \
         before its operator run.\n"
    );

    let (Some(head), Some(b)) = (r.runs.first(), r.baselines.first()) else {
        let _ = writeln!(out, "No operator run.");
        return out;
    };
    let _ = writeln!(
        out,
        "| measure | {} | baseline | ratio | target | verdict |",
        head.label()
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|---|");
    let time_ok = head
        .convergence
        .converged
        .is_some_and(|c| c <= TARGET_CONVERGENCE);
    let _ = writeln!(
        out,
        "| all {n} reconciled once, from the first create | **{}** | {} (first passes replayed \
         by a plain client) | {} | ≤ {} s | {} |",
        opt_secs(head.convergence.converged),
        opt_secs(b.convergence.converged),
        ratio(head.convergence.converged, b.convergence.converged),
        TARGET_CONVERGENCE.as_secs(),
        check(time_ok)
    );
    let peak = head.peak_kib();
    let _ = writeln!(
        out,
        "| operator peak RSS (`VmHWM`) | **{}** | {} (the same process idle, before the first \
         `Etcd`) | {:.2}x | < {} | {} |",
        mib(peak),
        mib(head.rss_idle_kib),
        peak as f64 / head.rss_idle_kib.max(1) as f64,
        mib(TARGET_PEAK_RSS_KIB),
        check(peak < TARGET_PEAK_RSS_KIB)
    );
    let _ = writeln!(
        out,
        "| steady-state API requests per minute per cluster | **{:.2}** | – | – | – | reported |",
        head.steady_per_minute_per_cluster(n),
    );
    let _ = writeln!(
        out,
        "| steady-state reconcile passes per minute | {:.0} ({:.2} per cluster) | {:.0} \
         (expected: one per cluster per 15 s status sync) | {:.2}x | – | reported |",
        head.steady_passes_per_minute(),
        head.steady_passes_per_minute() / n.max(1) as f64,
        n as f64 * 4.0,
        head.steady_passes_per_minute() / (n as f64 * 4.0)
    );
    let _ = writeln!(out, "\n{}\n", verdict(head, n));
    render_dominant(&mut out, r, head, b);

    render_convergence(&mut out, r);
    render_steady(&mut out, r);
    render_memory(&mut out, r);
    render_components(&mut out, r);
    render_notes(&mut out, r);
    render_machine(&mut out, r);
    out
}

/// What the headline numbers are made of, in a few measured sentences.
fn render_dominant(out: &mut String, r: &Results, head: &OperatorRun, b: &BaselineRun) {
    let n = r.settings.clusters.max(1) as f64;
    let _ = writeln!(
        out,
        "### What dominates
"
    );
    let over = head.convergence.converged.unwrap_or(r.settings.timeout);
    let seconds = |d: Option<Duration>| d.map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let applies = |requests: &RequestCounts| {
        by_verb_resource(requests, true)
            .get("APPLY statefulsets")
            .copied()
            .unwrap_or(0.0)
            / n
    };
    let spec_passes = head
        .burst_passes
        .passes
        .get("succeeded")
        .copied()
        .unwrap_or(0.0);
    let workers = f64::from(head.workers.max(1));
    let per_request = |total: f64, took: Option<Duration>, workers: f64| {
        took.map(|t| 1e3 * t.as_secs_f64() * workers / total.max(1.0))
            .unwrap_or(0.0)
    };
    let (ours, theirs) = (resource_total(&head.burst), resource_total(&b.burst));
    let _ = writeln!(
        out,
        "- **Time**: API requests, one after another. The operator sent {:.1} requests per \
         cluster where the baseline sends {:.1}: it applied every component {:.2} times per \
         cluster, because {} passes ran the spec flow to success for {} clusters, so {} \
         repeated one already done (and {} further passes wrote nothing or only the status). \
         Its {} workers spent {:.1} ms per request (time × workers / requests; baseline {:.1} \
         ms). Meanwhile the API server used {:.1} s of CPU and its etcd {:.1} s, the operator \
         {:.1} s, in {} on {} CPUs.",
        ours / n,
        theirs / n,
        applies(&head.burst),
        number(spec_passes),
        r.settings.clusters,
        number((spec_passes - n).max(0.0)),
        number(head.burst_passes.total_passes() - spec_passes),
        head.workers,
        per_request(ours, head.convergence.converged, workers),
        per_request(theirs, b.convergence.converged, b.workers.max(1) as f64),
        seconds(head.apiserver_cpu_burst),
        seconds(head.etcd_cpu_burst),
        seconds(head.cpu_burst),
        secs(over),
        r.machine.cpus,
    );
    let share = head.steady_share();
    let total: f64 = share.values().sum();
    if let Some((row, top)) = share
        .iter()
        .max_by(|a, b| a.1.partial_cmp(b.1).unwrap_or(std::cmp::Ordering::Equal))
    {
        let _ = writeln!(
            out,
            "- **Steady-state requests**: `{row}` makes {:.0}% of the operator's requests \
             ({:.2} per minute per cluster). Passes: {:.2} per minute per cluster, where the \
             15 s status sync alone makes 4.",
            100.0 * top / total.max(f64::MIN_POSITIVE),
            top / head.steady.minutes().max(f64::MIN_POSITIVE) / n,
            head.steady_passes_per_minute() / n,
        );
    }
    let heap: u64 = head.cached.iter().map(|c| c.heap).sum();
    let kept: u64 = head.cached.iter().map(|c| c.heap_cached).sum();
    if heap > 0 {
        let biggest = head.cached.iter().max_by_key(|c| c.heap_cached);
        let _ = writeln!(
            out,
            "- **Memory**: the watch caches. Deserialized, the objects the operator caches take \
             {} as served (the JSON is {}) and {} as it keeps them (trimmed: no \
             `managedFields`, ...), against a growth from idle to peak of {}; {} the biggest \
             kind ({} kept).",
            mib_bytes(heap),
            mib_bytes(head.cached.iter().map(|c| c.listed.bytes as u64).sum()),
            mib_bytes(kept),
            mib_bytes(head.peak_kib().saturating_sub(head.rss_idle_kib) * 1024),
            biggest.map(|c| c.listed.what.as_str()).unwrap_or("–"),
            biggest
                .map(|c| mib_bytes(c.heap_cached))
                .unwrap_or_default(),
        );
    }
    let _ = writeln!(out);
}

fn render_convergence(out: &mut String, r: &Results) {
    let n = r.settings.clusters;
    let _ = writeln!(out, "## Reconciling {n} new clusters\n");
    let _ = writeln!(
        out,
        "Per-cluster latency runs from a cluster's create being acknowledged until the watch \
         shows it reconciled. API requests are the API server's `apiserver_request_total` \
         from just before the first create until the last cluster was reconciled (resource \
         requests only), the benchmark's {n} creates included in both runs. CPU is user + \
         system time from `/proc/<pid>/stat` over the same period.\n"
    );
    let _ = writeln!(
        out,
        "| run | creates acknowledged | all reconciled | latency p50 | p90 | max | API requests | per cluster | passes | API server CPU | its etcd's CPU | operator CPU |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let row = |out: &mut String,
               label: &str,
               c: &Convergence,
               requests: &RequestCounts,
               passes: String,
               apiserver: Option<Duration>,
               etcd: Option<Duration>,
               operator: String| {
        let total = resource_total(requests);
        let over = c.converged.unwrap_or(r.settings.timeout);
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {} | {:.1} | {passes} | {} | {} | {operator} |",
            secs(c.created),
            c.converged.map(secs).unwrap_or_else(|| format!(
                "{} of {n} after {}",
                c.reconciled,
                secs(over)
            )),
            opt_secs(c.percentile(50.0)),
            opt_secs(c.percentile(90.0)),
            opt_secs(c.percentile(100.0)),
            number(total),
            total / n.max(1) as f64,
            cpu_share(apiserver, over),
            cpu_share(etcd, over),
        );
    };
    for (b, run) in r.baselines.iter().zip(&r.runs) {
        row(
            out,
            &format!("baseline, {} plain workers", b.workers),
            &b.convergence,
            &b.burst,
            format!("{n} (one each)"),
            b.apiserver_cpu_burst,
            b.etcd_cpu_burst,
            "–".to_string(),
        );
        let over = run.convergence.converged.unwrap_or(r.settings.timeout);
        row(
            out,
            &run.label(),
            &run.convergence,
            &run.burst,
            number(run.burst_passes.total_passes()),
            run.apiserver_cpu_burst,
            run.etcd_cpu_burst,
            cpu_share(run.cpu_burst, over),
        );
    }

    let _ = writeln!(
        out,
        "\nRequests by verb and resource in that period, per cluster (the API server's verbs: \
         `APPLY` is a server-side apply, `POST` a create; Kubernetes v1.20 counts a successful \
         GET of one custom object as `LIST` (kubernetes/kubernetes#95556), so the operator's \
         `LIST etcds` here, after its watch listed them at start, are its GETs of an `Etcd` \
         whose cached copy did not show the operator's own last write yet):\n"
    );
    let mut columns: Vec<(String, BTreeMap<String, f64>)> = Vec::new();
    for (b, run) in r.baselines.iter().zip(&r.runs) {
        columns.push((
            format!("baseline, {} workers", b.workers),
            by_verb_resource(&b.burst, true),
        ));
        columns.push((
            format!("operator, {} workers", run.workers),
            by_verb_resource(&run.burst, true),
        ));
    }
    breakdown_table(out, &columns, n as f64);

    for run in &r.runs {
        let _ = writeln!(
            out,
            "\nOperator passes while reconciling ({} workers), by result: {}; mean pass {}.",
            run.workers,
            passes_text(&run.burst_passes),
            run.burst_passes
                .mean_pass()
                .map(|s| format!("{:.0} ms", s * 1e3))
                .unwrap_or_else(|| "–".to_string())
        );
        let failed = failures(&run.burst);
        if !failed.is_empty() {
            let _ = writeln!(
                out,
                "Requests not answered with 2xx: {}.",
                counts_text(&failed)
            );
        }
    }
    for b in &r.baselines {
        let failed = failures(&b.burst);
        if !failed.is_empty() {
            let _ = writeln!(
                out,
                "\nBaseline ({} workers) requests not answered with 2xx: {}.",
                b.workers,
                counts_text(&failed)
            );
        }
    }
    let _ = writeln!(out);
}

fn passes_text(c: &OperatorCounters) -> String {
    if c.passes.is_empty() {
        return "none".to_string();
    }
    let mut text = counts_text(&c.passes);
    if !c.errors.is_empty() {
        let _ = write!(text, "; errors {}", counts_text(&c.errors));
    }
    text
}

fn counts_text(counts: &BTreeMap<String, f64>) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{k} {}", number(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rows: every `VERB resource` in any column; cells: count / `per`.
fn breakdown_table(out: &mut String, columns: &[(String, BTreeMap<String, f64>)], per: f64) {
    let rows: BTreeSet<&String> = columns.iter().flat_map(|(_, c)| c.keys()).collect();
    let _ = write!(out, "| request |");
    for (label, _) in columns {
        let _ = write!(out, " {label} |");
    }
    let _ = write!(out, "\n|---|");
    for _ in columns {
        let _ = write!(out, "---:|");
    }
    let _ = writeln!(out);
    for row in rows {
        let _ = write!(out, "| `{row}` |");
        for (_, c) in columns {
            match c.get(row) {
                Some(v) => {
                    let _ = write!(out, " {:.2} |", v / per);
                }
                None => {
                    let _ = write!(out, " – |");
                }
            }
        }
        let _ = writeln!(out);
    }
    let _ = write!(out, "| **total** |");
    for (_, c) in columns {
        let _ = write!(out, " **{:.2}** |", c.values().sum::<f64>() / per);
    }
    let _ = writeln!(out);
}

fn render_steady(out: &mut String, r: &Results) {
    let n = r.settings.clusters;
    let _ = writeln!(out, "## Steady state\n");
    let _ = writeln!(
        out,
        "After the last cluster was reconciled the benchmark stopped its watch, waited {} s \
         for follow-up passes, then made no API request at all for {:.1} min while counting the \
         API server's `apiserver_request_total` (resource requests; its own `/metrics` \
         scrapes are non-resource requests and left out). The API server also makes requests \
         of its own (to check the `default` namespace and `kubernetes` Service, its \
         flow-control configuration, ...), measured for {} s before the operator started (no \
         operator, no benchmark traffic). Counted as the operator's: the verbs it uses on the \
         resources it uses (list and watch `Etcd`s, StatefulSets, Leases and Pods; GET \
         `Etcd`s, ConfigMaps and Secrets; apply or delete components; patch `Etcd`s and Events; create \
         Events), less the API server's own on the same verb and resource at the rate \
         measured alone. Passes are the operator's \
         `quorate_operator_reconciles_total`.\n",
        r.settings.settle.as_secs(),
        r.settings.steady.as_secs_f64() / 60.0,
        r.settings.background.as_secs()
    );
    let _ = writeln!(
        out,
        "| run | window | all requests | API server alone, per min | operator's requests per min | **per min per cluster** | passes per min | per cluster | requests per pass | mean pass | operator CPU | API server CPU | its etcd's CPU |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for run in &r.runs {
        let minutes = run.steady.elapsed.as_secs_f64() / 60.0;
        let operator_per_min = run.steady_operator_requests() / minutes.max(f64::MIN_POSITIVE);
        let passes = run.steady_passes.total_passes();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.1} | **{:.2}** | {:.0} | {:.2} | {:.2} | {} | {} | {} | {} |",
            run.label(),
            secs(run.steady.elapsed),
            number(resource_total(&run.steady.requests)),
            run.background.per_minute(),
            operator_per_min,
            run.steady_per_minute_per_cluster(n),
            run.steady_passes_per_minute(),
            run.steady_passes_per_minute() / n.max(1) as f64,
            run.steady_operator_requests() / passes.max(1.0),
            run.steady_passes
                .mean_pass()
                .map(|s| format!("{:.1} ms", s * 1e3))
                .unwrap_or_else(|| "–".to_string()),
            cpu_share(run.cpu_steady, run.steady.elapsed),
            cpu_share(run.apiserver_cpu_steady, run.steady.elapsed),
            cpu_share(run.etcd_cpu_steady, run.steady.elapsed),
        );
    }
    for run in &r.runs {
        let minutes = run.steady.elapsed.as_secs_f64() / 60.0;
        let _ = writeln!(
            out,
            "\nBy verb and resource ({}): count in the window, per minute, the API server \
             alone per minute, and the operator's share per minute and per minute per \
             cluster.\n",
            run.label()
        );
        let _ = writeln!(
            out,
            "| request | in the window | per min | API server alone, per min | operator's, per min | **per min per cluster** |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        let share = run.steady_share();
        let steady = by_verb_resource(&run.steady.requests, true);
        let background = by_verb_resource(&run.background.requests, true);
        let background_minutes = run.background.elapsed.as_secs_f64() / 60.0;
        let rows: BTreeSet<&String> = steady.keys().chain(background.keys()).collect();
        for row in rows {
            let count = steady.get(row).copied().unwrap_or(0.0);
            let alone = background.get(row).copied().unwrap_or(0.0)
                / background_minutes.max(f64::MIN_POSITIVE);
            let operators =
                share.get(row.as_str()).copied().unwrap_or(0.0) / minutes.max(f64::MIN_POSITIVE);
            let _ = writeln!(
                out,
                "| `{row}` | {} | {:.1} | {} | {} | {} |",
                number(count),
                count / minutes.max(f64::MIN_POSITIVE),
                if alone > 0.0 {
                    format!("{alone:.1}")
                } else {
                    "–".to_string()
                },
                if operators > 0.0 {
                    format!("{operators:.1}")
                } else {
                    "–".to_string()
                },
                if operators > 0.0 {
                    format!("**{:.3}**", operators / n.max(1) as f64)
                } else {
                    "–".to_string()
                },
            );
        }
        let _ = writeln!(
            out,
            "\nPasses in the window by result: {}. Between the last reconcile and the window \
             ({} s): {} requests, passes {}.",
            passes_text(&run.steady_passes),
            run.settle.elapsed.as_secs(),
            number(resource_total(&run.settle.requests)),
            passes_text(&run.settle_passes)
        );
        let failed = failures(&run.steady.requests);
        if !failed.is_empty() {
            let _ = writeln!(
                out,
                "Requests not answered with 2xx in the window: {}.",
                counts_text(&failed)
            );
        }
    }
    let _ = writeln!(out);
}

fn render_memory(out: &mut String, r: &Results) {
    let _ = writeln!(out, "## Memory\n");
    let _ = writeln!(
        out,
        "The operator process's resident memory from `/proc/<pid>/status`: `VmRSS` sampled \
         every {} ms from its start, and `VmHWM` (the kernel's own peak) read just before it \
         was stopped.\n",
        super::process::RSS_SAMPLE_PERIOD.as_millis()
    );
    let _ = writeln!(
        out,
        "| run | idle (no `Etcd`) | peak while reconciling | when all were reconciled | end of steady state | **`VmHWM`** | samples |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for run in &r.runs {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | **{}** | {} |",
            run.label(),
            mib(run.rss_idle_kib),
            mib(run.rss_peak_burst_kib),
            mib(run.rss_converged_kib),
            mib(run.rss_steady_end_kib),
            mib(run.peak_kib()),
            run.memory.samples
        );
    }
    if let Some(head) = r.runs.first() {
        let _ = writeln!(
            out,
            "\nWhat the operator keeps in memory: every `Etcd` (the controller's store) and its \
             caches of StatefulSets, Leases and Pods carrying druid's managed-by label, each \
             filled by a watch, every object trimmed before it is stored (`quorate_operator::trim`: \
             no `metadata.managedFields` or kubectl's last-applied annotation anywhere, and of a \
             Pod only its metadata and its containers' readiness). Listed at the end, as JSON, \
             and deserialized into the same Rust types in the benchmark process, which counts \
             the heap they keep (malloc chunks, each object in an `Arc` as in a reflector \
             store), as served and trimmed by the operator's own functions:\n"
        );
        let _ = writeln!(
            out,
            "| cached | objects | JSON | as served | per object | as the operator keeps them | per object |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
        let (mut json, mut heap, mut kept) = (0, 0, 0);
        let per_object = |bytes: u64, count: usize| {
            if count > 0 {
                format!("{:.1} KiB", bytes as f64 / 1024.0 / count as f64)
            } else {
                "–".to_string()
            }
        };
        for c in &head.cached {
            let l = &c.listed;
            json += l.bytes as u64;
            heap += c.heap;
            kept += c.heap_cached;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                l.what,
                l.count,
                mib_bytes(l.bytes as u64),
                mib_bytes(c.heap),
                per_object(c.heap, l.count),
                mib_bytes(c.heap_cached),
                per_object(c.heap_cached, l.count),
            );
        }
        let _ = writeln!(
            out,
            "| **total** | | **{}** | **{}** | | **{}** | |",
            mib_bytes(json),
            mib_bytes(heap),
            mib_bytes(kept)
        );
        let growth = head.peak_kib().saturating_sub(head.rss_idle_kib) * 1024;
        let _ = writeln!(
            out,
            "\nThe peak exceeds the idle process by {}; the cached objects, as the operator keeps \
             them, take {} ({:.0}% of that growth; {} as served).",
            mib_bytes(growth),
            mib_bytes(kept),
            100.0 * kept as f64 / growth.max(1) as f64,
            mib_bytes(heap),
        );
    }
    let _ = writeln!(out);
}

fn render_components(out: &mut String, r: &Results) {
    let _ = writeln!(out, "## Components stored\n");
    let _ = writeln!(
        out,
        "Objects with druid's managed-by label listed at the end of each run, against what \
         {} clusters of the example should have.\n",
        r.settings.clusters
    );
    let _ = write!(out, "| resource | expected |");
    let mut columns: Vec<&[(Listed, usize)]> = Vec::new();
    for (b, run) in r.baselines.iter().zip(&r.runs) {
        let _ = write!(
            out,
            " baseline, {} workers | operator, {} workers |",
            b.workers, run.workers
        );
        columns.push(&b.components);
        columns.push(&run.components);
    }
    let _ = write!(out, "\n|---|---:|");
    for _ in &columns {
        let _ = write!(out, "---:|");
    }
    let _ = writeln!(out);
    let Some(first) = columns.first() else {
        return;
    };
    for (i, (listed, expected)) in first.iter().enumerate() {
        let _ = write!(out, "| {} | {expected} |", listed.what);
        for column in &columns {
            let cell = column
                .get(i)
                .map(|(l, _)| l.count.to_string())
                .unwrap_or_else(|| "–".to_string());
            let _ = write!(out, " {cell} |");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
}

fn render_notes(out: &mut String, r: &Results) {
    let mut notes = Vec::new();
    for b in &r.baselines {
        if !b.convergence.watch_errors.is_empty() {
            notes.push(format!(
                "baseline, {} workers: watch errors (retried): {}",
                b.workers,
                b.convergence.watch_errors.join("; ")
            ));
        }
    }
    for run in &r.runs {
        if !run.convergence.watch_errors.is_empty() {
            notes.push(format!(
                "{}: watch errors (retried): {}",
                run.label(),
                run.convergence.watch_errors.join("; ")
            ));
        }
        let (count, first) = &run.log_warnings;
        notes.push(format!(
            "{}: {count} WARN/ERROR lines in its log{}; on SIGTERM it exited with {}",
            run.label(),
            if first.is_empty() {
                String::new()
            } else {
                format!(", first: `{}`", first.join("`; `"))
            },
            run.exit
        ));
    }
    if notes.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Notes\n");
    for note in notes {
        let _ = writeln!(out, "- {}", note.replace('|', "\\|"));
    }
    let _ = writeln!(out);
}

fn render_machine(out: &mut String, r: &Results) {
    let m = &r.machine;
    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(out, "- CPUs (nproc): {}", m.cpus);
    let _ = writeln!(out, "- kube-apiserver: {}", m.apiserver_version);
    let _ = writeln!(
        out,
        "- quorate: {} (`{}`)",
        m.quorate_version, m.quorate_path
    );
    let _ = writeln!(
        out,
        "- load average (1/5/15 min): {} at start, {} at end",
        m.load_before, m.load_after
    );
    let _ = writeln!(out, "- date: {}", m.started);
    let _ = writeln!(out, "- command: `{}`", m.command);
    let command = if m.command.starts_with("quorate-bench operator") {
        m.command.clone()
    } else {
        "quorate-bench operator --output docs/benchmarks/operator.md".to_string()
    };
    let _ = writeln!(
        out,
        "\nReproduce: `cargo build --release -p quorate -p quorate-bench && \
         target/release/{command}`"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::metrics::RequestKey;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn key(verb: &str, resource: &str) -> RequestKey {
        RequestKey {
            verb: verb.into(),
            resource: resource.into(),
            code: "200".into(),
        }
    }

    fn convergence(converged: u64) -> Convergence {
        Convergence {
            clusters: 2,
            created: ms(1000),
            converged: Some(ms(converged)),
            reconciled: 2,
            latencies: vec![ms(100), ms(300)],
            watch_errors: Vec::new(),
        }
    }

    fn results() -> Results {
        let run = OperatorRun {
            workers: 3,
            convergence: convergence(30_000),
            background: Phase {
                requests: RequestCounts::from([(key("GET", "apiservices"), 1.0)]),
                elapsed: Duration::from_secs(30),
            },
            burst: RequestCounts::from([
                (key("APPLY", "statefulsets"), 4.0),
                (key("POST", "etcds"), 2.0),
            ]),
            steady: Phase {
                // 2 per minute of background over 2 minutes, the rest the operator's.
                requests: RequestCounts::from([
                    (key("PATCH", "etcds/status"), 8.0),
                    (key("GET", "apiservices"), 4.0),
                ]),
                elapsed: Duration::from_secs(120),
            },
            steady_passes: OperatorCounters {
                passes: BTreeMap::from([("not_run".to_string(), 16.0)]),
                duration_sum: 0.016,
                duration_count: 16.0,
                ..OperatorCounters::default()
            },
            rss_idle_kib: 10 * 1024,
            memory: Memory {
                hwm_kib: Some(40 * 1024),
                rss_kib: Some(30 * 1024),
                peak_sampled_kib: 39 * 1024,
                samples: 100,
            },
            ..OperatorRun::default()
        };
        Results {
            settings: Settings {
                clusters: 2,
                namespaces: 1,
                create_concurrency: 16,
                steady: Duration::from_secs(120),
                settle: Duration::from_secs(30),
                background: Duration::from_secs(30),
                timeout: Duration::from_secs(600),
            },
            machine: Machine {
                cpus: 2,
                ..Machine::default()
            },
            baselines: vec![BaselineRun {
                workers: 3,
                convergence: convergence(10_000),
                burst: RequestCounts::from([
                    (key("APPLY", "statefulsets"), 2.0),
                    (key("POST", "etcds"), 2.0),
                ]),
                ..BaselineRun::default()
            }],
            runs: vec![run],
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=10).map(|i| ms(i * 10)).collect();
        assert_eq!(percentile(&v, 50.0), Some(ms(50)));
        assert_eq!(percentile(&v, 90.0), Some(ms(90)));
        assert_eq!(percentile(&v, 100.0), Some(ms(100)));
        assert_eq!(percentile(&v, 0.0), Some(ms(10)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn convergence_from_create_and_done_times() {
        let t0 = Instant::now();
        let created = Created {
            elapsed: ms(50),
            at: HashMap::from([
                ("a/x".to_string(), t0 + ms(10)),
                ("a/y".to_string(), t0 + ms(50)),
            ]),
        };
        let done = HashMap::from([
            ("a/x".to_string(), t0 + ms(110)),
            ("a/y".to_string(), t0 + ms(450)),
        ]);
        let c = Convergence::new(t0, &created, &done, 2, Vec::new());
        assert_eq!(c.converged, Some(ms(450)));
        assert_eq!(c.percentile(100.0), Some(ms(400)));
        assert_eq!(c.percentile(50.0), Some(ms(100)));
        let partial = Convergence::new(t0, &created, &done, 3, Vec::new());
        assert_eq!((partial.converged, partial.reconciled), (None, 2));
    }

    #[test]
    fn steady_requests_subtract_the_background() {
        let r = results();
        let run = &r.runs[0];
        // 12 requests, 2/min background over 2 min: 8 the operator's, 4/min, 2/min/cluster.
        assert!((run.steady_operator_requests() - 8.0).abs() < 1e-9);
        assert!((run.steady_per_minute_per_cluster(2) - 2.0).abs() < 1e-9);
        assert!((run.steady_passes_per_minute() - 8.0).abs() < 1e-9);
    }

    #[test]
    fn report_has_headline_verdict_and_breakdowns() {
        let text = render(&results());
        assert!(
            text.contains("| all 2 reconciled once, from the first create | **30.00 s** | 10.00 s"),
            "{text}"
        );
        assert!(text.contains("| 3.00x | ≤ 60 s | PASS |"), "{text}");
        assert!(text.contains("| **40.0 MiB** | 10.0 MiB"), "{text}");
        assert!(text.contains("**Verdict: PASS**"), "{text}");
        assert!(
            text.contains("| `APPLY statefulsets` | 1.00 | 2.00 |"),
            "{text}"
        );
        assert!(
            text.contains("| `PATCH etcds/status` | 8 | 4.0 | – | 4.0 | **2.000** |"),
            "{text}"
        );
        assert!(
            text.contains("| `GET apiservices` | 4 | 2.0 | 2.0 | – | – |"),
            "{text}"
        );
        assert!(text.contains("- CPUs (nproc): 2"), "{text}");
        let mut slow = results();
        slow.runs[0].convergence.converged = Some(Duration::from_secs(61));
        slow.runs[0].memory.hwm_kib = Some(65 * 1024);
        let text = render(&slow);
        assert!(text.contains("**Verdict: FAIL**"), "{text}");
        assert!(text.contains("| **FAIL** |"), "{text}");
    }
}
