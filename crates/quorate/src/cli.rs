//! Command-line interface.

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// The help heading of the options every command takes.
pub const GLOBAL: &str = "Global options";

/// etcd clusters from etcd-druid `Etcd` manifests, managed locally or on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "quorate", version, about)]
pub struct Cli {
    /// Where local clusters keep their state [default: $XDG_STATE_HOME/quorate or ~/.local/state/quorate].
    #[arg(long, global = true, env = "QUORATE_STATE_DIR", help_heading = GLOBAL)]
    pub state_dir: Option<PathBuf>,
    /// Log level (error, warn, info, debug, trace); QUORATE_LOG takes a full filter.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub log_level: Option<String>,
    /// Log format: `text` for people, `json` (one object per line) for log collectors.
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "QUORATE_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with every span and event field.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or start the cluster an Etcd manifest describes, on this machine, and keep it true.
    Up {
        /// The Etcd manifest (YAML or JSON); `-` reads it from standard input.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Return once every member is ready, leaving the cluster supervised in the background.
        #[arg(short = 'd', long)]
        detach: bool,
        /// How long --detach waits for the cluster.
        #[arg(long, default_value = "120s", value_parser = parse_duration)]
        timeout: std::time::Duration,
        /// An etcd binary for the version the cluster runs; it must be that version (default:
        /// found per version, see docs/operations/etcd-upgrades.md).
        #[arg(long)]
        etcd_binary: Option<PathBuf>,
    },
    /// Change a running local cluster to match an Etcd manifest (replicas, etcd settings).
    Apply {
        /// The Etcd manifest (YAML or JSON); `-` reads it from standard input.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Wait until the change has been carried out and every member is ready.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits.
        #[arg(long, default_value = "180s", value_parser = parse_duration)]
        timeout: std::time::Duration,
    },
    /// Stop a local cluster, keeping its data unless --purge.
    Down {
        /// Cluster name (metadata.name).
        name: String,
        /// Also delete its state directory: data, and backups kept there (a bucket elsewhere,
        /// from a store Secret's hostPath, is kept).
        #[arg(long)]
        purge: bool,
    },
    /// Show clusters the way `kubectl get etcd` does.
    Get {
        /// Resource kind: etcd (also etcds, Etcd).
        #[arg(value_parser = ["etcd", "etcds", "Etcd"])]
        kind: String,
        /// Cluster name; all clusters when omitted.
        name: Option<String>,
        /// Output format.
        #[arg(short = 'o', long)]
        output: Option<Output>,
        /// After the table, print a cluster's row again whenever its object or status changes,
        /// until Ctrl-C (as `kubectl get -w`).
        #[arg(short = 'w', long, conflicts_with = "output")]
        watch: bool,
    },
    /// Print a local cluster's logs: its supervisor's, or a member's etcd (or agent) log.
    Logs {
        /// Cluster name.
        name: String,
        /// Member name (e.g. etcd-main-1); without it, the supervisor's log.
        member: Option<String>,
        /// The member's agent log instead of its etcd log.
        #[arg(long, requires = "member")]
        agent: bool,
        /// Keep printing what is appended, until Ctrl-C.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the last N lines of what is there already.
        #[arg(long)]
        tail: Option<usize>,
    },
    /// Print a shell completion script: `source <(quorate completion bash)`.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print a command's manual page (roff): `quorate man | man -l -`, `quorate man backups
    /// list | man -l -`; or write every command's page (quorate.1, quorate-up.1, ...) with --dir.
    Man {
        /// The command whose page to print, e.g. `up` or `backups list` (default: quorate's).
        command: Vec<String>,
        /// Write every command's page into this directory instead (for `MANPATH`).
        #[arg(long, conflicts_with = "command")]
        dir: Option<PathBuf>,
    },
    /// List the members of a local cluster: ID, name, URLs, leader, learner, health.
    Members {
        /// Cluster name.
        name: String,
    },
    /// Recover a local cluster that lost quorum, from the members that still answer: without
    /// --yes, say which member and revision recovery would use; with --yes, ask the agents to do
    /// it (members that do not answer are treated as lost and rejoin later as learners).
    Recover {
        /// Cluster name.
        name: String,
        /// Carry the recovery out instead of only showing the plan.
        #[arg(long)]
        yes: bool,
    },
    /// Defragment every member of a local cluster now, one at a time: followers first, the
    /// leader last after it handed leadership to a defragmented follower. Waits for the round
    /// and prints each member's database size before and after.
    Defrag {
        /// Cluster name.
        name: String,
        /// Return once the request is recorded instead of waiting for the round.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for the round.
        #[arg(long, default_value = "15m", value_parser = parse_duration)]
        timeout: std::time::Duration,
    },
    /// Print the client URLs of a local cluster, comma-separated, for `etcdctl --endpoints`.
    Endpoints {
        /// Cluster name.
        name: String,
    },
    /// Save a full snapshot of any etcd member to a file (like `etcdctl snapshot save`).
    Snapshot {
        /// Client URL of the member to snapshot.
        #[arg(long)]
        endpoint: String,
        /// The file to write; written as `<file>.part` and renamed once verified.
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// TLS for an https endpoint.
        #[command(flatten)]
        tls: ClientTlsArgs,
    },
    /// Write numbered keys to a cluster continuously, retrying each until acknowledged, and
    /// print running totals as JSON lines: how many writes a client saw fail during an update,
    /// a scale-out or a member replacement.
    Canary {
        /// Client URLs, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        endpoints: Vec<String>,
        /// Key prefix of the numbered keys.
        #[arg(long, default_value = "quorate-canary/")]
        prefix: String,
        /// Time between the starts of consecutive writes.
        #[arg(long, default_value = "100ms", value_parser = parse_duration)]
        interval: std::time::Duration,
        /// How long one write may take, retries included, before it counts as failed.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        write_timeout: std::time::Duration,
        /// Stop after this many writes; without it, run until SIGTERM or Ctrl-C.
        #[arg(long)]
        count: Option<u64>,
        /// How often a progress line is printed.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        report_every: std::time::Duration,
        /// Write every attempt to FILE as a client history (JSON lines,
        /// docs/reference/history-format.md) that tools/history-check can check.
        #[arg(long, value_name = "FILE")]
        history: Option<PathBuf>,
        /// TLS for https endpoints.
        #[command(flatten)]
        tls: ClientTlsArgs,
    },
    /// Inspect a cluster's backup bucket.
    Backups {
        /// What to do.
        #[command(subcommand)]
        command: BackupsCommand,
    },
    /// Restore an etcd data directory, or a whole new local cluster, from a backup bucket.
    Restore {
        /// The Etcd manifest whose `spec.backup.store` holds the backups (and, with --up, the
        /// cluster to create); `-` reads it from standard input.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Restore into this data directory (as member 0 of the manifest) instead of creating
        /// a local cluster.
        #[arg(long, conflicts_with = "up")]
        data_dir: Option<PathBuf>,
        /// Restore into a --data-dir that is not empty, moving its content aside first (never
        /// allowed for the data directory of a running etcd).
        #[arg(long, requires = "data_dir")]
        force: bool,
        /// Create the manifest's cluster locally from the restored data and start it.
        #[arg(long)]
        up: bool,
        /// Restore the state right after this revision.
        #[arg(long, conflicts_with = "to_time")]
        to_revision: Option<i64>,
        /// Restore the state as of this instant (RFC 3339, e.g. 2026-11-22T05:00:00Z).
        #[arg(long)]
        to_time: Option<jiff::Timestamp>,
        /// Directory holding the store Secret's keys as files (default: the local cluster's
        /// `secrets/<secretRef.name>`).
        #[arg(long)]
        secret_dir: Option<PathBuf>,
        /// Where `Local` containers live (default: the local cluster's `backups/`).
        #[arg(long)]
        local_root: Option<PathBuf>,
        /// Directory of the backup encryption keys (default: the local cluster's
        /// `secrets/<name>` of the annotation quorate.io/backup-encryption-secret).
        #[arg(long)]
        encryption_key_dir: Option<PathBuf>,
        /// With encryption keys: also accept clear (unencrypted) objects written before this
        /// instant (RFC 3339), the migration window of a bucket whose encryption was turned on
        /// then. Without it a clear object in an encrypted bucket is refused.
        #[arg(long)]
        accept_plaintext_before: Option<jiff::Timestamp>,
        /// Keep the restored revision as the source had it. By default a restore to a point
        /// older than the bucket's newest revision raises the revision past it and marks it
        /// compacted, so Kubernetes watchers relist instead of missing events.
        #[arg(long)]
        keep_revision: bool,
        /// How deltas are replayed: `direct` writes etcd's database file (fast, the default),
        /// `txn` sends one transaction per revision through a temporary etcd (slow; keeps the
        /// revision).
        #[arg(long, value_enum, default_value_t = ReplayArg::Direct)]
        replay: ReplayArg,
        /// Do not compare the restored key space with the hash etcd recorded at backup time
        /// (`<prefix>.hashkv/`); by default a mismatch fails the restore and changes nothing.
        #[arg(long)]
        no_verify: bool,
    },
    /// Print the Etcd CustomResourceDefinition (YAML).
    Crd {
        /// The Kubernetes version the CRD is for (`1.33`): from 1.29 on it carries druid's CEL
        /// validation rules, before (and by default) it does not.
        #[arg(long, value_name = "MAJOR.MINOR")]
        kubernetes_version: Option<String>,
    },
    /// The commands for Etcd resources on Kubernetes (`--kubeconfig`, `--context`, `-n`,
    /// `-A`, `-l`): the same as `kubectl quorate …` when this binary is installed as
    /// `kubectl-quorate` (docs/usage/kubectl-plugin.md).
    Kube(quorate_kubectl::KubectlArgs),
    /// Run the agent of one member (started by `quorate up` or in a pod).
    Agent(AgentArgs),
    /// Run the Kubernetes operator: the Etcd controller and its validating webhooks.
    Operator(quorate_operator::OperatorArgs),
    /// Run the supervisor of a local cluster in the foreground (what `up -d` starts).
    #[command(hide = true)]
    Supervise {
        /// Cluster name.
        name: String,
        /// An etcd binary pinned for its version.
        #[arg(long)]
        etcd_binary: Option<PathBuf>,
    },
}

impl Command {
    /// Whether this command runs until it is stopped and keeps talking to others over sockets
    /// (a supervisor, an agent, the operator, the canary), as opposed to a one-shot command
    /// whose output a person or a pipe reads.
    pub fn is_long_running(&self) -> bool {
        match self {
            Command::Up { detach, .. } => !detach,
            Command::Agent(_)
            | Command::Operator(_)
            | Command::Supervise { .. }
            | Command::Canary { .. } => true,
            _ => false,
        }
    }
}

/// `quorate agent`: in local mode the supervisor starts it with `--cluster-dir --member`; in a
/// member pod the StatefulSet starts it with `--kubernetes` and the flags of
/// `quorate_core::components::agent_args`, and it coordinates through the API instead of files.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("mode").required(true).args(["cluster_dir", "kubernetes"])))]
#[command(group(
    ArgGroup::new("local").multiple(true).args(["cluster_dir", "member"])
        .conflicts_with("in_pod")
))]
#[command(group(
    ArgGroup::new("in_pod").multiple(true)
        .args(["kubernetes", "namespace", "cluster", "member_from_pod"])
))]
pub struct AgentArgs {
    /// Directory of the local cluster (its coordination files).
    #[arg(long, requires = "member", help_heading = "Local mode")]
    pub cluster_dir: Option<PathBuf>,
    /// The member this agent runs.
    #[arg(long, requires = "cluster_dir", help_heading = "Local mode")]
    pub member: Option<String>,
    /// Coordinate through the Kubernetes API: member and snapshot leases, and the cluster
    /// configuration from the `<cluster>-config` ConfigMap. The client comes from the pod's
    /// ServiceAccount, or from KUBECONFIG when it is set.
    #[arg(
        long,
        requires_all = ["namespace", "cluster", "member_from_pod", "data_dir"],
        help_heading = "Kubernetes mode"
    )]
    pub kubernetes: bool,
    /// Namespace of the Etcd (the pod's, `$(POD_NAMESPACE)`).
    #[arg(long, requires = "kubernetes", help_heading = "Kubernetes mode")]
    pub namespace: Option<String>,
    /// Name of the Etcd.
    #[arg(long, requires = "kubernetes", help_heading = "Kubernetes mode")]
    pub cluster: Option<String>,
    /// Name of the pod this agent runs in (`$(POD_NAME)`); its member is the one whose peer
    /// URL names the pod.
    #[arg(long, requires = "kubernetes", help_heading = "Kubernetes mode")]
    pub member_from_pod: Option<String>,
    /// etcd's data directory [local default: <cluster-dir>/members/<member>/data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// File etcd's output is appended to [local default: <cluster-dir>/members/<member>/etcd.log;
    /// Kubernetes default: /dev/stderr, the container's log].
    #[arg(long)]
    pub etcd_log: Option<PathBuf>,
    /// An etcd binary to run for its own version (read from `etcd --version`); other versions
    /// are looked up in the standard places (docs/operations/etcd-upgrades.md).
    #[arg(long)]
    pub etcd_binary: Option<PathBuf>,
}

/// `quorate backups ...`.
#[derive(Debug, Subcommand)]
pub enum BackupsCommand {
    /// List the snapshots in the bucket of a cluster: kind, revisions, size, time.
    List {
        /// A local cluster's name, or use -f.
        name: Option<String>,
        /// An Etcd manifest whose `spec.backup.store` to list (`-`: standard input).
        #[arg(short = 'f', long = "filename", conflicts_with = "name")]
        file: Option<PathBuf>,
        /// Directory holding the store Secret's keys as files.
        #[arg(long)]
        secret_dir: Option<PathBuf>,
        /// Where `Local` containers live.
        #[arg(long)]
        local_root: Option<PathBuf>,
    },
    /// Copy the snapshots of one bucket into another (any providers; druid's
    /// EtcdCopyBackupsTask): full snapshots with their deltas, byte for byte, skipping what the
    /// target already holds.
    Copy {
        /// A local cluster whose bucket to copy from, or use -f.
        name: Option<String>,
        /// An Etcd manifest whose `spec.backup.store` is the source (`-`: standard input).
        #[arg(short = 'f', long = "filename", conflicts_with = "name")]
        file: Option<PathBuf>,
        /// An Etcd manifest whose `spec.backup.store` is the target.
        #[arg(long = "to", required_unless_present_any = ["task", "task_json"])]
        to: Option<PathBuf>,
        /// An EtcdCopyBackupsTask manifest (druid's): its stores, limits and wait, instead of
        /// NAME/-f, --to and the limit flags.
        #[arg(long, conflicts_with_all = ["name", "file", "to", "max_backups", "max_backup_age", "wait_for_final_snapshot", "task_json"])]
        task: Option<PathBuf>,
        /// The same as --task, as JSON text (what the operator's copy Job passes).
        #[arg(long, hide = true, conflicts_with_all = ["name", "file", "to", "max_backups", "max_backup_age", "wait_for_final_snapshot"])]
        task_json: Option<String>,
        /// Copy only the newest this many backups (a full snapshot with its deltas).
        #[arg(long)]
        max_backups: Option<u32>,
        /// Copy only backups whose full snapshot is at most this many days old.
        #[arg(long)]
        max_backup_age: Option<u32>,
        /// First wait up to this long for a final full snapshot in the source (a hibernation's).
        #[arg(long, value_parser = parse_duration)]
        wait_for_final_snapshot: Option<std::time::Duration>,
        /// Directory holding the source store Secret's keys as files.
        #[arg(long)]
        secret_dir: Option<PathBuf>,
        /// Where the source's `Local` containers live.
        #[arg(long)]
        local_root: Option<PathBuf>,
        /// Directory holding the target store Secret's keys as files.
        #[arg(long)]
        to_secret_dir: Option<PathBuf>,
        /// Where the target's `Local` containers live.
        #[arg(long)]
        to_local_root: Option<PathBuf>,
    },
}

/// `-o` formats of `get`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The table with the priority-1 columns.
    Wide,
    /// The object with its status as YAML.
    Yaml,
    /// The object with its status as JSON.
    Json,
}

/// Client TLS for commands that talk to any etcd endpoint, named like etcdctl's flags.
#[derive(Debug, Args)]
pub struct ClientTlsArgs {
    /// CA bundle for an https endpoint.
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// Client certificate for an endpoint that requires one.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// Client key.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// The TLS settings, when a CA was given.
    pub fn to_tls(&self) -> Option<quorate_etcd::EtcdTls> {
        use quorate_etcd::{ClientIdentity, EtcdTls, PemSource};
        self.cacert.as_ref().map(|ca| EtcdTls {
            ca: PemSource::File(ca.clone()),
            identity: self
                .cert
                .as_ref()
                .zip(self.key.as_ref())
                .map(|(cert, key)| ClientIdentity {
                    cert: PemSource::File(cert.clone()),
                    key: PemSource::File(key.clone()),
                }),
            domain_name: None,
        })
    }
}

/// A Go-style duration that is more than zero (every duration flag is a period or a bound;
/// zero would spin or give up at once).
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let duration = quorate_api::parse_go_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err(format!(
            "{text:?} is zero; give a positive duration such as \"100ms\" or \"30s\""
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn zero_durations_are_refused_with_a_message_not_a_panic() {
        for flag in ["--interval", "--write-timeout", "--report-every"] {
            let refused = Cli::try_parse_from([
                "quorate",
                "canary",
                "--endpoints",
                "http://127.0.0.1:2379",
                flag,
                "0ms",
            ])
            .unwrap_err()
            .to_string();
            assert!(
                refused.contains("is zero; give a positive duration"),
                "{flag}: {refused}"
            );
        }
        assert!(parse_duration("250ms").is_ok());
        assert!(parse_duration("soon").is_err());
    }
}

/// `quorate restore --replay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayArg {
    /// Write etcd's database file directly.
    Direct,
    /// One transaction per revision through a temporary etcd.
    Txn,
}

impl ReplayArg {
    /// The restore's replay method.
    pub fn method(self) -> quorate_backup::restore::ReplayMethod {
        match self {
            ReplayArg::Direct => quorate_backup::restore::ReplayMethod::Direct,
            ReplayArg::Txn => quorate_backup::restore::ReplayMethod::Txn,
        }
    }
}
