//! The run's report as Markdown: the summary row, time to heal per kind of step, every step
//! with its time, and every anomaly (there must be none).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::run::RunReport;

/// Renders `reports` (one per run that finished) and `failures` (seed, error of each run the
/// harness could not finish) with the command that produced them.
pub fn render(reports: &[RunReport], failures: &[(u64, String)], command: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Fault-injection runs\n");
    let _ = writeln!(out, "Produced by `{command}`.\n");
    let _ = writeln!(
        out,
        "| seed | wall time | steps | operations checked | acknowledged writes | unknown writes (applied / not) | anomalies | acknowledged writes lost | longest acknowledged write | failed reads | quorate's checker | porcupine (history-check) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in reports {
        let c = &r.check;
        let _ = writeln!(
            out,
            "| {} | {:.0} s | {} | {} | {} | {} / {} | {} | {} | {} ms | {} | {} | {} |",
            r.seed,
            r.elapsed_s,
            r.steps.len(),
            c.operations_checked,
            c.acknowledged_writes,
            c.unknown_writes_applied,
            c.unknown_writes_not_applied,
            c.anomalies.len() + r.other_anomalies.len(),
            c.lost_acknowledged_writes,
            r.longest_write_ms,
            r.failed_reads,
            if c.passed() {
                "linearizable"
            } else {
                "not linearizable"
            },
            second_cell(r),
        );
    }
    let mut heal: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in reports {
        for s in &r.steps {
            heal.entry(s.step.kind()).or_default().push(s.heal_s);
        }
    }
    let _ = writeln!(
        out,
        "\n## Time to heal, per kind of step\n\nFrom the end of the fault (or of the operation) until every member answers a linearizable read on its own; after a store fault or a clock skew, also until the bucket holds the cluster's revision again.\n"
    );
    let _ = writeln!(out, "| step | times | median | max |");
    let _ = writeln!(out, "|---|---|---|---|");
    for (kind, mut times) in heal {
        times.sort_by(f64::total_cmp);
        let _ = writeln!(
            out,
            "| {kind} | {} | {:.1} s | {:.1} s |",
            times.len(),
            times[times.len() / 2],
            times[times.len() - 1]
        );
    }
    for (seed, error) in failures {
        let first = error.lines().take(3).collect::<Vec<_>>().join("\n");
        let _ = writeln!(
            out,
            "\n## Seed {seed}: the run could not finish\n\n```\n{first}\n```"
        );
    }
    for r in reports {
        let _ = writeln!(out, "\n## Seed {}\n", r.seed);
        for u in &r.unavailable {
            let _ = writeln!(out, "- not injected on this machine: {u}");
        }
        if let Some(path) = &r.history_file {
            let _ = writeln!(out, "- history: `{}`", path.display());
        }
        match &r.second {
            Some(second) => {
                let _ = writeln!(out, "- porcupine (history-check): {}", second.line);
            }
            None => {
                let _ = writeln!(out, "- porcupine (history-check): not run");
            }
        }
        let l = &r.leases;
        let _ = writeln!(
            out,
            "- leases (checked apart, see `crates/quorate-chaos/src/leases.rs`): {} granted, {} \
             keep-alives answered, {} revoked, {} seen expired, {} back after a restore; {} reads \
             judged, {} anomalies",
            l.granted,
            l.kept_alive,
            l.revoked,
            l.expired,
            l.resurrected,
            l.judged_reads,
            l.anomalies.len()
        );
        if r.checkers_disagree() {
            let _ = writeln!(
                out,
                "- **the checkers disagree**: quorate's says {}",
                if r.check.passed() {
                    "linearizable"
                } else {
                    "not linearizable"
                }
            );
        }
        let _ = writeln!(out, "\n| at | step | healed after |\n|---|---|---|");
        for s in &r.steps {
            let _ = writeln!(out, "| {:.1} s | {} | {:.1} s |", s.at_s, s.step, s.heal_s);
        }
        if !r.passed() {
            let _ = writeln!(out, "\n### Anomalies\n");
            for a in &r.check.anomalies {
                let _ = writeln!(out, "```\n{a}\n```");
            }
            for a in &r.other_anomalies {
                let _ = writeln!(out, "- {a}");
            }
        }
    }
    out
}

/// The second checker's verdict for the summary table.
fn second_cell(r: &RunReport) -> &'static str {
    use crate::second_checker::SecondVerdictKind as K;
    match r.second.as_ref().map(|s| s.kind) {
        None => "not run",
        Some(K::Linearizable) => "linearizable",
        Some(K::NotLinearizable) => "not linearizable",
        Some(K::Undecided) => "undecided",
        Some(K::Failed) => "did not run",
    }
}
