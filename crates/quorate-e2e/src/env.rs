//! What the suite runs against, from the environment `scripts/e2e.sh` sets.

use std::path::{Path, PathBuf};

/// The kubeconfig of the cluster under test; without it the suite skips.
pub const KUBECONFIG_VAR: &str = "QUORATE_E2E_KUBECONFIG";
/// `1` (with `CI` set) makes a missing kubeconfig a failure instead of a skip.
pub const REQUIRE_VAR: &str = "QUORATE_E2E";

/// The cluster under test and the images it runs.
#[derive(Clone, Debug)]
pub struct E2eEnv {
    /// Admin kubeconfig of the cluster.
    pub kubeconfig: PathBuf,
    /// `kubectl` (`QUORATE_E2E_KUBECTL`, else `kubectl` on the PATH, else the project's build).
    pub kubectl: PathBuf,
    /// The quorate image (`QUORATE_E2E_IMAGE`): client pods run `etcdctl` from it.
    pub image: String,
    /// Where hostPath volumes are made for claims (`QUORATE_E2E_HOSTPATH_DIR`), on clusters
    /// without a provisioner; `None` leaves claims to the cluster's default StorageClass.
    pub hostpath_dir: Option<PathBuf>,
    /// Where scenario timings are appended (`QUORATE_E2E_RESULTS`), one tab-separated line each.
    pub results: Option<PathBuf>,
    /// Where passed scenarios append their benchmark numbers (`QUORATE_E2E_BENCH`), one
    /// `scenario <TAB> key <TAB> value` line each.
    pub bench: Option<PathBuf>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl E2eEnv {
    /// The environment, or `None` after printing `SKIPPED` when `QUORATE_E2E_KUBECONFIG` is
    /// unset. Panics instead when `CI` and `QUORATE_E2E=1` are set: there the suite must run.
    pub fn from_env_or_skip(test: &str) -> Option<E2eEnv> {
        let Some(kubeconfig) = var(KUBECONFIG_VAR) else {
            let required =
                std::env::var_os("CI").is_some() && var(REQUIRE_VAR).as_deref() == Some("1");
            if required {
                panic!(
                    "{test}: CI and {REQUIRE_VAR}=1 are set, so the end-to-end suite must run, but \
                     {KUBECONFIG_VAR} is not set; run it through scripts/e2e.sh"
                );
            }
            eprintln!(
                "SKIPPED {test} (end-to-end): {KUBECONFIG_VAR} is not set; scripts/e2e.sh runs \
                 the suite on a real node"
            );
            return None;
        };
        let kubeconfig = PathBuf::from(kubeconfig);
        assert!(
            kubeconfig.is_file(),
            "{KUBECONFIG_VAR}={} is not a file",
            kubeconfig.display()
        );
        Some(E2eEnv {
            kubeconfig,
            kubectl: var("QUORATE_E2E_KUBECTL")
                .map(PathBuf::from)
                .unwrap_or_else(default_kubectl),
            image: var("QUORATE_E2E_IMAGE")
                .unwrap_or_else(|| format!("k8s.local/quorate:{}", env!("CARGO_PKG_VERSION"))),
            hostpath_dir: var("QUORATE_E2E_HOSTPATH_DIR").map(PathBuf::from),
            results: var("QUORATE_E2E_RESULTS").map(PathBuf::from),
            bench: var("QUORATE_E2E_BENCH").map(PathBuf::from),
        })
    }

    /// The host directory for `Local` backup buckets: under the hostPath volume directory when
    /// there is one (the node is this machine), else a fixed path on the node.
    pub fn bucket_host_dir(&self) -> PathBuf {
        match &self.hostpath_dir {
            Some(dir) => dir.join("buckets"),
            None => PathBuf::from("/tmp/quorate-e2e-buckets"),
        }
    }

    /// True when the node's filesystem is this machine's, so the harness can look at volumes
    /// and buckets directly (the node kit).
    pub fn node_is_local(&self) -> bool {
        self.hostpath_dir.is_some()
    }
}

fn default_kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("kubectl");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    let home = std::env::var_os("QUORATE_K8S_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/quorate/k8s")
        });
    home.join("bin/kubectl")
}
