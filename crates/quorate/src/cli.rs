//! Command-line interface.

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// etcd clusters from etcd-druid `Etcd` manifests, managed locally or on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "quorate", version, about)]
pub struct Cli {
    /// Where local clusters keep their state [default: $XDG_STATE_HOME/quorate or ~/.local/state/quorate].
    #[arg(long, global = true, env = "QUORATE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Log level (error, warn, info, debug, trace); QUORATE_LOG takes a full filter.
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or start the cluster an Etcd manifest describes, on this machine, and keep it true.
    Up {
        /// The Etcd manifest (YAML or JSON).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Return once every member is ready, leaving the cluster supervised in the background.
        #[arg(short = 'd', long)]
        detach: bool,
        /// How long --detach waits for the cluster.
        #[arg(long, default_value = "120s", value_parser = parse_duration)]
        timeout: std::time::Duration,
        /// The etcd binary [default: $QUORATE_ETCD_BIN or etcd on the PATH].
        #[arg(long)]
        etcd_binary: Option<PathBuf>,
    },
    /// Change a running local cluster to match an Etcd manifest (replicas, etcd settings).
    Apply {
        /// The Etcd manifest (YAML or JSON).
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
        /// Also delete its data, backups and state.
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
    },
    /// List the members of a local cluster: ID, name, URLs, leader, learner, health.
    Members {
        /// Cluster name.
        name: String,
    },
    /// Print the client URLs of a local cluster, comma-separated, for `etcdctl --endpoints`.
    Endpoints {
        /// Cluster name.
        name: String,
    },
    /// Print the Etcd CustomResourceDefinition (YAML).
    Crd,
    /// Run the agent of one member (started by `quorate up` or in a pod).
    Agent {
        /// Directory of the local cluster (its coordination files).
        #[arg(long)]
        cluster_dir: PathBuf,
        /// The member this agent runs.
        #[arg(long)]
        member: String,
        /// The etcd binary.
        #[arg(long)]
        etcd_binary: Option<PathBuf>,
    },
    /// Run the supervisor of a local cluster in the foreground (what `up -d` starts).
    #[command(hide = true)]
    Supervise {
        /// Cluster name.
        name: String,
        /// The etcd binary.
        #[arg(long)]
        etcd_binary: Option<PathBuf>,
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

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    quorate_api::parse_go_duration(text).map_err(|e| e.to_string())
}
