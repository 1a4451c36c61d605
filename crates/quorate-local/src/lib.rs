//! Local mode: the same `Etcd` manifest that etcd-druid runs on Kubernetes, run on one machine
//! with real etcd processes. A supervisor per cluster plays the operator's part (configuration,
//! one agent per member, status); the agents are the same ones that run in pods.

pub mod agents;
pub mod bucket;
pub mod commands;
pub mod defrag;
pub mod etcd_view;
pub mod lock;
pub mod members;
pub mod object;
pub mod orphans;
pub mod ports;
pub mod probe;
pub mod record;
pub mod recover;
pub mod render;
pub mod restore;
pub mod state_dir;
pub mod status;
pub mod supervisor;
/// The `get etcd` table and kubectl's column layout, shared with the kubectl plugin.
pub use quorate_api::printer as table;
pub mod tls;

use thiserror::Error;

/// A local-mode failure, phrased for the person at the terminal.
#[derive(Debug, Error)]
pub enum LocalError {
    /// A file could not be read or written.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// `-f -` could not take a manifest from standard input.
    #[error("-f -: {0}")]
    Stdin(&'static str),
    /// The manifest cannot be read as an `Etcd`.
    #[error(transparent)]
    Manifest(#[from] quorate_api::manifest::ManifestError),
    /// The manifest is not a valid `Etcd`.
    #[error("the Etcd manifest is invalid; nothing was changed:\n{0}")]
    Invalid(#[from] quorate_api::validate::ValidationErrors),
    /// Coordination files are unreadable.
    #[error(transparent)]
    Coord(#[from] quorate_coord::CoordError),
    /// A port is unusable.
    #[error(transparent)]
    Port(#[from] ports::PortError),
    /// No such cluster.
    #[error(
        "no local cluster named {name:?}; `quorate get etcd` lists the clusters, `quorate up -f FILE` creates one"
    )]
    NotFound {
        /// The name asked for.
        name: String,
    },
    /// A supervisor already runs the cluster.
    #[error(
        "cluster {name:?} is already running (supervisor pid {pid}); change it with `quorate apply -f FILE` \
         or stop it with `quorate down {name}`"
    )]
    AlreadyRunning {
        /// The cluster.
        name: String,
        /// Its supervisor.
        pid: u32,
    },
    /// The supervisor that was to run the cluster ended without taking it over (or died).
    #[error(
        "cluster {name:?}: its supervisor (pid {pid}) ended and no supervisor runs it; see \
         {log} for why, then start it again with `quorate up -f FILE`"
    )]
    SupervisorGone {
        /// The cluster.
        name: String,
        /// The supervisor's process.
        pid: u32,
        /// The supervisor's log file.
        log: String,
    },
    /// No supervisor runs the cluster.
    #[error("cluster {name:?} is not running; start it with `quorate up -f FILE`")]
    NotRunning {
        /// The cluster.
        name: String,
    },
    /// The cluster hibernates: no etcd runs to ask.
    #[error(
        "cluster {name:?} is hibernated (spec.replicas: 0): no etcd runs and its data is kept; \
         wake it by applying spec.replicas > 0 (`quorate apply -f FILE`)"
    )]
    Hibernated {
        /// The cluster.
        name: String,
    },
    /// The etcd binary is missing.
    #[error("{path}")]
    EtcdMissing {
        /// What was looked for where, and what to do.
        path: String,
    },
    /// `--etcd-binary` is not the version the cluster runs.
    #[error(
        "--etcd-binary {path} is {found}, but the cluster runs etcd {version}; nothing was \
         started. Give an etcd {version} binary, or leave --etcd-binary out (quorate finds each \
         version's binary itself); change the version with the quorate.io/etcd-version annotation"
    )]
    EtcdBinaryVersion {
        /// The binary given.
        path: String,
        /// What it is.
        found: String,
        /// The version the cluster runs.
        version: quorate_api::EtcdVersion,
    },
    /// The requested etcd version change is refused.
    #[error("cluster {name:?}: {reason}; nothing was changed")]
    EtcdVersion {
        /// The cluster.
        name: String,
        /// Why.
        reason: String,
    },
    /// Something did not happen in time.
    #[error("{what} did not happen within {seconds}s; {hint}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        seconds: u64,
        /// Where to look.
        hint: String,
    },
    /// Certificates for a TLS cluster cannot be read or made.
    #[error("TLS: {message}")]
    Tls {
        /// What is wrong and what to do.
        message: String,
    },
    /// An etcd call failed.
    #[error(transparent)]
    Etcd(#[from] quorate_etcd::EtcdError),
    /// A member name that the cluster does not have.
    #[error("cluster {name:?} has no member {member:?}; its members are: {members}")]
    UnknownMember {
        /// The cluster.
        name: String,
        /// The name asked for.
        member: String,
        /// The members it has.
        members: String,
    },
    /// A store Secret's `hostPath` is not a usable directory.
    #[error(
        "{file} holds {found:?}, but a Local store's hostPath must be an absolute directory \
         (e.g. /mnt/backups); fix the file or remove it to keep the buckets in the cluster's \
         state directory"
    )]
    BucketPath {
        /// The `hostPath` file.
        file: String,
        /// What it holds.
        found: String,
    },
}
