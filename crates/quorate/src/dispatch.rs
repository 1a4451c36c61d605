//! Dispatch of every subcommand: the local runtime, the agent, the operator, the one-shot
//! tools (snapshot, backups, restore, canary) and the CRD printer each get their command here.

use crate::cli::{Cli, Command, Output};
use crate::signals::shutdown_on_signals;
use quorate_local::LocalError;
use quorate_local::commands::{self, LocalContext};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Runs one command; `Err` is printed as `error: ...`.
pub async fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Local state and one-shot restores are their user's alone; an agent started by a local
    // supervisor inherits this, one in a pod keeps its container's umask.
    if !matches!(cli.command, Command::Agent(_) | Command::Operator(_)) {
        quorate_local::state_dir::private_umask();
    }
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(quorate_local::state_dir::default_state_dir);
    let context = |etcd_binary: Option<PathBuf>| LocalContext {
        state_dir: state_dir.clone(),
        quorate_bin: std::env::current_exe().expect("path of the running quorate binary"),
        etcd_bin: etcd_binary,
    };
    match cli.command {
        Command::Up {
            file,
            detach,
            timeout,
            etcd_binary,
        } => {
            let ctx = context(etcd_binary);
            let etcd = commands::read_manifest(&file)?;
            let name = etcd.metadata.name.clone().unwrap_or_default();
            let (_, applied) = commands::prepare(&ctx, etcd)?;
            say_kept_ports(&name, &file, false, &applied);
            if detach {
                if quorate_local::lock::running_supervisor(&ctx.cluster(&name)).is_none() {
                    commands::spawn_supervisor(&ctx, &name)?;
                }
                commands::wait_until_ready(&ctx, &name, applied.generation, timeout).await?;
                print_table(&ctx, Some(&name), true)?;
                return Ok(ExitCode::SUCCESS);
            }
            let shutdown = shutdown_on_signals();
            let printer = {
                let (ctx, name) = (ctx.clone(), name.clone());
                tokio::spawn(async move {
                    if commands::wait_until_ready(&ctx, &name, applied.generation, timeout)
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
            let result = commands::supervise(&ctx, &name, shutdown).await;
            printer.abort();
            result?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Apply {
            file,
            wait,
            timeout,
        } => {
            let ctx = context(None);
            let etcd = commands::read_manifest(&file)?;
            let name = etcd.metadata.name.clone().unwrap_or_default();
            if !ctx.cluster(&name).exists() {
                return Err(LocalError::NotFound { name }.into());
            }
            let (dir, applied) = commands::prepare(&ctx, etcd)?;
            let verb = if applied.changed {
                "configured"
            } else {
                "unchanged"
            };
            println!("etcd.druid.gardener.cloud/{name} {verb}");
            let running = quorate_local::lock::running_supervisor(&dir).is_some();
            say_kept_ports(&name, &file, running, &applied);
            if !running {
                eprintln!("note: {name} is not running; the change takes effect at `quorate up`");
            } else if wait {
                commands::wait_until_ready(&ctx, &name, applied.generation, timeout).await?;
                print_table(&ctx, Some(&name), true)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Down { name, purge } => {
            let ctx = context(None);
            let kept = commands::down(&ctx, &name, purge, Duration::from_secs(60)).await?;
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
            Ok(ExitCode::SUCCESS)
        }
        Command::Get {
            name,
            output,
            watch: true,
            ..
        } => {
            let ctx = context(None);
            let wide = output == Some(Output::Wide);
            crate::watch_cmds::watch_table(&ctx, name.as_deref(), wide, shutdown_on_signals())
                .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Logs {
            name,
            member,
            agent,
            follow,
            tail,
        } => {
            let ctx = context(None);
            let path = commands::log_file(&ctx, &name, member.as_deref(), agent)?;
            crate::watch_cmds::print_log(&path, tail, follow, shutdown_on_signals()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Completion { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "quorate",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            use clap::CommandFactory;
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Get { name, output, .. } => {
            let ctx = context(None);
            match output {
                None => print_table(&ctx, name.as_deref(), false)?,
                Some(Output::Wide) => print_table(&ctx, name.as_deref(), true)?,
                Some(format) => {
                    let items = commands::get(&ctx, name.as_deref())?;
                    let value = match (name.is_some(), items.as_slice()) {
                        (true, [one]) => serde_json::to_value(one)?,
                        _ => {
                            serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items })
                        }
                    };
                    if format == Output::Json {
                        println!("{}", serde_json::to_string_pretty(&value)?);
                    } else {
                        print!("{}", serde_saphyr::to_string(&value)?);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Members { name } => {
            let ctx = context(None);
            print!(
                "{}",
                quorate_local::members::members_table(&ctx, &name).await?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Recover { name, yes } => {
            use quorate_core::membership::recovery::RecoveryDecision;
            let ctx = context(None);
            let plan = quorate_local::recover::plan(&ctx, &name).await?;
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
            let id = quorate_local::recover::request(&ctx, &name)?;
            println!("recovery requested ({id}); `quorate get etcd {name}` shows when it is done");
            Ok(ExitCode::SUCCESS)
        }
        Command::Defrag {
            name,
            no_wait,
            timeout,
        } => crate::defrag_cmd::run(&context(None), &name, no_wait, timeout).await,
        Command::Endpoints { name } => {
            println!("{}", commands::endpoints(&context(None), &name)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Canary {
            endpoints,
            prefix,
            interval,
            write_timeout,
            count,
            report_every,
            tls,
        } => {
            let totals = crate::canary_cmd::run(crate::canary_cmd::CanaryPlan {
                endpoints,
                tls: tls.to_tls(),
                prefix,
                interval,
                write_timeout,
                count,
                report_every,
            })
            .await?;
            Ok(if totals.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Snapshot {
            endpoint,
            output,
            tls,
        } => {
            let tls = tls.to_tls();
            let client = quorate_etcd::MemberClient::connect(
                &endpoint,
                tls.as_ref(),
                quorate_etcd::EtcdTimeouts::default(),
            )
            .await?;
            let started = std::time::Instant::now();
            let part = output.with_file_name(format!(
                "{}.part",
                output
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ));
            let progress =
                crate::progress::FileProgress::start("saving snapshot", vec![part, output.clone()]);
            let saved = quorate_backup::snapshotter::save_to_file(&client, &output).await;
            drop(progress);
            let saved = saved?;
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "saved {} ({} bytes, revision {}) in {seconds:.2}s, {:.1} MB/s",
                saved.path.display(),
                saved.size,
                saved.revision,
                saved.size as f64 / 1e6 / seconds.max(1e-9)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Backups { command } => {
            crate::backup_cmds::backups(&context(None), command).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Restore {
            file,
            data_dir,
            force,
            up,
            to_revision,
            to_time,
            secret_dir,
            local_root,
            encryption_key_dir,
            accept_plaintext_before,
            keep_revision,
            replay,
            no_verify,
        } => {
            let target = match (to_revision, to_time) {
                (Some(rev), _) => quorate_backup::restore::RestoreTarget::ToRevision(rev),
                (None, Some(t)) => quorate_backup::restore::RestoreTarget::ToTime(t),
                (None, None) => quorate_backup::restore::RestoreTarget::Latest,
            };
            let args = crate::backup_cmds::RestoreArgs {
                file,
                data_dir,
                up,
                target,
                secret_dir,
                local_root,
                encryption_key_dir,
                accept_plaintext_before,
                force,
                keep_revision,
                skip_verification: no_verify,
                replay_method: match replay {
                    crate::cli::ReplayArg::Direct => quorate_backup::restore::ReplayMethod::Direct,
                    crate::cli::ReplayArg::Txn => quorate_backup::restore::ReplayMethod::Txn,
                },
            };
            crate::backup_cmds::restore(&context(None), args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crd => {
            print!("{}", quorate_api::crd::crd_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent(args) => crate::agent_cmd::run(args).await,
        Command::Operator(args) => {
            quorate_operator::run_operator(args, shutdown_on_signals()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Supervise { name, etcd_binary } => {
            let ctx = context(etcd_binary);
            commands::supervise(&ctx, &name, shutdown_on_signals()).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_table(ctx: &LocalContext, name: Option<&str>, wide: bool) -> Result<(), LocalError> {
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
    file: &std::path::Path,
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
