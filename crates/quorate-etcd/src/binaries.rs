//! Where etcd's programs are found on this machine. Shared by the agent (which runs `etcd`), the
//! restore (which needs `etcdctl`) and the CLI that starts both, so all look in the same places.

use std::path::PathBuf;

/// Finds the etcd binary: `QUORATE_ETCD_BIN`, else `etcd` on the PATH.
pub fn etcd_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("QUORATE_ETCD_BIN") {
        return PathBuf::from(bin);
    }
    find_on_path("etcd").unwrap_or_else(|| PathBuf::from("etcd"))
}

/// Looks `name` up on the PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
