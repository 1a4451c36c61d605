//! `quorate defrag NAME`: asks a local cluster's agents for a defragmentation round and waits
//! for it, printing each member's database size before and after.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorate_core::maintenance::defrag::DefragOutcome;
use quorate_local::commands::LocalContext;
use quorate_local::defrag::{Progress, progress, request};

/// How often the members' leases are read while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Runs the command.
pub async fn run(
    ctx: &LocalContext,
    name: &str,
    no_wait: bool,
    timeout: Duration,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let id = request(ctx, name)?;
    println!("defragmentation requested ({id})");
    if no_wait {
        println!("`quorate defrag` progress is on the member leases: `quorate members {name}`");
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    let mut last_seen = None;
    loop {
        let now = progress(ctx, name, &id).await?;
        if last_seen.as_ref() != Some(&now) {
            match &now {
                Progress::NotStarted => println!("waiting for the leader to start the round"),
                Progress::Running { waiting, .. } => {
                    println!("defragmenting; still to go: {}", waiting.join(", "))
                }
                Progress::Done(_) => {}
            }
        }
        if let Progress::Done(through) = &now {
            print_table(through);
            let failed = through.iter().any(|(_, o)| o.error.is_some());
            return Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
        if started.elapsed() >= timeout {
            eprintln!(
                "the round did not finish within {timeout:?}; the agents go on with it (each member \
                 waits while another member's etcd does not answer): see `quorate members {name}` \
                 and the agents' logs"
            );
            return Ok(ExitCode::FAILURE);
        }
        last_seen = Some(now);
        tokio::time::sleep(POLL).await;
    }
}

fn print_table(through: &[(String, DefragOutcome)]) {
    println!(
        "{:<24} {:>12} {:>12} {:>10}  RESULT",
        "MEMBER", "BEFORE", "AFTER", "TOOK"
    );
    for (member, o) in through {
        let result = match (&o.error, o.skipped) {
            (Some(e), _) => format!("failed: {e}"),
            (None, true) => "skipped".to_string(),
            (None, false) => "defragmented".to_string(),
        };
        println!(
            "{member:<24} {:>12} {:>12} {:>9.1}s  {result}",
            mib(o.size_before),
            mib(o.size_after),
            o.millis as f64 / 1000.0
        );
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
