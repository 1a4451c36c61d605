//! A member's disk filling up, for real: each member's directory is a small tmpfs of its own,
//! and the fault fills it with a file until writes fail (`ENOSPC`), then removes the file.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Size of each member's file system: room for etcd's preallocated WAL segments (64 MiB each)
/// and a snapshot, little more.
const SIZE: &str = "512m";

/// Member directories mounted as tmpfs; unmounted when dropped.
pub struct SmallDisks {
    mounts: Vec<PathBuf>,
}

impl SmallDisks {
    /// Mounts a tmpfs at each of `dirs` (created if needed). Needs root.
    pub fn mount(dirs: &[PathBuf]) -> Result<Self, String> {
        let mut me = Self { mounts: Vec::new() };
        for dir in dirs {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let out = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={SIZE}"), "tmpfs"])
                .arg(dir)
                .output()
                .map_err(|e| format!("mount: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "mount tmpfs at {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            me.mounts.push(dir.clone());
        }
        Ok(me)
    }

    /// Fills the file system holding `dir` until it has no space left.
    pub fn fill(dir: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(filler(dir))?;
        let block = vec![0u8; 1 << 20];
        loop {
            if let Err(e) = file.write_all(&block) {
                return if e.raw_os_error() == Some(nix::libc::ENOSPC) {
                    Ok(())
                } else {
                    Err(e)
                };
            }
        }
    }

    /// Frees what [`SmallDisks::fill`] took.
    pub fn free(dir: &Path) {
        let _ = std::fs::remove_file(filler(dir));
    }
}

fn filler(dir: &Path) -> PathBuf {
    dir.join("chaos-filler")
}

impl Drop for SmallDisks {
    fn drop(&mut self) {
        for dir in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(dir).status();
        }
    }
}
