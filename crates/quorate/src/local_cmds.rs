//! The local-mode subcommands (`up`, `apply`, `down`, `get`, `logs`, `members`, `recover`,
//! `defrag`, `endpoints`, `supervise`): each calls `quorate-local` and prints what it returns.

use crate::cli::Output;
use crate::signals::shutdown_on_signals;
use quorate_local::LocalError;
use quorate_local::commands::{self, LocalContext};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `quorate up -f FILE`: in the foreground until a signal, or `--detach`ed once ready.
pub async fn up(ctx: &LocalContext, file: &Path, detach: bool, timeout: Duration) -> Result<()> {
    let etcd = commands::read_manifest(file)?;
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let (_, applied) = commands::prepare(ctx, etcd)?;
    say_kept_ports(&name, file, false, &applied);
    if detach {
        let supervisor = match quorate_local::lock::running_supervisor(&ctx.cluster(&name)) {
            Some(pid) => pid,
            None => commands::spawn_supervisor(ctx, &name)?,
        };
        commands::wait_until_ready(ctx, &name, applied.generation, supervisor, timeout).await?;
        print_table(ctx, Some(&name), true)?;
        return Ok(());
    }
    let shutdown = shutdown_on_signals();
    let printer = {
        let (ctx, name) = (ctx.clone(), name.clone());
        tokio::spawn(async move {
            // This process supervises: the wait ends with it.
            let supervisor = std::process::id();
            if commands::wait_until_ready(&ctx, &name, applied.generation, supervisor, timeout)
                .await
                .is_ok()
            {
                let _ = print_table(&ctx, Some(&name), true);
                eprintln!(
                    "cluster {name} is ready; endpoints: {}",
                    commands::endpoints(&ctx, &name).unwrap_or_default()
                );
            }
        })
    };
    let result = commands::supervise(ctx, &name, shutdown).await;
    printer.abort();
    Ok(result?)
}

/// `quorate apply -f FILE`: changes a local cluster's manifest.
pub async fn apply(ctx: &LocalContext, file: &Path, wait: bool, timeout: Duration) -> Result<()> {
    let etcd = commands::read_manifest(file)?;
    let name = etcd.metadata.name.clone().unwrap_or_default();
    if !ctx.cluster(&name).exists() {
        return Err(LocalError::NotFound { name }.into());
    }
    let (dir, applied) = commands::prepare(ctx, etcd)?;
    let verb = if applied.changed {
        "configured"
    } else {
        "unchanged"
    };
    println!("etcd.druid.gardener.cloud/{name} {verb}");
    let running = quorate_local::lock::running_supervisor(&dir);
    say_kept_ports(&name, file, running.is_some(), &applied);
    let Some(supervisor) = running else {
        eprintln!("note: {name} is not running; the change takes effect at `quorate up`");
        return Ok(());
    };
    if wait {
        commands::wait_until_ready(ctx, &name, applied.generation, supervisor, timeout).await?;
        print_table(ctx, Some(&name), true)?;
    }
    Ok(())
}

/// `quorate down NAME [--purge]`.
pub async fn down(ctx: &LocalContext, name: &str, purge: bool) -> Result<()> {
    let kept = commands::down(ctx, name, purge, Duration::from_secs(60)).await?;
    println!(
        "{name} stopped{}",
        if purge { " and deleted" } else { "; data kept" }
    );
    if let Some(bucket) = kept {
        println!(
            "its backups in {} were kept: they are outside the state directory (the \
             store Secret's hostPath); delete them yourself when no longer needed",
            bucket.display()
        );
    }
    Ok(())
}

/// `quorate get etcd [NAME] [-o FORMAT] [--watch]`.
pub async fn get(
    ctx: &LocalContext,
    name: Option<&str>,
    output: Option<Output>,
    watch: bool,
) -> Result<()> {
    if watch {
        let wide = output == Some(Output::Wide);
        crate::watch_cmds::watch_table(ctx, name, wide, shutdown_on_signals()).await?;
        return Ok(());
    }
    match output {
        None => print_table(ctx, name, false)?,
        Some(Output::Wide) => print_table(ctx, name, true)?,
        Some(format) => {
            let items = commands::get(ctx, name)?;
            let value = match (name.is_some(), items.as_slice()) {
                (true, [one]) => serde_json::to_value(one)?,
                _ => serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items }),
            };
            if format == Output::Json {
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print!("{}", serde_saphyr::to_string(&value)?);
            }
        }
    }
    Ok(())
}

/// `quorate logs NAME [MEMBER]`.
pub async fn logs(
    ctx: &LocalContext,
    name: &str,
    member: Option<&str>,
    agent: bool,
    follow: bool,
    tail: Option<usize>,
) -> Result<()> {
    let path = commands::log_file(ctx, name, member, agent)?;
    crate::watch_cmds::print_log(&path, tail, follow, shutdown_on_signals()).await?;
    Ok(())
}

/// `quorate members NAME`.
pub async fn members(ctx: &LocalContext, name: &str) -> Result<()> {
    print!(
        "{}",
        quorate_local::members::members_table(ctx, name).await?
    );
    Ok(())
}

/// `quorate recover NAME [--yes]`: says what recovery would do, and requests it with `--yes`.
pub async fn recover(ctx: &LocalContext, name: &str, yes: bool) -> Result<ExitCode> {
    use quorate_core::membership::recovery::RecoveryDecision;
    let plan = quorate_local::recover::plan(ctx, name).await?;
    match &plan {
        RecoveryDecision::NotNeeded => {
            println!("{name} has a leader: nothing to recover");
            return Ok(ExitCode::SUCCESS);
        }
        RecoveryDecision::Wait(why) => {
            println!("{name} cannot be recovered from a member now: {why}");
            return Ok(ExitCode::FAILURE);
        }
        RecoveryDecision::ForceNewCluster {
            member,
            revision,
            dropped,
            ..
        } => println!(
            "recovery uses {member} at revision {revision}: it becomes a one-member \
             cluster with its data; {} other member(s) leave and rejoin as learners \
             (their data is moved aside, never deleted)",
            dropped.len()
        ),
        RecoveryDecision::RestoreFromBucket {
            member, revision, ..
        } => println!(
            "recovery restores the bucket's newer state (revision {revision}) on {member}; \
             the others rejoin as learners"
        ),
    }
    if !yes {
        println!("run `quorate recover {name} --yes` to carry it out");
        return Ok(ExitCode::SUCCESS);
    }
    let id = quorate_local::recover::request(ctx, name)?;
    println!("recovery requested ({id}); `quorate get etcd {name}` shows when it is done");
    Ok(ExitCode::SUCCESS)
}

/// `quorate defrag NAME`: requests a defragmentation round and, unless `no_wait`, waits for
/// it, printing each member's database size before and after.
pub async fn defrag(
    ctx: &LocalContext,
    name: &str,
    no_wait: bool,
    timeout: Duration,
) -> Result<ExitCode> {
    use quorate_local::defrag::{Progress, outcome_table, request, wait};
    let id = request(ctx, name)?;
    println!("defragmentation requested ({id})");
    if no_wait {
        println!("`quorate defrag` progress is on the member leases: `quorate members {name}`");
        return Ok(ExitCode::SUCCESS);
    }
    let done = wait(ctx, name, &id, timeout, &mut |now| match now {
        Progress::NotStarted => println!("waiting for the leader to start the round"),
        Progress::Running { waiting, .. } => {
            println!("defragmenting; still to go: {}", waiting.join(", "))
        }
        Progress::Done(_) => {}
    })
    .await?;
    let Some(through) = done else {
        eprintln!(
            "the round did not finish within {timeout:?}; the agents go on with it (each member \
             waits while another member's etcd does not answer): see `quorate members {name}` \
             and the agents' logs"
        );
        return Ok(ExitCode::FAILURE);
    };
    print!("{}", outcome_table(&through));
    Ok(if through.iter().any(|(_, o)| o.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `quorate endpoints NAME`.
pub fn endpoints(ctx: &LocalContext, name: &str) -> Result<()> {
    println!("{}", commands::endpoints(ctx, name)?);
    Ok(())
}

/// `quorate supervise NAME` (run by `up --detach`): the cluster's supervisor until a signal.
pub async fn supervise(ctx: &LocalContext, name: &str) -> Result<()> {
    commands::supervise(ctx, name, shutdown_on_signals()).await?;
    Ok(())
}

/// The context of the local commands: the state directory, this binary, a pinned etcd.
pub fn context(state_dir: Option<PathBuf>, etcd_binary: Option<PathBuf>) -> LocalContext {
    LocalContext {
        state_dir: state_dir.unwrap_or_else(quorate_local::state_dir::default_state_dir),
        quorate_bin: std::env::current_exe().expect("path of the running quorate binary"),
        etcd_bin: etcd_binary,
    }
}

fn print_table(
    ctx: &LocalContext,
    name: Option<&str>,
    wide: bool,
) -> std::result::Result<(), LocalError> {
    if name.is_none() && commands::get(ctx, None)?.is_empty() {
        // As kubectl says it, on stderr, rather than a bare header.
        eprintln!("No resources found.");
        return Ok(());
    }
    print!("{}", commands::table(ctx, name, wide)?);
    Ok(())
}

/// Says which ports the manifest moved that members keep, and why.
fn say_kept_ports(
    name: &str,
    file: &Path,
    running: bool,
    applied: &quorate_local::object::Applied,
) {
    for kept in &applied.kept_ports {
        let why = if running {
            format!(
                "ports change only while the cluster is stopped: `quorate down {name}`, then \
                 `quorate up -f {}`",
                file.display()
            )
        } else {
            "a started member keeps its peer port for life (etcd's membership knows it by its \
             peer URL)"
                .to_string()
        };
        eprintln!(
            "note: {} keeps port {} although {} now gives it {}: {why}",
            kept.member, kept.recorded, kept.field, kept.wanted
        );
    }
}
