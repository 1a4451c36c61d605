//! `kubectl quorate`: the local CLI's commands (`get`, `members`, `defrag`, `recover`,
//! `backups list`, `restore`) and druidctl's (suspend/resume, reconcile, component protection)
//! against `Etcd` resources on Kubernetes, with kubectl's flags (`--kubeconfig`, `--context`,
//! `-n`, `-A`, `-l`) and output formats (`-o json|yaml|name|jsonpath=…|wide`).
//!
//! The `quorate` binary parses [`PluginCli`] when it runs as `kubectl-quorate` (argv[0]) and
//! [`KubectlArgs`] as `quorate kube …`, and calls [`run`]; every command's work is here.
//! Commands change only what an operator or agent already reads (annotations on the `Etcd`)
//! and read only what they publish (status, member leases, the bucket): nothing here decides
//! about data.

mod annotate;
mod backups;
mod client;
mod defrag;
mod error;
mod get;
mod members;
pub mod output;
mod recover;
mod restore;
mod wait;

pub use client::Target;
pub use error::KubectlError;
pub use output::OutputFormat;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The help heading of kubectl's flags.
pub const KUBE_FLAGS: &str = "Kubernetes options";

/// The plugin's command line as kubectl runs it (`kubectl quorate …` executes
/// `kubectl-quorate …` from the PATH).
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-quorate",
    bin_name = "kubectl quorate",
    version,
    about = "quorate's commands for etcd-druid Etcd resources on Kubernetes"
)]
pub struct PluginCli {
    /// Everything after the program name.
    #[command(flatten)]
    pub args: KubectlArgs,
}

/// The plugin's flags and command; also `quorate kube …`.
#[derive(Debug, Args)]
pub struct KubectlArgs {
    /// kubectl's connection and selection flags.
    #[command(flatten)]
    pub flags: KubeFlags,
    /// The command.
    #[command(subcommand)]
    pub command: KubeCommand,
}

/// kubectl's flags, named and behaving as kubectl's.
#[derive(Clone, Debug, Default, Args)]
pub struct KubeFlags {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the
    /// pod's service account).
    #[arg(long, global = true, help_heading = KUBE_FLAGS)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, help_heading = KUBE_FLAGS)]
    pub context: Option<String>,
    /// The namespace (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true, help_heading = KUBE_FLAGS)]
    pub namespace: Option<String>,
    /// Every namespace (commands that take several Etcds).
    #[arg(short = 'A', long, global = true, help_heading = KUBE_FLAGS)]
    pub all_namespaces: bool,
    /// Only Etcds with these labels (`key=value,key2`), as kubectl's `-l`.
    #[arg(short = 'l', long, global = true, help_heading = KUBE_FLAGS)]
    pub selector: Option<String>,
}

/// The plugin's commands.
#[derive(Debug, Subcommand)]
pub enum KubeCommand {
    /// Show Etcds with druid's printer columns, as `kubectl get etcd` does.
    Get {
        /// Resource kind: etcd (also etcds, Etcd).
        #[arg(value_parser = ["etcd", "etcds", "Etcd"])]
        kind: String,
        /// Etcd names; every Etcd of the namespace (or of all with -A) when omitted.
        names: Vec<String>,
        /// Output format: wide, json, yaml, name, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, value_parser = OutputFormat::parse)]
        output: Option<OutputFormat>,
    },
    /// List an Etcd's members as their agents publish them on the member leases: name, etcd
    /// member ID, role, readiness, etcd version, data state, what it waits for.
    Members {
        /// Etcd name.
        name: String,
        /// Output format: wide, json, yaml, name, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, value_parser = OutputFormat::parse)]
        output: Option<OutputFormat>,
    },
    /// Defragment every member now, one at a time (followers first, the leader last): sets
    /// `quorate.io/defragment` and waits for the agents' results on the member leases.
    Defrag {
        /// Etcd name.
        name: String,
        /// Return once the request is set instead of waiting for the round.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for the round.
        #[arg(long, default_value = "15m", value_parser = parse_duration)]
        timeout: Duration,
        /// Output format of the result: json, yaml, name, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, value_parser = OutputFormat::parse)]
        output: Option<OutputFormat>,
    },
    /// Quorum-loss recovery: without --yes, show what the Etcd and its members report; with
    /// --yes, set `quorate.io/recover` so the agents recover from the surviving member.
    Recover {
        /// Etcd name.
        name: String,
        /// Request the recovery instead of only showing the state.
        #[arg(long)]
        yes: bool,
        /// Output format: json, yaml, name, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, value_parser = OutputFormat::parse)]
        output: Option<OutputFormat>,
    },
    /// Suspend spec reconciliation (druid's `druid.gardener.cloud/suspend-etcd-spec-reconcile`).
    Suspend(Selection),
    /// Resume spec reconciliation (removes the suspend annotation).
    Resume(Selection),
    /// Reconcile now (druid's `druid.gardener.cloud/operation: reconcile`); refused while
    /// suspended, as druidctl does.
    Reconcile(Selection),
    /// Component protection on (removes druid's
    /// `druid.gardener.cloud/disable-etcd-component-protection`) or off (sets it).
    Protect {
        /// `on` or `off`.
        state: Switch,
        /// The Etcds.
        #[command(flatten)]
        selection: Selection,
    },
    /// The backup bucket of an Etcd.
    Backups {
        /// What to do.
        #[command(subcommand)]
        command: BackupsCommand,
    },
    /// Guided point-in-time restore (docs/operations/point-in-time-restore-kubernetes.md):
    /// prints the exact steps for this Etcd and point; --secret-dir also writes the store
    /// Secret's keys as files (step 2).
    Restore {
        /// Etcd name.
        name: String,
        /// The instant to restore (RFC 3339, e.g. 2026-11-22T05:00:00Z).
        #[arg(long, conflicts_with = "to_revision")]
        to_time: Option<jiff::Timestamp>,
        /// The revision to restore.
        #[arg(long)]
        to_revision: Option<i64>,
        /// Name of the new Etcd the steps create (default: `<name>-pitr`).
        #[arg(long)]
        new_name: Option<String>,
        /// Write the store Secret's keys into this (new or empty) directory, mode 0600.
        #[arg(long)]
        secret_dir: Option<PathBuf>,
    },
    /// Wait until an Etcd condition has a status, as `kubectl wait --for=condition=…`.
    Wait {
        /// Etcd names.
        #[arg(required = true)]
        names: Vec<String>,
        /// `condition=NAME[=STATUS]` (STATUS default True).
        #[arg(long = "for", value_parser = wait::WaitFor::parse)]
        for_: wait::WaitFor,
        /// How long to wait.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        timeout: Duration,
        /// Output format of the met objects: json, yaml, name, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, value_parser = OutputFormat::parse)]
        output: Option<OutputFormat>,
    },
}

/// `kubectl quorate backups …`.
#[derive(Debug, Subcommand)]
pub enum BackupsCommand {
    /// List the snapshots in an Etcd's bucket (the store of `spec.backup.store`, credentials
    /// from its Secret): kind, revisions, size, time.
    List {
        /// Etcd name.
        name: String,
        /// For a `Local` store: the directory its containers live in as seen from here
        /// (default: the store Secret's `hostPath`, a path on the node).
        #[arg(long)]
        local_root: Option<PathBuf>,
        /// Output format: json, yaml, name, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, value_parser = OutputFormat::parse)]
        output: Option<OutputFormat>,
    },
}

/// Etcds named, or selected with `-l` / `-A`, for the commands that change annotations.
#[derive(Debug, Args)]
pub struct Selection {
    /// Etcd names; or select with -l / -A.
    pub names: Vec<String>,
    /// Output format of the changed objects: json, yaml, name, jsonpath=TEMPLATE.
    #[arg(short = 'o', long, value_parser = OutputFormat::parse)]
    pub output: Option<OutputFormat>,
}

/// `protect on|off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// Protection on.
    On,
    /// Protection off.
    Off,
}

/// Where a command writes: objects and tables to `out`, progress and notes to `err` (so `-o
/// json` on standard output stays parseable).
pub struct Io<'a> {
    /// Standard output.
    pub out: &'a mut (dyn Write + Send),
    /// Standard error.
    pub err: &'a mut (dyn Write + Send),
}

/// Whether a command did what it was asked (`Failed`: it ran but the outcome is a failure the
/// user must see in the exit status, e.g. a member's defragmentation failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Success,
    /// Ran, and reported a failure.
    Failed,
}

/// Runs one plugin command.
pub async fn run(args: KubectlArgs, io: &mut Io<'_>) -> Result<Outcome, KubectlError> {
    let target = Target::connect(&args.flags).await?;
    let ok = |r: Result<(), KubectlError>| r.map(|()| Outcome::Success);
    match args.command {
        KubeCommand::Get {
            kind: _,
            names,
            output,
        } => ok(get::get(&target, &names, output.as_ref(), io).await),
        KubeCommand::Members { name, output } => {
            ok(members::members(&target, &name, output.as_ref(), io).await)
        }
        KubeCommand::Defrag {
            name,
            no_wait,
            timeout,
            output,
        } => defrag::defrag(&target, &name, no_wait, timeout, output.as_ref(), io).await,
        KubeCommand::Recover { name, yes, output } => {
            recover::recover(&target, &name, yes, output.as_ref(), io).await
        }
        KubeCommand::Suspend(selection) => {
            ok(annotate::change(&target, &selection, annotate::Change::Suspend, io).await)
        }
        KubeCommand::Resume(selection) => {
            ok(annotate::change(&target, &selection, annotate::Change::Resume, io).await)
        }
        KubeCommand::Reconcile(selection) => {
            ok(annotate::change(&target, &selection, annotate::Change::Reconcile, io).await)
        }
        KubeCommand::Protect { state, selection } => {
            let change = match state {
                Switch::On => annotate::Change::ProtectOn,
                Switch::Off => annotate::Change::ProtectOff,
            };
            ok(annotate::change(&target, &selection, change, io).await)
        }
        KubeCommand::Backups {
            command:
                BackupsCommand::List {
                    name,
                    local_root,
                    output,
                },
        } => ok(backups::list(&target, &name, local_root, output.as_ref(), io).await),
        KubeCommand::Restore {
            name,
            to_time,
            to_revision,
            new_name,
            secret_dir,
        } => {
            let point = match (to_time, to_revision) {
                (Some(t), _) => restore::Point::Time(t),
                (None, Some(r)) => restore::Point::Revision(r),
                (None, None) => {
                    return Err(KubectlError::Usage(
                        "restore needs the point: give --to-time RFC3339 or --to-revision N".into(),
                    ));
                }
            };
            ok(restore::guide(
                &target,
                &name,
                point,
                new_name.as_deref(),
                secret_dir.as_deref(),
                io,
            )
            .await)
        }
        KubeCommand::Wait {
            names,
            for_,
            timeout,
            output,
        } => ok(wait::wait(&target, &names, &for_, timeout, output.as_ref(), io).await),
    }
}

/// A Go-style duration that is more than zero, as the `quorate` CLI's duration flags.
fn parse_duration(text: &str) -> Result<Duration, error::FlagError> {
    let duration =
        quorate_api::parse_go_duration(text).map_err(|e| error::FlagError(e.to_string()))?;
    if duration.is_zero() {
        return Err(error::FlagError(format!(
            "{text:?} is zero; give a positive duration such as \"30s\" or \"5m\""
        )));
    }
    Ok(duration)
}
