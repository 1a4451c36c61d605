//! The markdown report of `quorate-bench operator`: the headline against the targets, the
//! reconcile of the new clusters next to the baseline, the steady state by verb and resource,
//! memory, and the machine.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use crate::report::{Align, Markdown, Table, met, pass};

use super::metrics::{OperatorCounters, RequestCounts, by_verb_resource, failures, resource_total};
use super::results::{
    BaselineRun, Convergence, OperatorRun, Results, TARGET_PEAK_RSS_KIB, TARGET_RATIO, mib, secs,
    within_target,
};
use super::workload::Listed;

fn opt_secs(d: Option<Duration>) -> String {
    d.map(secs).unwrap_or_else(|| "–".to_string())
}

fn mib_bytes(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / 1048576.0)
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

/// `PASS` or `**FAIL**`, for a verdict cell.
fn check(ok: bool) -> &'static str {
    if ok { "PASS" } else { "**FAIL**" }
}

/// The verdict against both targets: time for the headline (median) round, memory for the
/// largest peak of any round.
pub fn verdict(r: &Results, run: &OperatorRun, baseline: &BaselineRun) -> String {
    let clusters = r.settings.clusters;
    let time_ok = within_target(run.convergence.converged, baseline.convergence.converged);
    let peak = peak_of_rounds(r, run);
    let rss_ok = peak <= TARGET_PEAK_RSS_KIB;
    format!(
        "**Verdict: {}** — all {clusters} reconciled after {} against the plain client's {} \
         (target ≤ {TARGET_RATIO}x: {}), peak RSS {} (target ≤ {}: {}).",
        pass(time_ok && rss_ok),
        opt_secs(run.convergence.converged),
        opt_secs(baseline.convergence.converged),
        met(time_ok),
        mib(peak),
        mib(TARGET_PEAK_RSS_KIB),
        met(rss_ok),
    )
}

/// The largest operator peak of every round (the headline run's when there is one round).
fn peak_of_rounds(r: &Results, head: &OperatorRun) -> u64 {
    r.rounds
        .iter()
        .map(|round| round.peak_kib)
        .chain([head.peak_kib()])
        .max()
        .unwrap_or_default()
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
    let mut doc = Markdown::new();
    let s = &r.settings;
    let n = s.clusters;
    doc.heading(
        1,
        &format!("Operator: {n} `Etcd` objects on a real kube-apiserver"),
    );
    doc.paragraph(format!(
        "{n} `Etcd` objects made from `examples/etcd-cluster.yaml` (3 replicas, backups to a \
         `Local` store; each with its own name, in {} namespaces) are created, {} in flight at \
         a time, on a private {} started by the testkit (its own etcd; the Service range widened \
         from the testkit's /24 to `{}` so every client Service gets its ClusterIP; no \
         kubelet, scheduler or controller-manager, so no pods ever run and no lease is \
         renewed). `quorate operator` runs as \
         its own process with `--disable-webhooks --leader-election=false`, `KUBECONFIG` \
         pointing at that server and every other setting at its default (status sync every \
         15 s, 3 workers unless said otherwise; with M replicas, M such processes, each with \
         `--shard I/M`, and the peak memory is the largest of them while CPU and passes are \
         their sum). A cluster counts as reconciled when one watch \
         on all `Etcd`s (the same in every run) first shows `status.observedGeneration == 1` \
         and `lastOperation.state == Succeeded`; time runs from the first create.",
        s.namespaces,
        s.create_concurrency,
        r.machine
            .apiserver_version
            .as_deref()
            .unwrap_or("kube-apiserver"),
        super::SERVICE_CIDR
    ));
    doc.paragraph(
        "**Baseline**, in the same run on a fresh API server with no operator: the same \
         objects created the same way, and for each, as soon as its create returns, the \
         requests of the operator's first pass over a new `Etcd` replayed by a plain loop (with \
         as many workers as the operator run it is compared with): merge-patch the finalizer, GET the agents' token \
         Secret (absent) and POST it, GET the ConfigMap (absent), server-side apply the 12 components and the StatefulSet (the operator's own \
         `apply` functions and objects), POST the `ReconcileSucceeded` event, merge-patch the \
         status (the operator's `compute_status`). That is the API server's cost of the work \
         itself, with no watch, queue, cache or second pass. Each baseline runs just \
         before its operator run.",
    );

    let (Some(head), Some(b)) = (r.runs.first(), r.baselines.first()) else {
        doc.paragraph("No operator run.");
        return doc.into_string();
    };
    render_headline(&mut doc, r, head, b);
    doc.paragraph(verdict(r, head, b));
    render_rounds(&mut doc, r);
    render_dominant(&mut doc, r, head, b);
    render_convergence(&mut doc, r);
    render_steady(&mut doc, r);
    render_memory(&mut doc, r);
    render_components(&mut doc, r);
    render_notes(&mut doc, r);
    let command = if r.machine.command.starts_with("quorate-bench operator") {
        r.machine.command.clone()
    } else {
        "quorate-bench operator --output docs/benchmarks/operator.md".to_string()
    };
    doc.machine(
        &r.machine,
        &format!("cargo build --release -p quorate -p quorate-bench && target/release/{command}"),
    );
    doc.into_string()
}

/// The headline table: each target against its baseline.
fn render_headline(doc: &mut Markdown, r: &Results, head: &OperatorRun, b: &BaselineRun) {
    let n = r.settings.clusters;
    let mut table = Table::new([
        ("measure".to_string(), Align::Left),
        (head.label(), Align::Right),
        ("baseline".to_string(), Align::Right),
        ("ratio".to_string(), Align::Right),
        ("target".to_string(), Align::Left),
        ("verdict".to_string(), Align::Left),
    ]);
    let time_ok = within_target(head.convergence.converged, b.convergence.converged);
    table.row([
        format!("all {n} reconciled once, from the first create"),
        format!("**{}**", opt_secs(head.convergence.converged)),
        format!(
            "{} (first passes replayed by a plain client)",
            opt_secs(b.convergence.converged)
        ),
        ratio(head.convergence.converged, b.convergence.converged),
        format!("≤ {TARGET_RATIO}x the baseline"),
        check(time_ok).to_string(),
    ]);
    let peak = peak_of_rounds(r, head);
    table.row([
        "operator peak RSS (`VmHWM`, the largest of any round)".to_string(),
        format!("**{}**", mib(peak)),
        format!(
            "{} (the same process idle, before the first `Etcd`)",
            mib(head.rss_idle_kib)
        ),
        format!("{:.2}x", peak as f64 / head.rss_idle_kib.max(1) as f64),
        format!("≤ {}", mib(TARGET_PEAK_RSS_KIB)),
        check(peak <= TARGET_PEAK_RSS_KIB).to_string(),
    ]);
    table.row([
        "steady-state API requests per minute per cluster".to_string(),
        format!("**{:.2}**", head.steady_per_minute_per_cluster(n)),
        "–".to_string(),
        "–".to_string(),
        "–".to_string(),
        "reported".to_string(),
    ]);
    let expected = n as f64 * 4.0;
    table.row([
        "steady-state reconcile passes per minute".to_string(),
        format!(
            "{:.0} ({:.2} per cluster)",
            head.steady_passes_per_minute(),
            head.steady_passes_per_minute() / n.max(1) as f64
        ),
        format!("{expected:.0} (expected: one per cluster per 15 s status sync)"),
        format!("{:.2}x", head.steady_passes_per_minute() / expected),
        "–".to_string(),
        "reported".to_string(),
    ]);
    doc.table(&table);
}

/// Every round of the headline comparison, when there was more than one.
fn render_rounds(doc: &mut Markdown, r: &Results) {
    if r.rounds.len() < 2 {
        return;
    }
    doc.paragraph(format!(
        "**Rounds**: {} pairs, each a baseline and then an operator run on fresh API servers, \
         one after another on the same machine. One pair alone varies by more than the \
         target's margin here (other load on a shared 2-CPU machine slows whichever run it \
         meets), so the headline and every table below are the round with the median ratio.",
        r.rounds.len()
    ));
    let head = super::results::median_round(&r.rounds);
    let mut table = Table::new([
        ("round".to_string(), Align::Right),
        ("baseline".to_string(), Align::Right),
        ("`quorate operator`".to_string(), Align::Right),
        ("ratio".to_string(), Align::Right),
        ("operator peak RSS".to_string(), Align::Right),
    ]);
    for (i, round) in r.rounds.iter().enumerate() {
        let mark = if i == head { " (headline)" } else { "" };
        table.row([
            format!("{}{mark}", i + 1),
            opt_secs(round.baseline),
            opt_secs(round.operator),
            ratio(round.operator, round.baseline),
            mib(round.peak_kib),
        ]);
    }
    doc.table(&table);
}

/// What the headline numbers are made of, in a few measured sentences.
fn render_dominant(doc: &mut Markdown, r: &Results, head: &OperatorRun, b: &BaselineRun) {
    let n = r.settings.clusters.max(1) as f64;
    doc.heading(3, "What dominates");
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
    // Every replica has its own workers.
    let workers = f64::from(head.workers.max(1)) * f64::from(head.replicas.max(1));
    let per_request = |total: f64, took: Option<Duration>, workers: f64| {
        took.map(|t| 1e3 * t.as_secs_f64() * workers / total.max(1.0))
            .unwrap_or(0.0)
    };
    let (ours, theirs) = (resource_total(&head.burst), resource_total(&b.burst));
    let mut items = vec![format!(
        "**Time**: API requests, one after another. The operator sent {:.1} requests per \
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
        workers,
        per_request(ours, head.convergence.converged, workers),
        per_request(theirs, b.convergence.converged, b.workers.max(1) as f64),
        seconds(head.apiserver_cpu_burst),
        seconds(head.etcd_cpu_burst),
        seconds(head.cpu_burst),
        secs(over),
        r.machine.cpus,
    )];
    let share = head.steady_share();
    let total: f64 = share.values().sum();
    if let Some((row, top)) = share
        .iter()
        .max_by(|a, b| a.1.partial_cmp(b.1).unwrap_or(std::cmp::Ordering::Equal))
    {
        items.push(format!(
            "**Steady-state requests**: `{row}` makes {:.0}% of the operator's requests \
             ({:.2} per minute per cluster). Passes: {:.2} per minute per cluster, where the \
             15 s status sync alone makes 4.",
            100.0 * top / total.max(f64::MIN_POSITIVE),
            top / head.steady.minutes().max(f64::MIN_POSITIVE) / n,
            head.steady_passes_per_minute() / n,
        ));
    }
    let heap: u64 = head.cached.iter().map(|c| c.heap).sum();
    let kept: u64 = head.cached.iter().map(|c| c.heap_cached).sum();
    if heap > 0 {
        let biggest = head.cached.iter().max_by_key(|c| c.heap_cached);
        items.push(format!(
            "**Memory**: the watch caches. Deserialized, the objects the operator caches take \
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
        ));
    }
    doc.bullets(items);
}

/// One row of the convergence table.
struct ConvergenceRow<'a> {
    label: String,
    convergence: &'a Convergence,
    requests: &'a RequestCounts,
    passes: String,
    apiserver: Option<Duration>,
    etcd: Option<Duration>,
    operator: String,
}

fn render_convergence(doc: &mut Markdown, r: &Results) {
    let n = r.settings.clusters;
    doc.heading(2, &format!("Reconciling {n} new clusters"));
    doc.paragraph(format!(
        "Per-cluster latency runs from a cluster's create being acknowledged until the watch \
         shows it reconciled. API requests are the API server's `apiserver_request_total` \
         from just before the first create until the last cluster was reconciled (resource \
         requests only), the benchmark's {n} creates included in both runs. CPU is user + \
         system time from `/proc/<pid>/stat` over the same period."
    ));
    let mut table = Table::numeric(
        "run",
        [
            "creates acknowledged",
            "all reconciled",
            "latency p50",
            "p90",
            "max",
            "API requests",
            "per cluster",
            "passes",
            "API server CPU",
            "its etcd's CPU",
            "operator CPU",
        ],
    );
    let mut row = |row: ConvergenceRow| {
        let c = row.convergence;
        let total = resource_total(row.requests);
        let over = c.converged.unwrap_or(r.settings.timeout);
        table.row([
            row.label,
            secs(c.created),
            c.converged
                .map(secs)
                .unwrap_or_else(|| format!("{} of {n} after {}", c.reconciled, secs(over))),
            opt_secs(c.percentile(50.0)),
            opt_secs(c.percentile(90.0)),
            opt_secs(c.percentile(100.0)),
            number(total),
            format!("{:.1}", total / n.max(1) as f64),
            row.passes,
            cpu_share(row.apiserver, over),
            cpu_share(row.etcd, over),
            row.operator,
        ]);
    };
    for (b, run) in r.baselines.iter().zip(&r.runs) {
        row(ConvergenceRow {
            label: format!("baseline, {} plain workers", b.workers),
            convergence: &b.convergence,
            requests: &b.burst,
            passes: format!("{n} (one each)"),
            apiserver: b.apiserver_cpu_burst,
            etcd: b.etcd_cpu_burst,
            operator: "–".to_string(),
        });
        let over = run.convergence.converged.unwrap_or(r.settings.timeout);
        row(ConvergenceRow {
            label: run.label(),
            convergence: &run.convergence,
            requests: &run.burst,
            passes: number(run.burst_passes.total_passes()),
            apiserver: run.apiserver_cpu_burst,
            etcd: run.etcd_cpu_burst,
            operator: cpu_share(run.cpu_burst, over),
        });
    }
    doc.table(&table);

    doc.paragraph(
        "Requests by verb and resource in that period, per cluster (the API server's verbs: \
         `APPLY` is a server-side apply, `POST` a create; the operator's `GET etcds` are its reads \
         of an `Etcd` whose cached copy did not show the operator's own last write yet):",
    );
    let mut columns: Vec<(String, BTreeMap<String, f64>)> = Vec::new();
    for (b, run) in r.baselines.iter().zip(&r.runs) {
        columns.push((
            format!("baseline, {} workers", b.workers),
            by_verb_resource(&b.burst, true),
        ));
        columns.push((
            format!("operator, {}", run.short_label()),
            by_verb_resource(&run.burst, true),
        ));
    }
    doc.table(&breakdown_table(&columns, n as f64));

    for run in &r.runs {
        let mut text = format!(
            "Operator passes while reconciling ({}), by result: {}; mean pass {}.",
            run.short_label(),
            passes_text(&run.burst_passes),
            run.burst_passes
                .mean_pass()
                .map(|s| format!("{:.0} ms", s * 1e3))
                .unwrap_or_else(|| "–".to_string())
        );
        append_failures(&mut text, &run.burst, "");
        doc.paragraph(text);
    }
    for b in &r.baselines {
        let failed = failures(&b.burst);
        if !failed.is_empty() {
            doc.paragraph(format!(
                "Baseline ({} workers) requests not answered with 2xx: {}.",
                b.workers,
                counts_text(&failed)
            ));
        }
    }
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

/// Adds a line naming the requests not answered with 2xx `when`, if there were any.
fn append_failures(text: &mut String, requests: &RequestCounts, when: &str) {
    let failed = failures(requests);
    if !failed.is_empty() {
        let _ = write!(
            text,
            "\nRequests not answered with 2xx{when}: {}.",
            counts_text(&failed)
        );
    }
}

fn counts_text(counts: &BTreeMap<String, f64>) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{k} {}", number(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rows: every `VERB resource` in any column; cells: count / `per`.
fn breakdown_table(columns: &[(String, BTreeMap<String, f64>)], per: f64) -> Table {
    let mut table = Table::numeric(
        "request".to_string(),
        columns.iter().map(|(label, _)| label.clone()),
    );
    let rows: BTreeSet<&String> = columns.iter().flat_map(|(_, c)| c.keys()).collect();
    for row in rows {
        table.row(
            std::iter::once(format!("`{row}`")).chain(columns.iter().map(|(_, c)| {
                c.get(row)
                    .map_or_else(|| "–".to_string(), |v| format!("{:.2}", v / per))
            })),
        );
    }
    table.row(
        std::iter::once("**total**".to_string()).chain(
            columns
                .iter()
                .map(|(_, c)| format!("**{:.2}**", c.values().sum::<f64>() / per)),
        ),
    );
    table
}

/// A per-minute cell: the value, or `–` for none.
fn rate_cell(value: f64, text: impl FnOnce(f64) -> String) -> String {
    if value > 0.0 {
        text(value)
    } else {
        "–".to_string()
    }
}

fn render_steady(doc: &mut Markdown, r: &Results) {
    let n = r.settings.clusters;
    doc.heading(2, "Steady state");
    doc.paragraph(format!(
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
         `quorate_operator_reconciles_total`.",
        r.settings.settle.as_secs(),
        r.settings.steady.as_secs_f64() / 60.0,
        r.settings.background.as_secs()
    ));
    let mut table = Table::numeric(
        "run",
        [
            "window",
            "all requests",
            "API server alone, per min",
            "operator's requests per min",
            "**per min per cluster**",
            "passes per min",
            "per cluster",
            "requests per pass",
            "mean pass",
            "operator CPU",
            "API server CPU",
            "its etcd's CPU",
        ],
    );
    for run in &r.runs {
        let minutes = run.steady.elapsed.as_secs_f64() / 60.0;
        let operator_per_min = run.steady_operator_requests() / minutes.max(f64::MIN_POSITIVE);
        let passes = run.steady_passes.total_passes();
        table.row([
            run.label(),
            secs(run.steady.elapsed),
            number(resource_total(&run.steady.requests)),
            format!("{:.1}", run.background.per_minute()),
            format!("{operator_per_min:.1}"),
            format!("**{:.2}**", run.steady_per_minute_per_cluster(n)),
            format!("{:.0}", run.steady_passes_per_minute()),
            format!("{:.2}", run.steady_passes_per_minute() / n.max(1) as f64),
            format!("{:.2}", run.steady_operator_requests() / passes.max(1.0)),
            run.steady_passes
                .mean_pass()
                .map(|s| format!("{:.1} ms", s * 1e3))
                .unwrap_or_else(|| "–".to_string()),
            cpu_share(run.cpu_steady, run.steady.elapsed),
            cpu_share(run.apiserver_cpu_steady, run.steady.elapsed),
            cpu_share(run.etcd_cpu_steady, run.steady.elapsed),
        ]);
    }
    doc.table(&table);
    for run in &r.runs {
        render_steady_requests(doc, run, n);
    }
}

/// One run's steady-state requests by verb and resource.
fn render_steady_requests(doc: &mut Markdown, run: &OperatorRun, n: usize) {
    let minutes = run.steady.elapsed.as_secs_f64() / 60.0;
    doc.paragraph(format!(
        "By verb and resource ({}): count in the window, per minute, the API server \
         alone per minute, and the operator's share per minute and per minute per \
         cluster.",
        run.label()
    ));
    let mut table = Table::numeric(
        "request",
        [
            "in the window",
            "per min",
            "API server alone, per min",
            "operator's, per min",
            "**per min per cluster**",
        ],
    );
    let share = run.steady_share();
    let steady = by_verb_resource(&run.steady.requests, true);
    let background = by_verb_resource(&run.background.requests, true);
    let background_minutes = run.background.elapsed.as_secs_f64() / 60.0;
    let rows: BTreeSet<&String> = steady.keys().chain(background.keys()).collect();
    for row in rows {
        let count = steady.get(row).copied().unwrap_or(0.0);
        let alone =
            background.get(row).copied().unwrap_or(0.0) / background_minutes.max(f64::MIN_POSITIVE);
        let operators =
            share.get(row.as_str()).copied().unwrap_or(0.0) / minutes.max(f64::MIN_POSITIVE);
        table.row([
            format!("`{row}`"),
            number(count),
            format!("{:.1}", count / minutes.max(f64::MIN_POSITIVE)),
            rate_cell(alone, |v| format!("{v:.1}")),
            rate_cell(operators, |v| format!("{v:.1}")),
            rate_cell(operators, |v| format!("**{:.3}**", v / n.max(1) as f64)),
        ]);
    }
    doc.table(&table);
    let mut text = format!(
        "Passes in the window by result: {}. Between the last reconcile and the window \
         ({} s): {} requests, passes {}.",
        passes_text(&run.steady_passes),
        run.settle.elapsed.as_secs(),
        number(resource_total(&run.settle.requests)),
        passes_text(&run.settle_passes)
    );
    append_failures(&mut text, &run.steady.requests, " in the window");
    doc.paragraph(text);
}

fn render_memory(doc: &mut Markdown, r: &Results) {
    doc.heading(2, "Memory");
    doc.paragraph(format!(
        "The operator process's resident memory from `/proc/<pid>/status`: `VmRSS` sampled \
         every {} ms from its start, and `VmHWM` (the kernel's own peak) read just before it \
         was stopped.",
        super::process::RSS_SAMPLE_PERIOD.as_millis()
    ));
    let mut table = Table::numeric(
        "run",
        [
            "idle (no `Etcd`)",
            "peak while reconciling",
            "when all were reconciled",
            "end of steady state",
            "**`VmHWM`**",
            "samples",
        ],
    );
    for run in &r.runs {
        table.row([
            run.label(),
            mib(run.rss_idle_kib),
            mib(run.rss_peak_burst_kib),
            mib(run.rss_converged_kib),
            mib(run.rss_steady_end_kib),
            format!("**{}**", mib(run.peak_kib())),
            run.memory.samples.to_string(),
        ]);
    }
    doc.table(&table);
    if let Some(head) = r.runs.first() {
        render_cached(doc, head);
    }
}

/// What the operator's caches hold, as served and as it keeps them.
fn render_cached(doc: &mut Markdown, head: &OperatorRun) {
    doc.paragraph(
        "What the operator keeps in memory: every `Etcd` (the controller's store) and its \
         caches of StatefulSets, Leases and Pods carrying druid's managed-by label, each \
         filled by a watch, every object trimmed before it is stored (`quorate_operator::trim`: \
         no `metadata.managedFields` or kubectl's last-applied annotation anywhere, and of a \
         Pod only its metadata and its containers' readiness). Listed at the end, as JSON, \
         and deserialized into the same Rust types in the benchmark process, which counts \
         the heap they keep (malloc chunks, each object in an `Arc` as in a reflector \
         store), as served and trimmed by the operator's own functions:",
    );
    let mut table = Table::numeric(
        "cached",
        [
            "objects",
            "JSON",
            "as served",
            "per object",
            "as the operator keeps them",
            "per object",
        ],
    );
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
        table.row([
            l.what.clone(),
            l.count.to_string(),
            mib_bytes(l.bytes as u64),
            mib_bytes(c.heap),
            per_object(c.heap, l.count),
            mib_bytes(c.heap_cached),
            per_object(c.heap_cached, l.count),
        ]);
    }
    table.row([
        "**total**".to_string(),
        String::new(),
        format!("**{}**", mib_bytes(json)),
        format!("**{}**", mib_bytes(heap)),
        String::new(),
        format!("**{}**", mib_bytes(kept)),
        String::new(),
    ]);
    doc.table(&table);
    let growth = head.peak_kib().saturating_sub(head.rss_idle_kib) * 1024;
    doc.paragraph(format!(
        "The peak exceeds the idle process by {}; the cached objects, as the operator keeps \
         them, take {} ({:.0}% of that growth; {} as served).",
        mib_bytes(growth),
        mib_bytes(kept),
        100.0 * kept as f64 / growth.max(1) as f64,
        mib_bytes(heap),
    ));
}

fn render_components(doc: &mut Markdown, r: &Results) {
    doc.heading(2, "Components stored");
    doc.paragraph(format!(
        "Objects with druid's managed-by label listed at the end of each run, against what \
         {} clusters of the example should have.",
        r.settings.clusters
    ));
    let mut headers = vec!["expected".to_string()];
    let mut columns: Vec<&[(Listed, usize)]> = Vec::new();
    for (b, run) in r.baselines.iter().zip(&r.runs) {
        headers.push(format!("baseline, {} workers", b.workers));
        headers.push(format!("operator, {}", run.short_label()));
        columns.push(&b.components);
        columns.push(&run.components);
    }
    let mut table = Table::numeric("resource".to_string(), headers);
    if let Some(first) = columns.first() {
        for (i, (listed, expected)) in first.iter().enumerate() {
            table.row(
                [listed.what.clone(), expected.to_string()]
                    .into_iter()
                    .chain(columns.iter().map(|column| {
                        column
                            .get(i)
                            .map(|(l, _)| l.count.to_string())
                            .unwrap_or_else(|| "–".to_string())
                    })),
            );
        }
    }
    doc.table(&table);
}

fn render_notes(doc: &mut Markdown, r: &Results) {
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
    doc.heading(2, "Notes");
    doc.bullets(notes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::metrics::RequestKey;
    use crate::operator::process::Memory;
    use crate::operator::results::{Phase, Settings};
    use crate::report::MachineFacts;

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
            convergence: convergence(10_500),
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
            machine: MachineFacts {
                cpus: 2,
                ..MachineFacts::default()
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
            rounds: Vec::new(),
        }
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
            text.contains("| all 2 reconciled once, from the first create | **10.50 s** | 10.00 s"),
            "{text}"
        );
        assert!(
            text.contains("| 1.05x | ≤ 1.1x the baseline | PASS |"),
            "{text}"
        );
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
        // At the memory target is within it.
        let mut at_limit = results();
        at_limit.runs[0].memory.hwm_kib = Some(96 * 1024);
        assert!(render(&at_limit).contains("**Verdict: PASS**"));
        let mut slow = results();
        slow.runs[0].convergence.converged = Some(Duration::from_millis(11_500));
        let text = render(&slow);
        assert!(text.contains("**Verdict: FAIL**"), "{text}");
        assert!(
            text.contains("| 1.15x | ≤ 1.1x the baseline | **FAIL** |"),
            "{text}"
        );
        let mut big = results();
        big.runs[0].memory.hwm_kib = Some(97 * 1024);
        let text = render(&big);
        assert!(text.contains("**Verdict: FAIL**"), "{text}");
        assert!(text.contains("| ≤ 96.0 MiB | **FAIL** |"), "{text}");
    }

    #[test]
    fn rounds_are_listed_and_memory_is_judged_on_the_largest_peak() {
        let mut r = results();
        let round = |o: u64, peak_kib: u64| super::super::results::Round {
            baseline: Some(Duration::from_millis(10_000)),
            operator: Some(Duration::from_millis(o)),
            peak_kib,
        };
        r.rounds = vec![
            round(14_400, 40 * 1024),
            round(10_500, 40 * 1024),
            round(9_800, 97 * 1024),
        ];
        let text = render(&r);
        assert!(text.contains("**Rounds**: 3 pairs"), "{text}");
        assert!(
            text.contains("| 2 (headline) | 10.00 s | 10.50 s | 1.05x | 40.0 MiB |"),
            "{text}"
        );
        assert!(text.contains("| 1 | 10.00 s | 14.40 s | 1.44x |"), "{text}");
        // The third round's peak is over the target, so memory fails although the headline
        // run's own peak is within it.
        assert!(text.contains("| ≤ 96.0 MiB | **FAIL** |"), "{text}");
        assert!(text.contains("**Verdict: FAIL**"), "{text}");
        // One round: no rounds paragraph.
        assert!(!render(&results()).contains("**Rounds**"));
        // Every replica's workers count: 10.5 s × 6 workers over 6 requests.
        let mut sharded = results();
        sharded.runs[0].replicas = 2;
        let text = render(&sharded);
        assert!(
            text.contains("Its 6 workers spent 10500.0 ms per request"),
            "{text}"
        );
    }
}
