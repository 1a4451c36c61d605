//! Where a local cluster's `Local` backup buckets live: in its state directory (`backups/`),
//! unless the store's Secret names a `hostPath`, as druid's `Local` provider takes it from the
//! Secret on Kubernetes. Locally the Secret is the directory `secrets/<name>/`, so the file
//! `secrets/<name>/hostPath` holds the directory, which may be on another disk than the data.

use std::path::{Path, PathBuf};

use quorate_api::Etcd;

use crate::LocalError;
use crate::state_dir::ClusterDir;

/// The file of a store Secret's directory that names the host directory of its buckets.
pub const HOST_PATH_FILE: &str = "hostPath";

/// The directory holding the cluster's `Local` buckets: the store Secret's `hostPath` when it
/// has one (an absolute path), else `backups/` in the state directory.
pub fn local_backup_root(etcd: &Etcd, dir: &ClusterDir) -> Result<PathBuf, LocalError> {
    let secret = etcd
        .spec
        .backup
        .store
        .as_ref()
        .and_then(|s| s.secret_ref.as_ref())
        .and_then(|r| r.name.as_deref());
    let Some(secret) = secret else {
        return Ok(dir.backups());
    };
    let file = dir.root().join("secrets").join(secret).join(HOST_PATH_FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) => host_path(text.trim(), &file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(dir.backups()),
        Err(source) => Err(LocalError::Io {
            action: "read",
            path: file.display().to_string(),
            source,
        }),
    }
}

fn host_path(text: &str, file: &Path) -> Result<PathBuf, LocalError> {
    let path = PathBuf::from(text);
    if text.is_empty() || !path.is_absolute() {
        return Err(LocalError::BucketPath {
            file: file.display().to_string(),
            found: text.to_string(),
        });
    }
    Ok(path)
}

/// The bucket directory when it lies outside the state directory, which `down --purge` keeps.
pub fn kept_outside(etcd: &Etcd, dir: &ClusterDir) -> Option<PathBuf> {
    local_backup_root(etcd, dir)
        .ok()
        .filter(|root| !root.starts_with(dir.root()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd_with_secret() -> Etcd {
        let mut etcd: Etcd = serde_saphyr::from_str(
            "apiVersion: druid.gardener.cloud/v1alpha1\nkind: Etcd\nmetadata: {name: b}\n\
             spec:\n  replicas: 1\n  labels: {app: b}\n  etcd: {}\n  backup:\n    store:\n      \
             provider: Local\n      container: c\n      prefix: p\n      secretRef: {name: disk}\n",
        )
        .unwrap();
        etcd.metadata.namespace = Some("default".into());
        etcd
    }

    #[test]
    fn the_secrets_host_path_names_the_bucket_root_and_must_be_absolute() {
        let state = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(state.path(), "b");
        let etcd = etcd_with_secret();
        assert_eq!(local_backup_root(&etcd, &dir).unwrap(), dir.backups());
        assert_eq!(kept_outside(&etcd, &dir), None);
        let secret = dir.root().join("secrets/disk");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join(HOST_PATH_FILE), "/mnt/other-disk/etcd\n").unwrap();
        let root = PathBuf::from("/mnt/other-disk/etcd");
        assert_eq!(local_backup_root(&etcd, &dir).unwrap(), root);
        assert_eq!(kept_outside(&etcd, &dir), Some(root));
        std::fs::write(secret.join(HOST_PATH_FILE), "buckets").unwrap();
        let err = local_backup_root(&etcd, &dir).unwrap_err().to_string();
        assert!(
            err.contains("secrets/disk/hostPath") && err.contains("\"buckets\""),
            "{err}"
        );
    }
}
