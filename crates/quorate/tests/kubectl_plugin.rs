//! The `quorate` binary as kubectl's plugin: installed as `kubectl-quorate` on the PATH (here a
//! symbolic link), `kubectl quorate …` runs it against a real kube-apiserver with the
//! plugin's commands, and `quorate kube …` is the same command set. The commands themselves are
//! tested in `crates/quorate-kubectl/tests/kubernetes.rs`.

use kube::Api;
use kube::api::PostParams;
use quorate_api::Etcd;
use quorate_testkit::{KubeApiServer, install_etcd_crd, kubectl_binary};
use std::process::{Command, Output};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A directory holding `kubectl-quorate`, a link to this build's `quorate`.
fn plugin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_quorate"),
        dir.path().join("kubectl-quorate"),
    )
    .expect("link kubectl-quorate");
    dir
}

/// `PATH` with `dir` first.
fn path_with(dir: &std::path::Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).expect("PATH")
}

#[tokio::test]
async fn kubectl_runs_the_binary_installed_as_kubectl_quorate() {
    let Some(server) = KubeApiServer::shared_or_skip("kubectl_plugin").await else {
        return;
    };
    let client = server.client().await.expect("client");
    install_etcd_crd(&client).await;
    let namespace = server
        .create_namespace(&client, "kubectl-plugin")
        .await
        .expect("namespace");
    let mut etcd: Etcd =
        serde_saphyr::from_str(include_str!("../../../examples/etcd-cluster.yaml")).unwrap();
    etcd.metadata.namespace = Some(namespace.clone());
    Api::<Etcd>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &etcd)
        .await
        .expect("create the Etcd");
    let name = etcd.metadata.name.clone().unwrap();

    let plugins = plugin_dir();
    let kubeconfig = server.kubeconfig().display().to_string();
    let kubectl = kubectl_binary().expect("kubectl of the kit");
    let run = |args: &[&str]| -> Output {
        Command::new(&kubectl)
            .arg("quorate")
            .args(["--kubeconfig", &kubeconfig, "-n", &namespace])
            .args(args)
            .env("PATH", path_with(plugins.path()))
            .env_remove("KUBECONFIG")
            .output()
            .expect("run kubectl")
    };
    let listed = run(&["get", "etcd", "-o", "json"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let list: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("-o json parses");
    assert_eq!(list["items"][0]["metadata"]["name"], name.as_str());

    let suspended = run(&["suspend", &name]);
    assert!(suspended.status.success(), "{}", text(&suspended.stderr));
    assert_eq!(
        text(&suspended.stdout),
        format!("etcd.druid.gardener.cloud/{name} suspended\n")
    );

    // An error is kubectl-like: on stderr, exit status 1.
    let missing = run(&["members", "no-such-etcd"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        text(&missing.stderr).contains("Etcd no-such-etcd not found in namespace"),
        "{}",
        text(&missing.stderr)
    );

    // `quorate kube …` is the same command.
    let same = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["kube", "--kubeconfig", &kubeconfig, "-n", &namespace])
        .args(["get", "etcd", "-o", "name"])
        .env_remove("KUBECONFIG")
        .output()
        .expect("run quorate kube");
    assert!(same.status.success(), "{}", text(&same.stderr));
    assert_eq!(
        text(&same.stdout),
        format!("etcd.druid.gardener.cloud/{name}\n")
    );
}

#[test]
fn the_plugins_help_names_it_as_kubectl_runs_it() {
    let plugins = plugin_dir();
    let help = Command::new(plugins.path().join("kubectl-quorate"))
        .arg("--help")
        .output()
        .expect("run kubectl-quorate");
    assert!(help.status.success(), "{}", text(&help.stderr));
    let help = text(&help.stdout);
    assert!(help.contains("Usage: kubectl quorate"), "{help}");
    for command in [
        "get",
        "members",
        "defrag",
        "recover",
        "suspend",
        "resume",
        "reconcile",
        "protect",
        "backups",
        "restore",
        "wait",
    ] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing from\n{help}"
        );
    }
    assert!(help.contains("Kubernetes options:"), "{help}");
    for flag in [
        "--kubeconfig",
        "--context",
        "--namespace",
        "--all-namespaces",
        "--selector",
    ] {
        assert!(help.contains(flag), "{flag} missing from\n{help}");
    }
}
