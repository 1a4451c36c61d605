//! What `quorate-bench operator` measures (convergence, steady-state phases, memory, per run
//! and baseline) and the arithmetic on it; [`super::report`] turns it into the markdown report.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::report::MachineFacts;

use super::metrics::{OperatorCounters, RequestCounts, operator_share, resource_total};
use super::process::Memory;
use super::workload::{Cached, Created, Listed};

/// Target from the issue: every `Etcd` reconciled once within this multiple of the time the
/// plain client of the same run took for the same first passes.
pub const TARGET_RATIO: f64 = 1.1;
/// Target from the issue: the operator's peak resident memory stays at or under this.
pub const TARGET_PEAK_RSS_KIB: u64 = 96 * 1024;

/// Whether `operator` reconciled everything within [`TARGET_RATIO`] of `baseline`'s time
/// (false when either did not finish).
pub fn within_target(operator: Option<Duration>, baseline: Option<Duration>) -> bool {
    match (operator, baseline) {
        (Some(o), Some(b)) => o.as_secs_f64() <= b.as_secs_f64() * TARGET_RATIO,
        _ => false,
    }
}

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
    pub(super) fn minutes(&self) -> f64 {
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
    /// Operator processes, each with `--shard I/replicas` (1: one process, unsharded).
    pub replicas: u32,
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
        format!("`quorate operator`, {}", self.short_label())
    }

    /// The label without the program's name: the workers, and the shards when more than one.
    pub fn short_label(&self) -> String {
        if self.replicas > 1 {
            format!("{} replicas × {} workers", self.replicas, self.workers)
        } else {
            format!("{} workers", self.workers)
        }
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
    pub machine: MachineFacts,
    /// One baseline per operator run, with its worker count, in the same order.
    pub baselines: Vec<BaselineRun>,
    /// The operator runs; the first is the headline.
    pub runs: Vec<OperatorRun>,
    /// Every round of the headline comparison, in the order run; the headline pair (the
    /// first of `baselines` and `runs`) is the round with the median ratio.
    pub rounds: Vec<Round>,
}

/// One round of the headline comparison: a baseline, then an operator run, each on a fresh
/// API server. Rounds exist because one pair on a shared 2-CPU machine varies by more than
/// the target's margin.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Round {
    /// The baseline's time until all were reconciled (`None`: not within the timeout).
    pub baseline: Option<Duration>,
    /// The operator's time until all were reconciled.
    pub operator: Option<Duration>,
    /// The operator's peak resident memory (largest replica).
    pub peak_kib: u64,
}

impl Round {
    /// Operator time over baseline time; `None` if either did not finish.
    pub fn ratio(&self) -> Option<f64> {
        let (o, b) = (self.operator?, self.baseline?);
        (!b.is_zero()).then(|| o.as_secs_f64() / b.as_secs_f64())
    }
}

/// The index of the round with the median ratio (of an even count the upper middle one, the
/// worse); a round that did not finish ranks above every finished one.
pub fn median_round(rounds: &[Round]) -> usize {
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| rounds[i].ratio().unwrap_or(f64::INFINITY);
        key(a).total_cmp(&key(b))
    });
    order.get(rounds.len() / 2).copied().unwrap_or(0)
}

/// A duration as the report writes it.
pub(super) fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// KiB as MiB, as the report writes them.
pub(super) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
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
    fn the_headline_round_is_the_median_ratio_and_unfinished_rounds_rank_last() {
        let round = |b: u64, o: Option<u64>| Round {
            baseline: Some(ms(b)),
            operator: o.map(ms),
            peak_kib: 1,
        };
        let rounds = [
            round(100, Some(150)),
            round(100, Some(90)),
            round(100, Some(110)),
        ];
        assert_eq!(median_round(&rounds), 2);
        // An unfinished round is the worst; of an even count the upper middle one.
        let rounds = [
            round(100, None),
            round(100, Some(120)),
            round(100, Some(100)),
        ];
        assert_eq!(median_round(&rounds), 1);
        assert_eq!(median_round(&rounds[1..]), 0);
        assert_eq!(median_round(&[]), 0);
    }
}
