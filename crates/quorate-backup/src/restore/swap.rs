//! Putting a restored data directory in place only once it is complete.
//!
//! A restore builds the new data in `<dir>.part` next to the target and works in
//! `<dir>.restore` (both siblings, so renames stay on one filesystem). Only after everything
//! succeeded is `<dir>.part` swapped with `<dir>`, atomically where the filesystem supports
//! exchanging two names (Linux `renameat2(RENAME_EXCHANGE)`), so the old data is never gone
//! before the new data is there. The target must therefore not be a mount point itself; use a
//! directory inside the volume, as etcd-druid does (`/var/etcd/data/new.etcd`).

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// `<dir>` with `suffix` appended to its last component.
fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name: OsString = dir.file_name().map(OsString::from).unwrap_or_default();
    name.push(suffix);
    dir.with_file_name(name)
}

/// Where the new data directory is built.
pub fn part_dir(target: &Path) -> PathBuf {
    sibling(target, ".part")
}

/// Scratch space of a restore (downloaded snapshot, temporary etcd's log).
pub fn work_dir(target: &Path) -> PathBuf {
    sibling(target, ".restore")
}

/// Removes a directory tree if it exists.
pub fn remove_if_exists(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Replaces `target` with `part` (old contents deleted afterwards) and syncs the parent
/// directory so the swap survives a crash.
pub fn swap_into_place(part: &Path, target: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(target).is_err() {
        std::fs::rename(part, target)?;
    } else if exchange(part, target).is_err() {
        // No atomic exchange here: move the old data aside first, so at every moment one
        // complete data directory exists under a known name.
        let old = sibling(target, ".old");
        remove_if_exists(&old)?;
        std::fs::rename(target, &old)?;
        std::fs::rename(part, target)?;
        remove_if_exists(&old)?;
    } else {
        // `part` now holds the old data.
        remove_if_exists(part)?;
    }
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Flushes every file and directory under `dir` to disk (after a replay without fsync).
pub fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            std::fs::File::open(&path)?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    renameat2(AT_FDCWD, a, AT_FDCWD, b, RenameFlags::RENAME_EXCHANGE).map_err(io::Error::from)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn exchange(_a: &Path, _b: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_keep_the_directory_name() {
        let target = Path::new("/var/etcd/data/new.etcd");
        assert_eq!(part_dir(target), Path::new("/var/etcd/data/new.etcd.part"));
        assert_eq!(
            work_dir(target),
            Path::new("/var/etcd/data/new.etcd.restore")
        );
    }

    #[test]
    fn swap_replaces_existing_data_and_creates_missing_targets() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("data");
        let part = part_dir(&target);

        std::fs::create_dir_all(part.join("member")).unwrap();
        std::fs::write(part.join("member/new"), "1").unwrap();
        swap_into_place(&part, &target).unwrap();
        assert!(target.join("member/new").is_file());
        assert!(!part.exists());

        std::fs::create_dir_all(part.join("member")).unwrap();
        std::fs::write(part.join("member/newer"), "2").unwrap();
        swap_into_place(&part, &target).unwrap();
        assert!(target.join("member/newer").is_file());
        assert!(!target.join("member/new").exists(), "old data is gone");
        assert!(!part.exists());
        assert!(!sibling(&target, ".old").exists());
        sync_tree(&target).unwrap();
    }
}
