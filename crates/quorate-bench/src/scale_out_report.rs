//! `quorate-bench scale-out`: results of the rounds and the markdown report: both methods side
//! by side, the ratio, the verdict against the targets, where the time went, and the machine it
//! ran on.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::observe::{Converged, LeaderReport, MemberTimeline, WriteCounts};
use crate::report::{Align, MachineFacts, Markdown, Table, met, pass};

/// Targets from the issue: quorate within this factor of the hand procedure ...
pub const TARGET_RATIO: f64 = 1.3;

/// How the scale-out was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    /// `quorate apply` with `spec.replicas: 3`.
    Quorate,
    /// `etcdctl member add --learner` / start / `member promote`, twice.
    Hand,
}

impl Method {
    /// Row label in the tables.
    pub fn label(self) -> &'static str {
        match self {
            Method::Quorate => "quorate (`apply`, replicas 1 → 3)",
            Method::Hand => "by hand (`etcdctl member add --learner`, start, `promote`)",
        }
    }

    /// Short name for progress lines and per-round rows.
    pub fn short(self) -> &'static str {
        match self {
            Method::Quorate => "quorate",
            Method::Hand => "by hand",
        }
    }
}

/// One scale-out, measured.
#[derive(Clone, Debug)]
pub struct RoundResult {
    /// How it was done.
    pub method: Method,
    /// Round number, from 1.
    pub round: u32,
    /// Start until the member list showed three started voters.
    pub elapsed: Duration,
    /// When each new member was added, started and promoted.
    pub joined: Vec<MemberTimeline>,
    /// Writes during the scale-out.
    pub writes: WriteCounts,
    /// The first distinct write errors.
    pub write_errors: Vec<String>,
    /// Leader-ID changes seen.
    pub leader_changes: u32,
    /// Raft term increase seen.
    pub term_increases: u64,
    /// The changes, with their time relative to the start.
    pub leader_events: Vec<String>,
    /// etcd's refusals that were waited out (hand procedure), by call and reason.
    pub refusals: BTreeMap<String, u32>,
    /// Anything else worth telling.
    pub notes: Vec<String>,
}

impl RoundResult {
    /// A result from what the observers saw; `t0` is the start of the scale-out.
    pub fn new(
        method: Method,
        round: u32,
        t0: Instant,
        converged: Converged,
        leader: LeaderReport,
    ) -> RoundResult {
        let leader_events = leader
            .events
            .iter()
            .map(|(at, what)| format!("{}: {what}", signed_seconds(*at, t0)))
            .collect();
        RoundResult {
            method,
            round,
            elapsed: converged.elapsed,
            joined: converged.joined,
            writes: WriteCounts::default(),
            write_errors: Vec::new(),
            leader_changes: leader.leader_changes,
            term_increases: leader.term_increases,
            leader_events,
            refusals: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    /// Adds the writer's counts and errors.
    pub fn with_writes(mut self, writes: WriteCounts, errors: Vec<String>) -> RoundResult {
        self.writes = writes;
        self.write_errors = errors;
        self
    }

    /// Adds the refusals waited out.
    pub fn with_refusals(mut self, refusals: BTreeMap<String, u32>) -> RoundResult {
        self.refusals = refusals;
        self
    }

    /// Adds notes.
    pub fn with_notes(mut self, notes: Vec<String>) -> RoundResult {
        self.notes = notes;
        self
    }

    /// One line for the progress output.
    pub fn progress_line(&self) -> String {
        format!(
            "round {} {}: {} ({} writes ok, {} failed, {} leader changes, {} term increases)",
            self.round,
            self.method.short(),
            secs(self.elapsed),
            self.writes.ok,
            self.writes.failed,
            self.leader_changes,
            self.term_increases
        )
    }
}

fn signed_seconds(at: Instant, t0: Instant) -> String {
    match at.checked_duration_since(t0) {
        Some(after) => format!("+{:.2} s", after.as_secs_f64()),
        None => format!("-{:.2} s", (t0 - at).as_secs_f64()),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The median of `values` (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[Duration]) -> Option<Duration> {
    let mut sorted = values.to_vec();
    sorted.sort();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
    }
}

/// One method's rounds, summarised.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Median time.
    pub median: Duration,
    /// Fastest round.
    pub min: Duration,
    /// Slowest round.
    pub max: Duration,
    /// Writes acknowledged, all rounds.
    pub writes_ok: u64,
    /// Writes failed, all rounds.
    pub writes_failed: u64,
    /// Leader changes, all rounds.
    pub leader_changes: u32,
    /// Raft term increases, all rounds.
    pub term_increases: u64,
    /// Rounds summarised.
    pub rounds: usize,
}

/// Summarises the rounds of `method`; `None` when there are none.
pub fn summarize(results: &[RoundResult], method: Method) -> Option<Summary> {
    let rounds: Vec<&RoundResult> = results.iter().filter(|r| r.method == method).collect();
    let times: Vec<Duration> = rounds.iter().map(|r| r.elapsed).collect();
    Some(Summary {
        median: median(&times)?,
        min: *times.iter().min()?,
        max: *times.iter().max()?,
        writes_ok: rounds.iter().map(|r| r.writes.ok).sum(),
        writes_failed: rounds.iter().map(|r| r.writes.failed).sum(),
        leader_changes: rounds.iter().map(|r| r.leader_changes).sum(),
        term_increases: rounds.iter().map(|r| r.term_increases).sum(),
        rounds: rounds.len(),
    })
}

/// The verdict against the targets: ratio ≤ [`TARGET_RATIO`], no failed write, no election.
pub fn verdict(quorate: &Summary, ratio: f64) -> String {
    let ratio_ok = ratio <= TARGET_RATIO;
    let writes_ok = quorate.writes_failed == 0;
    let elections_ok = quorate.leader_changes == 0 && quorate.term_increases == 0;
    format!(
        "**Verdict: {}** — time ratio {ratio:.2}x (target ≤ {TARGET_RATIO}x: {}), \
         {} failed writes (target 0: {}), {} leader changes / {} term increases \
         (target 0 elections: {}).",
        pass(ratio_ok && writes_ok && elections_ok),
        met(ratio_ok),
        quorate.writes_failed,
        met(writes_ok),
        quorate.leader_changes,
        quorate.term_increases,
        met(elections_ok),
    )
}

fn phase(
    joined: &[MemberTimeline],
    index: usize,
    pick: fn(&MemberTimeline) -> Option<Duration>,
) -> Option<Duration> {
    joined.get(index).and_then(pick)
}

fn median_cell(values: Vec<Option<Duration>>) -> String {
    if values.iter().any(Option::is_none) {
        return "–".to_string();
    }
    let values: Vec<Duration> = values.into_iter().flatten().collect();
    median(&values).map(secs).unwrap_or_else(|| "–".to_string())
}

/// The full markdown report.
pub fn render(results: &[RoundResult], machine: &MachineFacts) -> String {
    let mut doc = Markdown::new();
    let quorate = summarize(results, Method::Quorate);
    let hand = summarize(results, Method::Hand);
    let rounds = quorate.as_ref().map(|s| s.rounds).unwrap_or(0);

    doc.heading(1, "Scale-out 1 → 3: quorate vs. the same steps by hand");
    doc.paragraph(format!(
        "{rounds} round(s) per method, alternating which goes first; fresh directories and ports \
         every round; etcd {} with its default raft timing (100 ms heartbeat, 1000 ms election) \
         for both. Time runs from the start of the scale-out (`quorate apply`, or the first \
         `etcdctl member add`) until etcd's member list (read every 50 ms) shows 3 started \
         voting members. Meanwhile one client writes to the initial member without pause \
         (5 s timeout per put) and every member's leader ID and raft term are read every 100 ms.",
        machine.etcd_version()
    ));
    let mut table = Table::numeric(
        "method",
        [
            "median",
            "min",
            "max",
            "writes ok",
            "failed writes",
            "leader changes",
            "raft term increases",
        ],
    );
    for (method, summary) in [(Method::Quorate, &quorate), (Method::Hand, &hand)] {
        if let Some(s) = summary {
            table.row([
                method.label().to_string(),
                secs(s.median),
                secs(s.min),
                secs(s.max),
                s.writes_ok.to_string(),
                s.writes_failed.to_string(),
                s.leader_changes.to_string(),
                s.term_increases.to_string(),
            ]);
        }
    }
    doc.table(&table);
    doc.paragraph("Writes and leader changes are totals over all rounds.");
    if let (Some(q), Some(h)) = (&quorate, &hand) {
        let ratio = q.median.as_secs_f64() / h.median.as_secs_f64();
        doc.paragraph(format!(
            "**Ratio quorate / by hand (medians): {ratio:.2}x**"
        ));
        doc.paragraph(verdict(q, ratio));
    }

    doc.heading(2, "Where the time goes");
    doc.paragraph(
        "Median seconds after the start at which the member list first showed each step \
         (\"started\" = the member's etcd runs and has published its name through the leader).",
    );
    let mut table = Table::numeric(
        "method",
        [
            "2nd member added",
            "started",
            "voter",
            "3rd member added",
            "started",
            "voter",
            "done",
        ],
    );
    for method in [Method::Quorate, Method::Hand] {
        let rows: Vec<&RoundResult> = results.iter().filter(|r| r.method == method).collect();
        if rows.is_empty() {
            continue;
        }
        let column = |index: usize, pick: fn(&MemberTimeline) -> Option<Duration>| {
            median_cell(rows.iter().map(|r| phase(&r.joined, index, pick)).collect())
        };
        table.row([
            method.short().to_string(),
            column(0, |m| Some(m.added)),
            column(0, |m| m.started),
            column(0, |m| m.voter),
            column(1, |m| Some(m.added)),
            column(1, |m| m.started),
            column(1, |m| m.voter),
            median_cell(rows.iter().map(|r| Some(r.elapsed)).collect()),
        ]);
    }
    doc.table(&table);

    doc.heading(2, "Rounds");
    let mut table = Table::new([
        ("round", Align::Right),
        ("method", Align::Left),
        ("time", Align::Right),
        ("writes ok", Align::Right),
        ("failed writes", Align::Right),
        ("leader changes", Align::Right),
        ("term increases", Align::Right),
        ("notes", Align::Left),
    ]);
    for r in results {
        let mut notes: Vec<String> = r.notes.clone();
        notes.extend(r.refusals.iter().map(|(what, n)| format!("{what} ×{n}")));
        notes.extend(r.write_errors.iter().map(|e| format!("write error: {e}")));
        notes.extend(r.leader_events.iter().cloned());
        table.row([
            r.round.to_string(),
            r.method.short().to_string(),
            secs(r.elapsed),
            r.writes.ok.to_string(),
            r.writes.failed.to_string(),
            r.leader_changes.to_string(),
            r.term_increases.to_string(),
            notes.join("; "),
        ]);
    }
    doc.table(&table);

    doc.machine(
        machine,
        "cargo build --release -p quorate -p quorate-bench && \
         target/release/quorate-bench scale-out --output docs/benchmarks/scale-out.md",
    );
    doc.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn result(method: Method, round: u32, elapsed: u64, failed: u64) -> RoundResult {
        RoundResult {
            method,
            round,
            elapsed: ms(elapsed),
            joined: vec![
                MemberTimeline {
                    id: 1,
                    name: "a".into(),
                    added: ms(10),
                    started: Some(ms(200)),
                    voter: Some(ms(300)),
                },
                MemberTimeline {
                    id: 2,
                    name: "b".into(),
                    added: ms(5000),
                    started: Some(ms(5200)),
                    voter: Some(ms(elapsed)),
                },
            ],
            writes: WriteCounts {
                ok: 100,
                failed,
                ..WriteCounts::default()
            },
            write_errors: Vec::new(),
            leader_changes: 0,
            term_increases: 0,
            leader_events: Vec::new(),
            refusals: BTreeMap::from([("member add: unhealthy cluster".to_string(), 3)]),
            notes: Vec::new(),
        }
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[ms(3), ms(1), ms(2)]), Some(ms(2)));
        assert_eq!(
            median(&[ms(4), ms(1), ms(2), ms(3)]),
            Some(Duration::from_micros(2500))
        );
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn summary_totals_and_extremes() {
        let results = [
            result(Method::Quorate, 1, 7000, 0),
            result(Method::Hand, 1, 5000, 1),
            result(Method::Quorate, 2, 6000, 2),
        ];
        let q = summarize(&results, Method::Quorate).unwrap();
        assert_eq!((q.median, q.min, q.max), (ms(6500), ms(6000), ms(7000)));
        assert_eq!((q.writes_ok, q.writes_failed, q.rounds), (200, 2, 2));
        assert!(summarize(&results[..0], Method::Hand).is_none());
    }

    #[test]
    fn verdict_names_each_target() {
        let q = summarize(&[result(Method::Quorate, 1, 6000, 0)], Method::Quorate).unwrap();
        let pass = verdict(&q, 1.2);
        assert!(pass.starts_with("**Verdict: PASS**"), "{pass}");
        let fail = verdict(&q, 1.31);
        assert!(
            fail.starts_with("**Verdict: FAIL**") && fail.contains("1.31x"),
            "{fail}"
        );
        let mut bad = q.clone();
        bad.term_increases = 1;
        assert!(verdict(&bad, 1.0).contains("**missed**"));
    }

    #[test]
    fn report_has_both_rows_ratio_and_phases() {
        let results = [
            result(Method::Quorate, 1, 6000, 0),
            result(Method::Hand, 1, 5000, 0),
        ];
        let text = render(
            &results,
            &MachineFacts {
                cpus: 2,
                etcd_version: Some("3.4.23".into()),
                ..MachineFacts::default()
            },
        );
        assert!(
            text.contains(
                "| quorate (`apply`, replicas 1 → 3) | 6.00 s | 6.00 s | 6.00 s | 100 | 0 | 0 | 0 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("**Ratio quorate / by hand (medians): 1.20x**"),
            "{text}"
        );
        assert!(
            text.contains(
                "| by hand | 0.01 s | 0.20 s | 0.30 s | 5.00 s | 5.20 s | 5.00 s | 5.00 s |"
            ),
            "{text}"
        );
        assert!(text.contains("member add: unhealthy cluster ×3"), "{text}");
        assert!(text.contains("- CPUs (nproc): 2"), "{text}");
    }
}
