//! Where etcd's programs are found on this machine, per etcd version. Shared by the agent (which
//! runs `etcd`), the restore (which needs `etcdctl`/`etcdutl`) and the CLI that starts both, so
//! all look in the same places:
//!
//! 1. a binary pinned by the caller (`--etcd-binary`, `QUORATE_ETCD_BIN`), for its own version;
//! 2. `$QUORATE_ETCD_<MAJOR>_<MINOR>_DIR` (e.g. `QUORATE_ETCD_3_5_DIR`);
//! 3. `/usr/lib/quorate/etcd-<version>/` (the image);
//! 4. `~/.cache/quorate/etcd-<version>/` (`scripts/install-etcd.sh`, 3.5 to 3.7);
//! 5. `etcd` on the PATH (Debian's package), when it is that version.
//!
//! Every candidate's version is read from `etcd --version`, so a binary is never used for a
//! version it is not.

use std::path::{Path, PathBuf};

use quorate_api::EtcdVersion;

/// Environment variable naming one etcd binary to use for its version.
pub const ETCD_BIN_ENV: &str = "QUORATE_ETCD_BIN";

/// Finds the etcd binary the CLI pins when nothing else is said: `QUORATE_ETCD_BIN`, else
/// `etcd` on the PATH.
pub fn etcd_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os(ETCD_BIN_ENV) {
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

/// The version of an etcd binary (`etcd --version`), `None` when it does not run or say.
pub fn binary_version(binary: &Path) -> Option<EtcdVersion> {
    let output = std::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text
        .lines()
        .find_map(|line| line.strip_prefix("etcd Version:"))?;
    EtcdVersion::parse(version).ok()
}

/// The etcd binaries of this machine: an optionally pinned one plus the standard places.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdBinaries {
    /// A binary the caller chose, used for its own version.
    pub pinned: Option<PathBuf>,
}

/// No etcd binary of the wanted version was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no etcd {version} binary found (looked in: {looked}); run scripts/install-etcd.sh {version} \
     (or scripts/install-deps.sh), or set {env} to a directory holding etcd {version}'s `etcd`"
)]
pub struct MissingEtcd {
    /// The version asked for.
    pub version: EtcdVersion,
    /// Where it looked, with what it found there.
    pub looked: String,
    /// The environment variable that points at a directory of that version.
    pub env: String,
}

impl EtcdBinaries {
    /// The standard places, with `pinned` first for its version.
    pub fn with_pinned(pinned: Option<PathBuf>) -> EtcdBinaries {
        EtcdBinaries { pinned }
    }

    /// The `etcd` binary of `version`.
    pub fn etcd(&self, version: EtcdVersion) -> Result<PathBuf, MissingEtcd> {
        let mut looked = Vec::new();
        for candidate in self.candidates(version) {
            match binary_version(&candidate) {
                Some(found) if found == version => return Ok(candidate),
                Some(found) => looked.push(format!("{} is {found}", candidate.display())),
                None if candidate.exists() => {
                    looked.push(format!("{} does not run", candidate.display()))
                }
                None => looked.push(format!("{} (absent)", candidate.display())),
            }
        }
        Err(MissingEtcd {
            version,
            looked: looked.join("; "),
            env: version_dir_env(version),
        })
    }

    fn candidates(&self, version: EtcdVersion) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os(version_dir_env(version)) {
            dirs.push(PathBuf::from(dir));
        }
        dirs.push(PathBuf::from(format!("/usr/lib/quorate/etcd-{version}")));
        if let Some(home) = std::env::var_os("HOME") {
            dirs.push(PathBuf::from(home).join(format!(".cache/quorate/etcd-{version}")));
        }
        let mut candidates: Vec<PathBuf> = self.pinned.iter().cloned().collect();
        candidates.extend(dirs.into_iter().map(|d| d.join("etcd")));
        candidates.extend(std::env::var_os(ETCD_BIN_ENV).map(PathBuf::from));
        candidates.extend(find_on_path("etcd"));
        candidates.dedup();
        candidates
    }
}

/// `QUORATE_ETCD_3_5_DIR` for 3.5.
pub fn version_dir_env(version: EtcdVersion) -> String {
    format!("QUORATE_ETCD_{}_{}_DIR", version.major, version.minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debians_etcd_is_found_as_3_4_and_never_used_as_3_5() {
        let Some(path_etcd) = find_on_path("etcd") else {
            panic!("etcd is not on the PATH: run scripts/install-deps.sh");
        };
        assert_eq!(binary_version(&path_etcd), Some(EtcdVersion::V3_4));
        let pinned = EtcdBinaries::with_pinned(Some(path_etcd.clone()));
        assert_eq!(pinned.etcd(EtcdVersion::V3_4).unwrap(), path_etcd);
        // 3.9 does not exist: the error names where it looked and what to do.
        let missing = pinned
            .etcd(EtcdVersion { major: 3, minor: 9 })
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains(&format!("{} is 3.4", path_etcd.display()))
                && missing.contains("QUORATE_ETCD_3_9_DIR"),
            "{missing}"
        );
    }

    #[test]
    fn installed_etcd_3_5_to_3_7_are_found_as_their_version() {
        for version in [EtcdVersion::V3_5, EtcdVersion::V3_6, EtcdVersion::V3_7] {
            let found = EtcdBinaries::default().etcd(version);
            if let Some(found) = quorate_testkit::etcd_of_version_or_skip(version, found) {
                assert_eq!(binary_version(&found), Some(version));
                for tool in ["etcdctl", "etcdutl"] {
                    assert!(
                        found.with_file_name(tool).is_file(),
                        "{tool} beside {found:?}"
                    );
                }
            }
        }
    }
}
