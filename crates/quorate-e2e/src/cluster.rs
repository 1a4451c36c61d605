//! The cluster under test: a kube client for waiting on state, and `kubectl` for what a user
//! types.

use std::process::Stdio;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::AsyncWriteExt;

use crate::env::E2eEnv;

/// The cluster and how to reach it.
#[derive(Clone)]
pub struct Cluster {
    /// Admin client from the kubeconfig.
    pub client: Client,
    /// Where it came from.
    pub env: E2eEnv,
}

/// What a `kubectl` run printed.
#[derive(Debug)]
pub struct KubectlOutput {
    /// The command line, for messages.
    pub command: String,
    /// Exit success.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl KubectlOutput {
    /// Standard output; panics with both streams when kubectl failed.
    pub fn ok(self) -> String {
        assert!(
            self.success,
            "`{}` failed:\n{}{}",
            self.command, self.stdout, self.stderr
        );
        self.stdout
    }
}

impl Cluster {
    /// Connects with the environment's kubeconfig.
    pub async fn connect(env: &E2eEnv) -> Cluster {
        // kube's rustls needs a process-wide crypto provider when more than one is compiled in.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let kubeconfig = Kubeconfig::read_from(&env.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", env.kubeconfig.display()));
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", env.kubeconfig.display()));
        let client = Client::try_from(config).expect("a Kubernetes client");
        Cluster {
            client,
            env: env.clone(),
        }
    }

    /// Runs `kubectl <args>` against the cluster.
    pub async fn kubectl(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl_with_stdin(args, None).await
    }

    /// Runs `kubectl <args>` with `stdin` as its input (`apply -f -`).
    pub async fn kubectl_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> KubectlOutput {
        let command = format!("kubectl {}", args.join(" "));
        let mut child = tokio::process::Command::new(&self.env.kubectl)
            .arg("--kubeconfig")
            .arg(&self.env.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.env.kubectl.display()));
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin is piped");
            pipe.write_all(input.as_bytes())
                .await
                .expect("writing kubectl's stdin");
        }
        let out = child.wait_with_output().await.expect("waiting for kubectl");
        KubectlOutput {
            command,
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `kubectl apply -f -` of `yaml`; panics when refused.
    pub async fn apply(&self, yaml: &str) -> String {
        self.kubectl_with_stdin(&["apply", "-f", "-"], Some(yaml))
            .await
            .ok()
    }
}
