//! The operator as the tests run it against a real kube-apiserver: the controller in the test
//! process (stopped when dropped), and a server prepared the way an install prepares it (the
//! operator's namespace, ServiceAccount and ClusterRole applied with kubectl).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Client;
use quorate_operator::{Metrics, OperatorSettings, Scope, run_controller};
use quorate_testkit::KubeApiServer;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The operator's ServiceAccount user, as the API server names it.
pub const OPERATOR_USER: &str = "system:serviceaccount:quorate-system:quorate-operator";

/// A controller running in the test; dropping it stops it.
pub struct Operator {
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Operator {
    /// Runs the controller as `client` over `namespace` (every namespace with `None`) under
    /// the leader identity `identity`, with passes `period` apart when nothing happens.
    pub fn run(
        client: &Client,
        scope: Scope,
        auto_reconcile: bool,
        period: Duration,
        metrics: Metrics,
    ) -> Operator {
        let settings = OperatorSettings {
            auto_reconcile,
            status_sync_period: period,
            wait_period: period,
            ..OperatorSettings::default()
        };
        let (shutdown, stopped) = watch::channel(false);
        let client = client.clone();
        let task = tokio::spawn(async move {
            run_controller(client, settings, metrics, scope, stopped)
                .await
                .expect("the controller starts");
        });
        Operator { shutdown, task }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

/// A fresh API server (named after `test`) with the operator installed as
/// `deploy/manifests` installs it (namespace, ServiceAccount, ClusterRole and its binding),
/// then the manifests named in `more`: the server, an admin client and a client acting as the
/// operator's ServiceAccount. `None` when no kube-apiserver is available (the test skips).
pub async fn server_with_operator_rbac(
    test: &str,
    more: &[&str],
) -> Option<(KubeApiServer, Client, Client)> {
    let server = KubeApiServer::start_or_skip(test).await?;
    let admin = server.client().await.expect("admin client");
    let paths: Vec<PathBuf> = [
        "00-namespace.yaml",
        "02-serviceaccount.yaml",
        "03-clusterrole.yaml",
        "04-clusterrolebinding.yaml",
    ]
    .iter()
    .chain(more)
    .map(|name| manifest(name))
    .collect();
    kubectl_apply(&server, &paths);
    let operator = server
        .client_as(OPERATOR_USER, &[])
        .await
        .expect("impersonating client");
    Some((server, admin, operator))
}

/// A file of `deploy/manifests`.
pub fn manifest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join("deploy/manifests")
        .join(name)
}

/// `kubectl apply -f <each path>` as the admin; panics with kubectl's output on failure.
pub fn kubectl_apply(server: &KubeApiServer, paths: &[PathBuf]) -> String {
    let mut command = server.kubectl();
    command.arg("apply");
    for path in paths {
        command.arg("-f").arg(path);
    }
    let output = command.output().expect("run kubectl");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    );
    assert!(
        output.status.success(),
        "kubectl apply {paths:?} failed:\n{stdout}\n{stderr}"
    );
    stdout
}
