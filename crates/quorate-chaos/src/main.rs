//! `quorate-chaos`: runs the fault-injection suite against the `quorate` binary and writes the
//! report. `scripts/chaos.sh` builds both and calls it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use quorate_chaos::faults::{LATEST_DRAW, every_fault_once};
use quorate_chaos::report::render;
use quorate_chaos::run::{RunPlan, run};

/// Fault injection against a local quorate cluster, checked for linearizability.
#[derive(Debug, Parser)]
struct Args {
    /// The `quorate` binary under test.
    #[arg(long)]
    quorate_bin: PathBuf,
    /// How long to inject faults in all (Go duration: 30m, 90s); runs of --run-length each.
    #[arg(long, default_value = "5m")]
    duration: String,
    /// Length of one run (one cluster, one history).
    #[arg(long, default_value = "10m")]
    run_length: String,
    /// Seed of the first run; run n uses seed + n. Default: from the clock (printed).
    #[arg(long)]
    seed: Option<u64>,
    /// The table the schedule is drawn from (see `faults::LATEST_DRAW`): a seed recorded with
    /// an older table replays with that table. Every report's command line names it.
    #[arg(long, default_value_t = LATEST_DRAW, value_parser = clap::value_parser!(u32).range(1..=i64::from(LATEST_DRAW)))]
    draw: u32,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    clients: u32,
    /// Where to write the Markdown report.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where each run's history goes (`history-seed-<seed>.jsonl`, JSON lines as
    /// docs/reference/history-format.md describes).
    #[arg(long, default_value = "quorate-chaos-histories")]
    history_dir: PathBuf,
    /// The second checker (tools/history-check, built by scripts/build-history-check.sh);
    /// default ~/.cache/quorate/bin/history-check. Without it the run fails: every history is
    /// checked twice.
    #[arg(long)]
    history_check: Option<PathBuf>,
    /// The short fixed run: one run of every kind of fault and operation once (seed 13 unless
    /// --seed says otherwise), instead of a drawn schedule for --duration.
    #[arg(long)]
    short: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let parse = |s: &str| {
        quorate_api::duration::parse_go_duration(s).unwrap_or_else(|e| {
            eprintln!("quorate-chaos: invalid duration {s:?}: {e}");
            std::process::exit(2)
        })
    };
    let (total, run_length) = (parse(&args.duration), parse(&args.run_length));
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let Some(history_check) = args
        .history_check
        .clone()
        .or_else(quorate_chaos::second_checker::default_binary)
    else {
        eprintln!(
            "quorate-chaos: the second checker is not installed: run scripts/build-history-check.sh or pass --history-check"
        );
        return ExitCode::FAILURE;
    };
    if let Err(e) = std::fs::create_dir_all(&args.history_dir) {
        eprintln!(
            "quorate-chaos: cannot create {}: {e}",
            args.history_dir.display()
        );
        return ExitCode::FAILURE;
    }
    let seed = if args.short {
        args.seed.unwrap_or(13)
    } else {
        seed
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let started = Instant::now();
    let mut reports = Vec::new();
    let mut failed = false;
    let mut failures = Vec::new();
    let mut n = 0;
    while (args.short && n == 0) || (!args.short && started.elapsed() < total) {
        let left = total.saturating_sub(started.elapsed());
        let plan = RunPlan {
            quorate_bin: args.quorate_bin.clone(),
            seed: seed + n,
            draw: args.draw,
            duration: if args.short {
                Duration::MAX
            } else {
                run_length.min(left).max(Duration::from_secs(30))
            },
            max_steps: None,
            steps: args.short.then(every_fault_once),
            clients: args.clients,
            history_file: Some(
                args.history_dir
                    .join(format!("history-seed-{}.jsonl", seed + n)),
            ),
            history_check: Some(history_check.clone()),
        };
        n += 1;
        eprintln!("[chaos] run {n}, seed {} ({:?})", plan.seed, plan.duration);
        match runtime.block_on(run(plan)) {
            Ok(report) => {
                for a in &report.check.anomalies {
                    eprintln!("[chaos] ANOMALY: {a}");
                }
                for a in &report.other_anomalies {
                    eprintln!("[chaos] ANOMALY: {a}");
                }
                if let Some(second) = &report.second {
                    eprintln!("[chaos] porcupine (history-check): {}", second.line);
                }
                if report.checkers_disagree() {
                    eprintln!(
                        "[chaos] THE CHECKERS DISAGREE: quorate's says {}",
                        report.check
                    );
                }
                failed |= !report.passed();
                reports.push(report);
            }
            Err(e) => {
                eprintln!("[chaos] run with seed {} failed: {e}", seed + n - 1);
                failed = true;
                failures.push((seed + n - 1, e.to_string()));
            }
        }
    }
    let command = if args.short {
        format!("scripts/chaos.sh --short --seed {seed}")
    } else {
        format!(
            "scripts/chaos.sh --duration {} --seed {seed} --draw {}",
            args.duration, args.draw
        )
    };
    let text = render(&reports, &failures, &command);
    match &args.report {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!("quorate-chaos: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        None => print!("{text}"),
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
