//! Where local clusters live on disk: one directory per cluster under the state directory,
//! holding the applied manifest, its status, the agents' coordination files, each member's
//! data and logs, and the default backup bucket.

use std::path::{Path, PathBuf};

/// The state directory: `--state-dir`, else `QUORATE_STATE_DIR`, else
/// `$XDG_STATE_HOME/quorate`, else `~/.local/state/quorate`.
pub fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("QUORATE_STATE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("quorate");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/quorate")
}

/// Paths of one local cluster.
#[derive(Clone, Debug)]
pub struct ClusterDir {
    root: PathBuf,
}

impl ClusterDir {
    /// The directory of cluster `name` under `state_dir`.
    pub fn new(state_dir: &Path, name: &str) -> Self {
        Self {
            root: state_dir.join("clusters").join(name),
        }
    }

    /// The cluster's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the cluster was ever created here.
    pub fn exists(&self) -> bool {
        self.manifest().is_file()
    }

    /// The applied `Etcd` manifest (the local stand-in for the API object).
    pub fn manifest(&self) -> PathBuf {
        self.root.join("etcd.yaml")
    }

    /// The cluster's status as last computed by its supervisor.
    pub fn status(&self) -> PathBuf {
        self.root.join("status.json")
    }

    /// Local facts: identity, token, port assignments.
    pub fn record(&self) -> PathBuf {
        self.root.join("cluster.json")
    }

    /// Held (file lock) by the running supervisor; holds its PID.
    pub fn supervisor_lock(&self) -> PathBuf {
        self.root.join("supervisor.lock")
    }

    /// The supervisor's log.
    pub fn supervisor_log(&self) -> PathBuf {
        self.root.join("supervisor.log")
    }

    /// Directory of one member.
    pub fn member(&self, member: &str) -> PathBuf {
        self.root.join("members").join(member)
    }

    /// etcd data directory of one member.
    pub fn member_data(&self, member: &str) -> PathBuf {
        self.member(member).join("data")
    }

    /// Marker written when a member was removed from the cluster on purpose.
    pub fn member_removed_marker(&self, member: &str) -> PathBuf {
        self.member(member).join("removed")
    }

    /// Where the data of members a scale-in removed is kept until `down --purge`.
    pub fn trash(&self) -> PathBuf {
        self.root.join("trash")
    }

    /// Names of the members that have a directory here.
    pub fn member_dirs(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root.join("members"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// Default bucket directory for the `Local` backup provider.
    pub fn backups(&self) -> PathBuf {
        self.root.join("backups")
    }
}

/// Names of the clusters under `state_dir`.
pub fn list_clusters(state_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state_dir.join("clusters"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("etcd.yaml").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}
