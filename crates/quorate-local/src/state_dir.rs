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

/// Makes what this process and its children create readable by their user only (umask 077):
/// a local cluster's state (manifest, records, logs, TLS keys, etcd's data, the `Full-*.gz`
/// backups of a bucket in the state directory) is a copy of the whole key space, even when the
/// cluster requires client certificates. Existing files and directories keep their modes, so a
/// `hostPath` bucket keeps the permissions its operator chose; only new files are private.
pub fn private_umask() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
}

/// Creates `dir` (and missing parents) 0700, and makes an existing `dir` 0700: a cluster's
/// directory is quorate's own, so one created by an older version is tightened too.
pub fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
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

    /// The agents' bearer token (`secrets/<name>-agent-token/token`, mode 0600), as the
    /// file coordination reads Secrets.
    pub fn agent_token(&self) -> PathBuf {
        let name = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.root
            .join("secrets")
            .join(quorate_api::names::agent_token_secret_name(&name))
            .join(quorate_api::names::AGENT_TOKEN_KEY)
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

    /// Moves everything in `member`'s directory to a new directory in the trash; `None` when
    /// there was nothing to move. The member directory itself may be a mount point (its own
    /// disk), so its entries are moved, across file systems by copy and delete.
    pub fn trash_member(&self, member: &str, now_unix: i64) -> std::io::Result<Option<PathBuf>> {
        let from = self.member(member);
        let entries: Vec<_> = std::fs::read_dir(&from)?.collect::<Result<_, _>>()?;
        if entries.is_empty() {
            return Ok(None);
        }
        let to = self.trash().join(format!("{member}-{now_unix}"));
        std::fs::create_dir_all(&to)?;
        for entry in entries {
            move_path(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(Some(to))
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

/// Renames `from` to `to`, or copies it and deletes the original where a rename cannot cross
/// file systems.
fn move_path(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            copy_recursively(from, to)?;
            if from.is_dir() {
                std::fs::remove_dir_all(from)
            } else {
                std::fs::remove_file(from)
            }
        }
        other => other,
    }
}

fn copy_recursively(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_recursively(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(drop)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_members_files_go_to_the_trash_and_an_empty_directory_is_left_alone() {
        let state = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(state.path(), "c");
        std::fs::create_dir_all(dir.member_data("c-3").join("member")).unwrap();
        std::fs::write(dir.member_removed_marker("c-3"), "removed").unwrap();
        let trash = dir.trash_member("c-3", 1700).unwrap().expect("moved");
        assert_eq!(trash, dir.trash().join("c-3-1700"));
        assert!(trash.join("data/member").is_dir());
        assert!(trash.join("removed").is_file());
        assert!(!dir.member_removed_marker("c-3").exists());
        assert_eq!(
            dir.trash_member("c-3", 1701).unwrap(),
            None,
            "nothing left to move"
        );
        assert!(!dir.trash().join("c-3-1701").exists());
    }

    #[test]
    fn copying_keeps_the_tree() {
        let root = tempfile::tempdir().unwrap();
        let from = root.path().join("from");
        std::fs::create_dir_all(from.join("a/b")).unwrap();
        std::fs::write(from.join("a/b/f"), "x").unwrap();
        copy_recursively(&from, &root.path().join("to")).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("to/a/b/f")).unwrap(),
            "x"
        );
    }
}
