//! Locating the real `etcd` and `etcdctl` binaries the tests run.

use std::env;
use std::path::{Path, PathBuf};

/// Environment variable that overrides where the `etcd` binary is found (e.g. an etcd 3.5 build).
pub const ETCD_BIN_ENV: &str = "QUORATE_ETCD_BIN";
/// Environment variable that overrides where the `etcdctl` binary is found.
pub const ETCDCTL_BIN_ENV: &str = "QUORATE_ETCDCTL_BIN";

const INSTALL_HINT: &str = "install etcd-server/etcd-client: apt-get install etcd-server etcd-client, \
     or run scripts/install-deps.sh";

/// The `etcd` server binary tests should run; panics with an install hint when there is none,
/// because a test that silently skips etcd would prove nothing.
pub fn etcd_binary() -> PathBuf {
    find_binary("etcd", ETCD_BIN_ENV)
}

/// The `etcdctl` binary tests should run; panics with an install hint when there is none.
pub fn etcdctl_binary() -> PathBuf {
    find_binary("etcdctl", ETCDCTL_BIN_ENV)
}

fn find_binary(name: &str, env_var: &str) -> PathBuf {
    if let Some(path) = env::var_os(env_var).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        if is_executable(&path) {
            return path;
        }
        panic!(
            "{env_var} points at {}, which is not an executable file; fix {env_var} or unset it \
             to use `{name}` from PATH ({INSTALL_HINT})",
            path.display()
        );
    }
    lookup_in_path(name).unwrap_or_else(|| {
        panic!("`{name}` was not found on PATH and {env_var} is not set; {INSTALL_HINT}")
    })
}

/// Finds an executable called `name` on `PATH`.
pub fn lookup_in_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Environment variable listing the etcd minor versions whose tests must run rather than skip
/// when their binaries are missing: `3.5,3.6,3.7`, or `all` (CI sets it after
/// `scripts/install-etcd.sh`). The older `QUORATE_REQUIRE_ETCD35` still requires 3.5.
pub const REQUIRE_ETCD_ENV: &str = "QUORATE_REQUIRE_ETCD";

/// Whether tests of etcd `version` must run (their binaries missing is a failure, not a skip).
pub fn etcd_version_required(version: quorate_api::EtcdVersion) -> bool {
    if version == quorate_api::EtcdVersion::V3_5
        && env::var_os("QUORATE_REQUIRE_ETCD35").is_some_and(|v| !v.is_empty())
    {
        return true;
    }
    let Ok(list) = env::var(REQUIRE_ETCD_ENV) else {
        return false;
    };
    list.split(',').map(str::trim).any(|item| {
        item == "all"
            || quorate_api::EtcdVersion::parse(item).is_ok_and(|required| required == version)
    })
}

/// The binary of etcd `version` a lookup found, or `None` after saying why the test skips;
/// panics when that version is required ([`REQUIRE_ETCD_ENV`]), since a skip would prove
/// nothing there.
pub fn etcd_of_version_or_skip<E: std::fmt::Display>(
    version: quorate_api::EtcdVersion,
    found: Result<PathBuf, E>,
) -> Option<PathBuf> {
    match found {
        Ok(path) => Some(path),
        Err(missing) => {
            assert!(
                !etcd_version_required(version),
                "etcd {version} is required ({REQUIRE_ETCD_ENV}): {missing}; run \
                 scripts/install-etcd.sh {version}"
            );
            eprintln!("SKIPPED: {missing}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sh_on_path_and_not_a_made_up_name() {
        assert!(lookup_in_path("sh").is_some());
        assert!(lookup_in_path("quorate-no-such-binary-xyz").is_none());
    }

    #[test]
    fn etcd_binaries_are_installed() {
        assert!(is_executable(&etcd_binary()));
        assert!(is_executable(&etcdctl_binary()));
    }
}
