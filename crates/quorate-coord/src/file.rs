//! Local-mode coordination: leases and the cluster configuration as files under the cluster's
//! state directory (`leases/<name>.json`, `config.json`).

use crate::{CoordError, Coordination, json_file};
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::lease::{MemberLease, SnapshotLease};
use std::path::{Path, PathBuf};

/// File-backed [`Coordination`] rooted at one cluster's state directory.
#[derive(Clone, Debug)]
pub struct FileCoordination {
    root: PathBuf,
}

impl FileCoordination {
    /// Coordination for the cluster whose state lives in `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Path of the cluster configuration file.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.json")
    }

    fn lease_dir(&self) -> PathBuf {
        self.root.join("leases")
    }

    fn snapshot_lease_path(&self, name: &str) -> PathBuf {
        self.root
            .join("snapshot-leases")
            .join(format!("{name}.json"))
    }

    fn lease_path(&self, name: &str) -> PathBuf {
        self.lease_dir().join(format!("{name}.json"))
    }

    /// Writes the cluster configuration (the controller's side).
    pub fn write_cluster_config(&self, config: &ClusterConfig) -> Result<(), CoordError> {
        json_file::write_atomic(&self.config_path(), config)
    }

    /// Deletes a member lease (when the member is removed for good).
    pub fn delete_member_lease(&self, name: &str) -> Result<(), CoordError> {
        remove_if_exists(&self.lease_path(name))
    }
}

fn remove_if_exists(path: &Path) -> Result<(), CoordError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CoordError::Io {
            action: "delete",
            path: path.display().to_string(),
            source: e,
        }),
        _ => Ok(()),
    }
}

impl Coordination for FileCoordination {
    /// Local TLS files are files already: a local configuration names no Secret.
    /// A local Secret is the directory `secrets/<name>/` of the cluster, one file per key
    /// (as the store Secrets are).
    async fn secret_data(
        &self,
        name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, Vec<u8>>>, CoordError> {
        let dir = self.root.join("secrets").join(name);
        let io = |e: std::io::Error| CoordError::Io {
            action: "reading the Secret directory",
            path: dir.display().to_string(),
            source: e,
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let mut data = std::collections::BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(io)?;
            if entry.file_type().map_err(io)?.is_file() {
                let value = std::fs::read(entry.path()).map_err(io)?;
                data.insert(entry.file_name().to_string_lossy().into_owned(), value);
            }
        }
        Ok(Some(data))
    }

    async fn cluster_config(&self) -> Result<ClusterConfig, CoordError> {
        let path = self.config_path();
        json_file::read(&path, "cluster configuration")?.ok_or(CoordError::NoConfig {
            path: path.display().to_string(),
            hint: "is the cluster created (`quorate up`)?",
        })
    }

    async fn member_lease(&self, name: &str) -> Result<Option<MemberLease>, CoordError> {
        json_file::read(&self.lease_path(name), "member lease")
    }

    async fn member_leases(&self) -> Result<Vec<MemberLease>, CoordError> {
        let dir = self.lease_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(CoordError::Io {
                    action: "list",
                    path: dir.display().to_string(),
                    source: e,
                });
            }
        };
        let mut leases = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Some(lease) = json_file::read(&path, "member lease")?
            {
                leases.push(lease);
            }
        }
        leases.sort_by(|a: &MemberLease, b| a.name.cmp(&b.name));
        Ok(leases)
    }

    async fn put_member_lease(&self, lease: &MemberLease) -> Result<(), CoordError> {
        json_file::write_atomic(&self.lease_path(&lease.name), lease)
    }

    async fn snapshot_lease(&self, name: &str) -> Result<Option<SnapshotLease>, CoordError> {
        json_file::read(&self.snapshot_lease_path(name), "snapshot lease")
    }

    async fn put_snapshot_lease(&self, lease: &SnapshotLease) -> Result<(), CoordError> {
        json_file::write_atomic(&self.snapshot_lease_path(&lease.name), lease)
    }
}
