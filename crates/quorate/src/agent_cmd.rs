//! `quorate agent`: the same member loop in both places it runs. Locally its coordination is
//! the cluster's state directory; in a member pod it is the Kubernetes API (leases, the
//! `<cluster>-config` ConfigMap), and the member is found from the pod's name because the pod
//! template is the same for every member.

use crate::cli::AgentArgs;
use crate::signals::shutdown_on_signals;
use quorate_agent::{AgentExit, AgentOptions};
use quorate_coord::{CoordError, Coordination, FileCoordination, KubeCoordination};
use quorate_core::cluster_config::{ClusterConfig, MemberEndpoints};
use quorate_core::components::cluster_config::member_for_pod;
use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::watch;

/// Where etcd's output goes in a pod unless `--etcd-log` says otherwise: the container log.
const POD_ETCD_LOG: &str = "/dev/stderr";

/// How often a pod's agent looks again for its configuration or its member in it.
const RESOLVE_INTERVAL: Duration = Duration::from_secs(2);

/// Runs the agent in the mode its arguments select.
pub async fn run(args: AgentArgs) -> Result<ExitCode, Box<dyn Error>> {
    abort_on_panic();
    let shutdown = shutdown_on_signals();
    if args.kubernetes && !quorate_agent::keeper::is_worker() {
        // The container's main process keeps the agent, so the agent's crash is not etcd's.
        let exe = std::env::current_exe()?.into_os_string();
        let argv = std::env::args_os().skip(1).collect();
        let code = quorate_agent::keeper::keep(exe, argv, shutdown).await;
        return Ok(ExitCode::from(code));
    }
    let etcd_binaries = quorate_etcd::binaries::EtcdBinaries::with_pinned(args.etcd_binary.clone());
    match (
        args.kubernetes,
        args.cluster_dir,
        args.member,
        args.namespace,
        args.cluster,
        args.member_from_pod,
    ) {
        (false, Some(cluster_dir), Some(member), ..) => {
            let member_dir = cluster_dir.join("members").join(&member);
            let files = Files {
                data_dir: args.data_dir.unwrap_or_else(|| member_dir.join("data")),
                etcd_log: args.etcd_log.unwrap_or_else(|| member_dir.join("etcd.log")),
                etcd_binaries: etcd_binaries.clone(),
            };
            run_local(cluster_dir, member, files, shutdown).await
        }
        (true, None, None, Some(namespace), Some(cluster), Some(pod)) => {
            let files = Files {
                data_dir: args.data_dir.ok_or("--kubernetes needs --data-dir")?,
                etcd_log: args.etcd_log.unwrap_or_else(|| PathBuf::from(POD_ETCD_LOG)),
                etcd_binaries: etcd_binaries.clone(),
            };
            let pod = Pod {
                namespace,
                cluster,
                name: pod,
            };
            run_in_pod(pod, files, shutdown).await
        }
        // clap's groups make every other combination a usage error before we get here.
        _ => Err(
            "quorate agent needs either --cluster-dir and --member, or --kubernetes \
                  --namespace --cluster --member-from-pod --data-dir"
                .into(),
        ),
    }
}

/// A panicking agent aborts instead of unwinding: unwinding would drop, and so stop, the etcd
/// it runs, while an abort leaves etcd serving for the restarted agent to adopt (a bug that
/// every member's agent hits at once must not stop the whole cluster).
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// The member's files.
struct Files {
    data_dir: PathBuf,
    etcd_log: PathBuf,
    etcd_binaries: quorate_etcd::binaries::EtcdBinaries,
}

impl Files {
    fn options(self, member: String) -> AgentOptions {
        AgentOptions {
            member,
            data_dir: self.data_dir,
            etcd_log: self.etcd_log,
            etcd_binaries: self.etcd_binaries,
            poll_interval: Duration::from_secs(1),
            retry_interval: Duration::from_millis(200),
        }
    }
}

async fn run_local(
    cluster_dir: PathBuf,
    member: String,
    files: Files,
    shutdown: watch::Receiver<bool>,
) -> Result<ExitCode, Box<dyn Error>> {
    let coord = FileCoordination::new(&cluster_dir);
    let config = coord.cluster_config().await?;
    let endpoints = config.member(&member).ok_or_else(|| {
        format!(
            "member {member} is not in {}",
            coord.config_path().display()
        )
    })?;
    let listen = format!("127.0.0.1:{}", endpoints.agent_port).parse()?;
    serve(coord, files.options(member), listen, shutdown).await
}

/// Who the agent in a pod is.
struct Pod {
    namespace: String,
    cluster: String,
    name: String,
}

async fn run_in_pod(
    pod: Pod,
    files: Files,
    mut shutdown: watch::Receiver<bool>,
) -> Result<ExitCode, Box<dyn Error>> {
    let client = kube_client().await?;
    let coord = KubeCoordination::new(client, &pod.namespace, &pod.cluster);
    let Some((config, member)) = resolve_member(&coord, &pod.name, &mut shutdown).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    let host: IpAddr = config.listen_host.parse().map_err(|e| {
        format!(
            "listenHost {:?} of the cluster configuration is not an IP address: {e}",
            config.listen_host
        )
    })?;
    let listen = SocketAddr::new(host, member.agent_port);
    tracing::info!(pod = %pod.name, member = %member.name, %listen, "agent starting in Kubernetes mode");
    serve(coord, files.options(member.name), listen, shutdown).await
}

/// The client of the pod's ServiceAccount, or of `KUBECONFIG` when it is set (a test, or an
/// agent run by hand against a cluster).
async fn kube_client() -> Result<kube::Client, Box<dyn Error>> {
    let config = if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
        kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| format!("reading the kubeconfig named by KUBECONFIG: {e}"))?
    } else {
        kube::Config::incluster().map_err(|e| {
            format!(
                "no in-cluster Kubernetes configuration ({e}); run the agent in a pod whose \
                 ServiceAccount token is mounted (automountServiceAccountToken), or set KUBECONFIG"
            )
        })?
    };
    Ok(kube::Client::try_from(config)
        .map_err(|e| format!("building the Kubernetes client: {e}"))?)
}

/// The pod's member, once the configuration exists and names it. `None` when asked to stop
/// while waiting.
async fn resolve_member(
    coord: &KubeCoordination,
    pod: &str,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<(ClusterConfig, MemberEndpoints)>, CoordError> {
    let mut last_reason = String::new();
    loop {
        let reason = match coord.cluster_config().await {
            Ok(config) => match member_of_pod(&config, pod) {
                Some(member) => {
                    let member = member.clone();
                    return Ok(Some((config, member)));
                }
                None => format!(
                    "pod {pod} is not a member of the cluster configuration yet (members: {})",
                    config
                        .members
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            Err(e @ CoordError::NoConfig { .. }) => e.to_string(),
            Err(CoordError::Api(failure)) if failure.is_transient() => failure.to_string(),
            Err(e) => return Err(e),
        };
        if reason != last_reason {
            tracing::info!(%reason, "waiting");
            last_reason = reason;
        }
        if *shutdown.borrow() {
            return Ok(None);
        }
        let _ = tokio::time::timeout(RESOLVE_INTERVAL, shutdown.changed()).await;
    }
}

/// The member a pod runs: the one whose peer URL names the pod (see [`member_for_pod`]), else
/// the one named like the pod, for configurations whose URLs are addresses rather than the
/// pods' DNS names.
fn member_of_pod<'a>(config: &'a ClusterConfig, pod: &str) -> Option<&'a MemberEndpoints> {
    member_for_pod(config, pod).or_else(|| config.members.iter().find(|m| m.name == pod))
}

async fn serve<C: Coordination + Clone>(
    coord: C,
    opts: AgentOptions,
    listen: SocketAddr,
    shutdown: watch::Receiver<bool>,
) -> Result<ExitCode, Box<dyn Error>> {
    let exit: AgentExit = quorate_agent::serve(coord, opts, listen, shutdown).await?;
    Ok(ExitCode::from(exit.code()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;
    use quorate_core::components::agent_args::agent_args;

    fn parse(args: &[&str]) -> Result<AgentArgs, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("quorate").chain(args.iter().copied()))?;
        match cli.command {
            Command::Agent(a) => Ok(a),
            other => panic!("not the agent: {other:?}"),
        }
    }

    #[test]
    fn the_statefulsets_arguments_parse() {
        let rendered: Vec<String> = agent_args("etcd-main")
            .into_iter()
            .map(|a| {
                a.replace("$(POD_NAMESPACE)", "shoot")
                    .replace("$(POD_NAME)", "etcd-main-1")
            })
            .collect();
        let args = parse(&rendered.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert!(args.kubernetes);
        assert_eq!(args.namespace.as_deref(), Some("shoot"));
        assert_eq!(args.cluster.as_deref(), Some("etcd-main"));
        assert_eq!(args.member_from_pod.as_deref(), Some("etcd-main-1"));
        assert_eq!(
            args.data_dir.as_deref(),
            Some(std::path::Path::new("/var/etcd/data/new.etcd"))
        );
        assert!(args.cluster_dir.is_none() && args.member.is_none());
    }

    #[test]
    fn local_mode_still_parses() {
        let args = parse(&["agent", "--cluster-dir", "/tmp/c", "--member", "m-0"]).unwrap();
        assert!(!args.kubernetes);
        assert_eq!(args.member.as_deref(), Some("m-0"));
    }

    #[test]
    fn modes_do_not_mix_and_each_is_complete() {
        let pod = [
            "--kubernetes",
            "--namespace",
            "ns",
            "--cluster",
            "c",
            "--member-from-pod",
            "c-0",
            "--data-dir",
            "/d",
        ];
        let mixed: Vec<&str> = ["agent", "--cluster-dir", "/tmp/c"]
            .into_iter()
            .chain(pod)
            .collect();
        assert!(parse(&mixed).is_err());
        assert!(parse(&["agent", "--member", "m-0", "--namespace", "ns"]).is_err());
        assert!(parse(&["agent", "--kubernetes", "--namespace", "ns"]).is_err());
        assert!(parse(&["agent", "--cluster-dir", "/tmp/c"]).is_err());
        assert!(parse(&["agent"]).is_err());
        assert!(parse(&["agent", "--namespace", "ns", "--cluster", "c"]).is_err());
    }

    fn config(peer_host: &str) -> ClusterConfig {
        let etcd: quorate_api::Etcd = serde_json::from_value(serde_json::json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "shoot", "uid": "0a1b2c3d"},
            "spec": {"replicas": 2, "labels": {}, "etcd": {}, "backup": {}},
        }))
        .unwrap();
        let ctx = quorate_core::components::ComponentContext::new("quorate:test", "alpine:test");
        let mut config =
            quorate_core::components::cluster_config::render_for_kubernetes(&etcd, &ctx).unwrap();
        if !peer_host.is_empty() {
            for m in &mut config.members {
                m.peer_url = format!("http://{peer_host}:{}", m.peer_port);
            }
        }
        config
    }

    #[test]
    fn the_pod_finds_its_member_by_dns_name_or_by_name() {
        let by_dns = config("");
        assert_eq!(
            member_of_pod(&by_dns, "etcd-main-1").map(|m| m.name.as_str()),
            Some("etcd-main-1")
        );
        let by_ip = config("127.0.0.1");
        assert_eq!(
            member_of_pod(&by_ip, "etcd-main-0").map(|m| m.name.as_str()),
            Some("etcd-main-0")
        );
        assert!(member_of_pod(&by_ip, "etcd-main-2").is_none());
    }
}
