//! The command line of `quorate agent` in a member pod. The StatefulSet renders it and the
//! agent's CLI parses it, so the flag names live here, in one place both sides import.
//!
//! ```text
//! quorate agent --kubernetes --namespace $(POD_NAMESPACE) --cluster <name>
//!               --member-from-pod $(POD_NAME) --data-dir /var/etcd/data/new.etcd
//! ```
//!
//! `$(VAR)` is expanded by the kubelet from the container's environment (the downward API).

use super::paths::DATA_DIR;

/// The container's command: the `quorate` binary of the member image.
pub const COMMAND: &str = "quorate";
/// The subcommand.
pub const SUBCOMMAND: &str = "agent";
/// Switch: coordination (leases, configuration) goes through the Kubernetes API.
pub const FLAG_KUBERNETES: &str = "--kubernetes";
/// Namespace of the `Etcd` (and of its leases and ConfigMap).
pub const FLAG_NAMESPACE: &str = "--namespace";
/// Name of the `Etcd`; the agent reads `<name>-config`.
pub const FLAG_CLUSTER: &str = "--cluster";
/// The pod this agent runs in; its member is found with
/// [`super::cluster_config::member_for_pod`].
pub const FLAG_MEMBER_FROM_POD: &str = "--member-from-pod";
/// etcd's data directory.
pub const FLAG_DATA_DIR: &str = "--data-dir";

/// Environment variable with the pod's name (downward API `metadata.name`).
pub const ENV_POD_NAME: &str = "POD_NAME";
/// Environment variable with the pod's namespace (downward API `metadata.namespace`).
pub const ENV_POD_NAMESPACE: &str = "POD_NAMESPACE";

/// The agent's arguments (after [`COMMAND`]) for the cluster `cluster`.
pub fn agent_args(cluster: &str) -> Vec<String> {
    [
        SUBCOMMAND,
        FLAG_KUBERNETES,
        FLAG_NAMESPACE,
        &format!("$({ENV_POD_NAMESPACE})"),
        FLAG_CLUSTER,
        cluster,
        FLAG_MEMBER_FROM_POD,
        &format!("$({ENV_POD_NAME})"),
        FLAG_DATA_DIR,
        DATA_DIR,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_name_the_cluster_and_take_the_pod_from_the_environment() {
        assert_eq!(
            agent_args("etcd-main").join(" "),
            "agent --kubernetes --namespace $(POD_NAMESPACE) --cluster etcd-main \
             --member-from-pod $(POD_NAME) --data-dir /var/etcd/data/new.etcd"
        );
    }
}
