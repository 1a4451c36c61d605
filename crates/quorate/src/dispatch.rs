//! Dispatch of every subcommand: one function each, in `local_cmds` (the local runtime),
//! `backup_cmds` (snapshot, backups, restore), `canary_cmd`, `agent_cmd`, the operator, and the
//! printers of the CRD, completions and the manual page here.

use crate::cli::{Cli, Command};
use crate::local_cmds::{self, context};
use crate::signals::shutdown_on_signals;
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs one command; `Err` is printed as `error: ...`.
pub async fn run(cli: Cli) -> Result<ExitCode> {
    // Local state and one-shot restores are their user's alone; an agent started by a local
    // supervisor inherits this, one in a pod keeps its container's umask.
    if !matches!(cli.command, Command::Agent(_) | Command::Operator(_)) {
        quorate_local::state_dir::private_umask();
    }
    let state_dir = cli.state_dir.clone();
    let ctx = || context(state_dir.clone(), None);
    let done = |r: Result<()>| r.map(|()| ExitCode::SUCCESS);
    match cli.command {
        Command::Up {
            file,
            detach,
            timeout,
            etcd_binary,
        } => done(local_cmds::up(&context(state_dir, etcd_binary), &file, detach, timeout).await),
        Command::Apply {
            file,
            wait,
            timeout,
        } => done(local_cmds::apply(&ctx(), &file, wait, timeout).await),
        Command::Down { name, purge } => done(local_cmds::down(&ctx(), &name, purge).await),
        Command::Get {
            name,
            output,
            watch,
            ..
        } => done(local_cmds::get(&ctx(), name.as_deref(), output, watch).await),
        Command::Logs {
            name,
            member,
            agent,
            follow,
            tail,
        } => done(local_cmds::logs(&ctx(), &name, member.as_deref(), agent, follow, tail).await),
        Command::Completion { shell } => done(completion(shell)),
        Command::Man { command, dir } => done(man(&command, dir.as_deref())),
        Command::Members { name } => done(local_cmds::members(&ctx(), &name).await),
        Command::Recover { name, yes } => local_cmds::recover(&ctx(), &name, yes).await,
        Command::Defrag {
            name,
            no_wait,
            timeout,
        } => local_cmds::defrag(&ctx(), &name, no_wait, timeout).await,
        Command::Endpoints { name } => done(local_cmds::endpoints(&ctx(), &name)),
        Command::Canary {
            endpoints,
            prefix,
            interval,
            write_timeout,
            count,
            report_every,
            history,
            tls,
        } => {
            crate::canary_cmd::run_command(crate::canary_cmd::CanaryPlan {
                endpoints,
                tls: tls.to_tls(),
                prefix,
                interval,
                write_timeout,
                count,
                report_every,
                history,
            })
            .await
        }
        Command::Snapshot {
            endpoint,
            output,
            tls,
        } => done(crate::backup_cmds::snapshot(&endpoint, &output, tls.to_tls()).await),
        Command::Backups { command } => done(crate::backup_cmds::backups(&ctx(), command).await),
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
            let request = quorate_local::restore::RestoreRequest {
                file,
                data_dir,
                up,
                target: crate::backup_cmds::restore_target(to_revision, to_time),
                secret_dir,
                local_root,
                encryption_key_dir,
                accept_plaintext_before,
                force,
                keep_revision,
                skip_verification: no_verify,
                replay_method: replay.method(),
            };
            done(crate::backup_cmds::restore(&ctx(), request).await)
        }
        Command::Crd { kubernetes_version } => {
            let yaml = match kubernetes_version.as_deref() {
                None => quorate_api::crd::crd_yaml(),
                Some(version) => match quorate_api::crd::crd_yaml_for_version(version) {
                    Ok(yaml) => yaml,
                    Err(e) => {
                        eprintln!("quorate crd: --kubernetes-version {e}");
                        return Ok(ExitCode::from(2));
                    }
                },
            };
            print!("{yaml}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Kube(args) => kube_plugin(args).await,
        Command::Agent(args) => crate::agent_cmd::run(args).await,
        Command::Operator(args) => {
            quorate_operator::run_operator(args, shutdown_on_signals()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Supervise { name, etcd_binary } => {
            done(local_cmds::supervise(&context(state_dir, etcd_binary), &name).await)
        }
    }
}

/// `quorate kube …` and `kubectl quorate …` (`quorate_kubectl`), on standard output and error.
pub async fn kube_plugin(args: quorate_kubectl::KubectlArgs) -> Result<ExitCode> {
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let mut io = quorate_kubectl::Io {
        out: &mut out,
        err: &mut err,
    };
    Ok(match quorate_kubectl::run(args, &mut io).await? {
        quorate_kubectl::Outcome::Success => ExitCode::SUCCESS,
        quorate_kubectl::Outcome::Failed => ExitCode::FAILURE,
    })
}

/// `quorate completion SHELL`.
fn completion(shell: clap_complete::Shell) -> Result<()> {
    use clap::CommandFactory;
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "quorate",
        &mut std::io::stdout(),
    );
    Ok(())
}

/// `quorate man [COMMAND...] [--dir DIR]`: one page, or every page (each named as the pages
/// that list it refer to it: `quorate-backups-list(1)` is `quorate-backups-list.1`).
fn man(path: &[String], dir: Option<&std::path::Path>) -> Result<()> {
    use clap::CommandFactory;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Built, so each subcommand's page carries its full name (quorate-backups-list).
    cmd.build();
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
        clap_mangen::generate_to(cmd, dir)?;
        return Ok(());
    }
    let mut page = &cmd;
    for (i, word) in path.iter().enumerate() {
        page = page.find_subcommand(word).ok_or_else(|| {
            let known: Vec<&str> = page.get_subcommands().map(|c| c.get_name()).collect();
            format!(
                "no command `quorate {}`; its commands are: {}",
                path[..=i].join(" "),
                known.join(", ")
            )
        })?;
    }
    clap_mangen::Man::new(page.clone()).render(&mut std::io::stdout())?;
    Ok(())
}
