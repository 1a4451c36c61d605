//! Nodes as a cluster operator handles them: drain and uncordon with `kubectl` (what a cluster
//! upgrade does node by node), and, on the node kit, a node lost and brought back
//! (`scripts/k8s-node/node.sh`, named by `QUORATE_E2E_NODE_CONTROL`).

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};

use crate::cluster::{Cluster, KubectlOutput};
use crate::manifests::CLIENT_ROLE_LABEL;

/// The names of the cluster's nodes that take pods (not cordoned), sorted.
pub async fn schedulable_nodes(cluster: &Cluster) -> Vec<String> {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .expect("listing nodes")
        .into_iter()
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        })
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

/// The node pod `name` runs on (`spec.nodeName`), if it is scheduled.
pub async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|p| p.spec)
        .and_then(|s| s.node_name)
}

/// Whether the API server reports `node` Ready.
pub async fn node_ready(cluster: &Cluster, node: &str) -> bool {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let Ok(Some(n)) = nodes.get_opt(node).await else {
        return false;
    };
    n.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `kubectl drain <node>` as an operator runs it before a node's upgrade: evictions (which the
/// PodDisruptionBudgets may refuse; kubectl retries them until `timeout`), DaemonSets left, and
/// the scenario's client pods left in place (`--pod-selector`) so the client watching the drain
/// keeps running.
pub async fn drain(cluster: &Cluster, node: &str, timeout: Duration) -> KubectlOutput {
    let selector = format!("--pod-selector={CLIENT_ROLE_LABEL}!=client");
    let timeout = format!("--timeout={}s", timeout.as_secs());
    cluster
        .kubectl(&[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            &selector,
            &timeout,
        ])
        .await
}

/// `kubectl cordon <node>`: the node takes no new pods; those on it keep running. Panics when
/// refused.
pub async fn cordon(cluster: &Cluster, node: &str) {
    cluster.kubectl(&["cordon", node]).await.ok();
}

/// Uncordons its nodes when the scenario ends, passed or not, so a failed scenario does not
/// leave a node closed to the next ones.
pub struct UncordonOnDrop {
    cluster: Cluster,
    nodes: Vec<String>,
}

impl UncordonOnDrop {
    /// Uncordons `nodes` when dropped.
    pub fn new(cluster: &Cluster, nodes: Vec<String>) -> UncordonOnDrop {
        UncordonOnDrop {
            cluster: cluster.clone(),
            nodes,
        }
    }
}

impl Drop for UncordonOnDrop {
    fn drop(&mut self) {
        for node in &self.nodes {
            let _ = std::process::Command::new(&self.cluster.env.kubectl)
                .arg("--kubeconfig")
                .arg(&self.cluster.env.kubeconfig)
                .args(["uncordon", node])
                .output();
        }
    }
}

/// `kubectl uncordon <node>`; panics when refused.
pub async fn uncordon(cluster: &Cluster, node: &str) {
    cluster.kubectl(&["uncordon", node]).await.ok();
}

/// The node kit's node control (`QUORATE_E2E_NODE_CONTROL`, set by `scripts/e2e.sh` on the
/// current kit): a script that loses and returns a node. `None` elsewhere: a managed cluster's
/// nodes cannot be powered off from here.
pub fn node_control() -> Option<PathBuf> {
    std::env::var_os("QUORATE_E2E_NODE_CONTROL")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Runs `control lose|return <node>`; panics with its output when it fails.
pub async fn node_power(control: &PathBuf, action: &str, node: &str) {
    let out = tokio::process::Command::new(control)
        .args([action, node])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", control.display()));
    assert!(
        out.status.success(),
        "`{} {action} {node}` failed:\n{}{}",
        control.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
