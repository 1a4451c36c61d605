//! The plugin's errors: each says what failed, on which object, and what to do.

use std::path::PathBuf;

/// A flag's value that cannot be used (clap prints it with the flag's name).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(pub String);

/// Why a plugin command failed.
#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    /// The kubeconfig could not be read or has no usable context.
    #[error(
        "kubeconfig: {0}; give one with --kubeconfig or KUBECONFIG, and a context with --context"
    )]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// No kubeconfig, and not in a pod either.
    #[error(
        "no kubeconfig ({kubeconfig}) and no in-cluster service account ({in_cluster}); give one with --kubeconfig or KUBECONFIG"
    )]
    NoConfig {
        /// Why no kubeconfig was read.
        kubeconfig: kube::config::KubeconfigError,
        /// Why the in-cluster configuration failed.
        in_cluster: kube::config::InClusterError,
    },
    /// The client could not be built from the configuration.
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// An API request failed.
    #[error("{verb} {what}: {source}")]
    Api {
        /// The request (`get`, `list`, `patch`).
        verb: &'static str,
        /// The object or collection (`etcd default/etcd-main`).
        what: String,
        /// The API's answer.
        #[source]
        source: kube::Error,
    },
    /// The named Etcd does not exist.
    #[error(
        "Etcd {name} not found in namespace {namespace}; `kubectl quorate get etcd -A` lists every Etcd"
    )]
    NotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Flags that do not fit together, or a command that cannot do what was asked.
    #[error("{0}")]
    Usage(String),
    /// `-o jsonpath=…` that cannot be evaluated.
    #[error("-o jsonpath: {0}")]
    JsonPath(String),
    /// Waiting ended at its timeout.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The `--timeout`.
        timeout: std::time::Duration,
    },
    /// The Etcd's bucket could not be opened or listed.
    #[error("the bucket of Etcd {etcd}: {message}")]
    Store {
        /// `namespace/name`.
        etcd: String,
        /// What the store said.
        message: String,
    },
    /// The member leases could not be read.
    #[error("the member leases: {0}")]
    Coord(#[from] quorate_coord::CoordError),
    /// A file could not be written.
    #[error("{path}: {source}")]
    File {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
    /// An object could not be rendered.
    #[error("rendering the output: {0}")]
    Render(String),
}
