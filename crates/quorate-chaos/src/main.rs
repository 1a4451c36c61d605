//! `quorate-chaos`: runs the fault-injection suite against the `quorate` binary and writes the
//! report. `scripts/chaos.sh` builds both and calls it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
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
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    clients: u32,
    /// Where to write the Markdown report.
    #[arg(long)]
    report: Option<PathBuf>,
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
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let started = Instant::now();
    let mut reports = Vec::new();
    let mut failed = false;
    let mut failures = Vec::new();
    let mut n = 0;
    while started.elapsed() < total {
        let left = total.saturating_sub(started.elapsed());
        let plan = RunPlan {
            quorate_bin: args.quorate_bin.clone(),
            seed: seed + n,
            duration: run_length.min(left).max(Duration::from_secs(30)),
            max_steps: None,
            steps: None,
            clients: args.clients,
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
    let command = format!(
        "scripts/chaos.sh --duration {} --seed {seed}",
        args.duration
    );
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
