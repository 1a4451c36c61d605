//! The TLS files of a member pod: the agent reads the Secrets its configuration names
//! (`secretFiles`) through the API and writes every key as `<dir>/<key>`, before etcd starts
//! or restarts with them and again now and then, so a rotated certificate reaches etcd (which
//! reads its certificate files at each new connection). Enabling TLS is then a change of the
//! configuration only, carried out by restarting etcd in place; no pod is replaced.
//!
//! The backup encryption keys come the same way ([`write_backup_keys`]): copied from their
//! Secret into the directory the store reads them from, before the store is used and again now
//! and then, so a rotated key counts without a restart.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;

use crate::wait::Wait;

/// Writes the files of every Secret `cluster` names; true when a file changed. `Err` says what
/// is missing (a Secret that does not exist, an API or file error); nothing waits here.
pub async fn write_secret_files<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
) -> Result<bool, Wait> {
    let mut changed = false;
    for files in &cluster.secret_files {
        let data = coord
            .secret_data(&files.secret)
            .await
            .map_err(|e| Wait::new(format!("reading the TLS Secret {}: {e}", files.secret)))?
            .ok_or_else(|| {
                Wait::new(format!(
                    "the TLS Secret {} does not exist; etcd starts with TLS once it does",
                    files.secret
                ))
            })?;
        let dir = Path::new(&files.dir);
        std::fs::create_dir_all(dir).map_err(|e| io_wait(dir, &e))?;
        for (key, value) in &data {
            changed |= write_if_changed(&dir.join(key), value)?;
        }
    }
    Ok(changed)
}

/// Copies the backup encryption Secret `cluster` names into the key directory; true when a
/// file changed. Locally the directory is the Secret's own, so nothing changes. `Err` says
/// what is missing; the store then refuses to write (nothing is written in clear).
pub async fn write_backup_keys<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
) -> Result<bool, Wait> {
    let Some(backup) = &cluster.backup else {
        return Ok(false);
    };
    let (Some(secret), Some(dir)) = (&backup.encryption_secret, &backup.encryption_key_dir) else {
        return Ok(false);
    };
    let data = coord
        .secret_data(secret)
        .await
        .map_err(|e| Wait::new(format!("reading the backup encryption Secret {secret}: {e}")))?
        .ok_or_else(|| {
            Wait::new(format!(
                "the backup encryption Secret {secret} does not exist; no backup is written until it does"
            ))
        })?;
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir).map_err(|e| io_wait(dir, &e))?;
    let mut changed = false;
    for (key, value) in &data {
        changed |= write_if_changed(&dir.join(key), value)?;
    }
    Ok(changed)
}

/// Writes `path` (owner read-write only) through a temporary file and a rename, so etcd never
/// reads half a certificate; false when it already held `value`.
fn write_if_changed(path: &Path, value: &[u8]) -> Result<bool, Wait> {
    if std::fs::read(path).is_ok_and(|old| old == value) {
        return Ok(false);
    }
    let tmp = path.with_extension("quorate-tmp");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io_wait(&tmp, &e))?;
    file.write_all(value).map_err(|e| io_wait(&tmp, &e))?;
    file.sync_all().map_err(|e| io_wait(&tmp, &e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_wait(path, &e))?;
    Ok(true)
}

fn io_wait(path: &Path, e: &std::io::Error) -> Wait {
    Wait::new(format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_rewritten_only_when_their_content_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tls.crt");
        assert!(write_if_changed(&path, b"one").unwrap());
        assert!(!write_if_changed(&path, b"one").unwrap());
        assert!(write_if_changed(&path, b"two").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
