//! `quorate-bench`: programs that run a quorate operation and the same operation done by hand
//! in the same run, and print both side by side as a markdown table.
//!
//! `quorate-bench scale-out` scales a cluster from 1 to 3 members with `quorate apply` and by
//! hand with `etcdctl`, while a client keeps writing and the leader is watched.
//!
//! `quorate-bench scale-in` shrinks a cluster from 5 to 3 members the same two ways, with the
//! leader on a leaving member.
//!
//! `quorate-bench backup` measures full snapshots, restores, delta replay and write throughput
//! with delta backups on one large database, against `etcdctl` and against no backups.
//!
//! `quorate-bench operator` creates 500 `Etcd` objects on a real kube-apiserver and measures
//! `quorate operator` reconciling them (against a plain replay of its first passes), its API
//! requests in steady state and its peak memory.
//!
//! `quorate-bench encryption` uploads full and delta snapshots with and without backup
//! encryption.
//!
//! `quorate-bench defrag` defragments a 3-member cluster with a ≥ 1 GB database under 8
//! writing clients, in quorate's order and in druid's.
//!
//! `quorate-bench upgrade` takes a 3-member cluster 3.5 → 3.6 → 3.7 → 3.6 → 3.5 with
//! `quorate apply` and by hand (etcd's rolling procedure and downgrade API), step by step.
//!
//! Build both binaries first, so the default `--quorate` (next to this executable) exists:
//! `cargo build --release -p quorate -p quorate-bench`.

mod alloc_count;
mod backup;
mod defrag;
mod encryption;
mod error;
mod hand;
mod observe;
mod operator;
mod quorate_run;
mod report;
mod scale_in;
mod scale_out_report;
mod upgrade;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::error::{BenchError, Result};
use crate::report::{MachineFacts, QuorateBinary};
use crate::scale_out_report::{Method, RoundResult};

/// Counts live heap bytes on request (`quorate-bench operator` sizes the operator's caches);
/// otherwise the system allocator at the cost of one relaxed atomic load per call.
#[global_allocator]
static ALLOCATOR: alloc_count::CountingAlloc = alloc_count::CountingAlloc;

/// Benchmarks of quorate against the same procedure done by hand, measured in one run.
#[derive(Debug, Parser)]
#[command(name = "quorate-bench", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Scale a cluster 1 → 3 with quorate and with etcdctl by hand; print both times, the
    /// ratio, failed writes and leader changes.
    ScaleOut(ScaleOutArgs),
    /// Scale a cluster 5 → 3 with quorate and with etcdctl by hand (move-leader, member
    /// remove, stop); print both times, the ratio, failed writes and elections by timeout.
    ScaleIn(scale_in::ScaleInArgs),
    /// Full snapshot and restore against etcdctl, delta replay rate, and write throughput with
    /// delta backups on vs. off, on one large database.
    Backup(backup::BackupArgs),
    /// 500 `Etcd` objects on a real kube-apiserver: time until `quorate operator` has
    /// reconciled all once (against a plain client doing the same requests), its API requests
    /// per minute per cluster in steady state, and its peak RSS.
    Operator(operator::OperatorArgs),
    /// Defragment a 3-member cluster with a database of at least 1 GB under 8 writing
    /// clients, in quorate's order and in druid's (the leader in place); print failed writes,
    /// p99 and longest write of each.
    Defrag(defrag::DefragArgs),
    /// Full snapshot and delta uploads into a store with and without backup encryption; print
    /// both times and the ratio (target: at most 10 % slower).
    Encryption(encryption::EncryptionArgs),
    /// Upgrade and downgrade a 3-member cluster 3.5 → 3.6 → 3.7 → 3.6 → 3.5 with quorate and
    /// by hand; print each step's time, the ratio, failed writes and the longest write.
    Upgrade(upgrade::UpgradeArgs),
}

#[derive(Debug, Args)]
struct ScaleOutArgs {
    /// Rounds per method.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// The quorate binary [default: `quorate` next to this executable].
    #[arg(long)]
    quorate: Option<PathBuf>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Set up before the runtime starts: it changes this process's environment, which is only
    // sound while no other thread runs.
    let _k8s_home = match &cli.command {
        Command::Operator(_) => match operator::wide_service_range() {
            Ok(dir) => Some(dir),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // On Ctrl-C the benchmark future is dropped, and with it every guard: etcd processes and
    // quorate supervisors started by the benchmark are killed.
    let result = runtime.block_on(async {
        tokio::select! {
            result = run(cli) => result,
            _ = tokio::signal::ctrl_c() => Err(BenchError::failed(
                "interrupted; the processes this run started have been stopped",
            )),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::ScaleOut(args) => scale_out(args).await,
        Command::ScaleIn(args) => scale_in::run(args).await,
        Command::Backup(args) => backup::run(args).await,
        Command::Operator(args) => operator::run(args).await,
        Command::Defrag(args) => defrag::run(args).await,
        Command::Encryption(args) => encryption::run(args).await,
        Command::Upgrade(args) => upgrade::run(args).await,
    }
}

/// `quorate` next to the running executable (`target/<profile>/quorate`).
fn default_quorate() -> Result<PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| BenchError::failed(format!("cannot find this executable's path: {e}")))?;
    Ok(exe.with_file_name("quorate"))
}

async fn scale_out(args: ScaleOutArgs) -> Result<()> {
    let quorate = match args.quorate {
        Some(path) => path,
        None => default_quorate()?,
    };
    if !quorate.is_file() {
        return Err(BenchError::failed(format!(
            "no quorate binary at {}; build it with `cargo build --release -p quorate -p \
             quorate-bench` or pass --quorate PATH",
            quorate.display()
        )));
    }
    let mut machine = probe_machine(&quorate).await;

    let mut results: Vec<RoundResult> = Vec::new();
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 {
            [Method::Quorate, Method::Hand]
        } else {
            [Method::Hand, Method::Quorate]
        };
        for method in order {
            eprintln!("round {round}/{}: {} ...", args.rounds, method.short());
            let result = match method {
                Method::Quorate => quorate_run::run_round(&quorate, round).await,
                Method::Hand => hand::run_round(round).await,
            }
            .map_err(|e| BenchError::failed(format!("round {round}, {}: {e}", method.short())))?;
            eprintln!("  {}", result.progress_line());
            results.push(result);
        }
    }
    machine.finish();

    publish_report(
        &scale_out_report::render(&results, &machine),
        args.output.as_deref(),
    )
}

/// Prints a benchmark's report and, when asked, writes it to `output` too.
pub(crate) fn publish_report(text: &str, output: Option<&Path>) -> Result<()> {
    println!("{text}");
    let Some(path) = output else {
        return Ok(());
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(BenchError::io("create", parent))?;
    }
    std::fs::write(path, text).map_err(BenchError::io("write", path))?;
    eprintln!("report written to {}", path.display());
    Ok(())
}

/// The first line `bin --version` prints, or why there is none.
pub(crate) async fn version_line(bin: &Path) -> String {
    match tokio::process::Command::new(bin)
        .arg("--version")
        .output()
        .await
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string(),
        Err(e) => format!("unknown ({}: {e})", bin.display()),
    }
}

/// etcd's version, as `etcd --version` names it.
pub(crate) async fn etcd_version() -> String {
    let line = version_line(&quorate_testkit::etcd_binary()).await;
    line.strip_prefix("etcd Version: ")
        .unwrap_or(&line)
        .to_string()
}

/// What the scale-out report says of the machine: etcd's and quorate's versions beside the
/// facts of every run.
async fn probe_machine(quorate: &Path) -> MachineFacts {
    MachineFacts {
        etcd_version: Some(etcd_version().await),
        quorate: Some(quorate_binary(quorate).await),
        ..MachineFacts::at_start()
    }
}

/// The quorate binary at `path`, with its version.
pub(crate) async fn quorate_binary(path: &Path) -> QuorateBinary {
    QuorateBinary {
        version: version_line(path).await,
        path: path.display().to_string(),
    }
}
