//! `quorate operator`: the process. It serves the webhooks and the metrics/health endpoints on
//! every replica, and runs the controller on the one replica that holds the leader lease.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube_lease_manager::LeaseManagerBuilder;
use quorate_core::shard::Shard;
use tokio::sync::watch;

use crate::context::OperatorSettings;
use crate::controller::{self, Scope, StartError};
use crate::http::{self, Probes};
use crate::images::{ImageVectorError, Images};
use crate::metrics::Metrics;
use crate::webhook::{
    self, DEFAULT_CERT_DIR, WebhookConfig, generate_webhook_certs, service_account_username,
    service_dns_names,
};

/// Command-line options of `quorate operator`: druid's and controller-runtime's names
/// (`--metrics-bind-address`, `--health-probe-bind-address`, `--leader-elect`,
/// `--etcd-status-sync-period`, `--kubeconfig`), quorate's earlier names kept as aliases.
#[derive(Clone, Debug, Args)]
pub struct OperatorArgs {
    /// Apply spec changes without waiting for the reconcile annotation.
    #[arg(long)]
    pub enable_etcd_spec_auto_reconcile: bool,
    /// Etcd objects reconciled at the same time.
    #[arg(long, default_value_t = 3)]
    pub etcd_workers: u16,
    /// How often a cluster's status is refreshed: a duration as druid takes it (`15s`, `1m`,
    /// `1m30s`) or seconds (`--etcd-status-sync-period-seconds=15`, the earlier name).
    #[arg(
        long = "etcd-status-sync-period",
        visible_alias = "etcd-status-sync-period-seconds",
        default_value = "15s",
        value_parser = parse_period
    )]
    pub etcd_status_sync_period: Duration,
    /// Only watch this namespace (default: all).
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// A host directory `Local` backup buckets may live under (the store Secret's `hostPath`);
    /// repeatable. `/etc/gardener/local-backupbuckets` (druid's default) is always allowed;
    /// any other directory is refused unless listed.
    #[arg(long = "allowed-local-backup-host-path")]
    pub allowed_host_paths: Vec<String>,
    /// Apply the CRDs that fit the API server at start (the `Etcd` CRD with druid's CEL rules
    /// from Kubernetes 1.29, without before) and wait until they are Established.
    #[arg(long)]
    pub install_crds: bool,
    /// Render ServiceAccounts with `automountServiceAccountToken: false`.
    #[arg(long)]
    pub disable_etcd_serviceaccount_automount: bool,
    /// Address of `/metrics` (and of `/healthz` and `/readyz` unless
    /// `--health-probe-bind-address` names another); `--http-address` is the earlier name.
    #[arg(
        long = "metrics-bind-address",
        visible_alias = "http-address",
        default_value = "0.0.0.0:8080"
    )]
    pub http_address: SocketAddr,
    /// A second address serving `/healthz` and `/readyz` (and `/metrics`), for probes kept
    /// apart from the metrics port as controller-runtime operators do; default: the metrics
    /// address alone.
    #[arg(long = "health-probe-bind-address")]
    pub health_probe_address: Option<SocketAddr>,
    /// The kubeconfig file to use (default: in-cluster, else `KUBECONFIG`, else
    /// `~/.kube/config`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Address of the validating webhooks (HTTPS).
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub webhook_address: SocketAddr,
    /// Directory holding the webhook serving certificate (`tls.crt`, `tls.key`).
    #[arg(long, default_value = DEFAULT_CERT_DIR)]
    pub webhook_cert_dir: PathBuf,
    /// Do not serve the webhooks.
    #[arg(long)]
    pub disable_webhooks: bool,
    /// When the certificate directory is empty, generate a self-signed certificate for this
    /// Service (in the operator's namespace) and put its CA into the
    /// ValidatingWebhookConfiguration named by `--webhook-configuration`.
    #[arg(long)]
    pub webhook_self_signed_service: Option<String>,
    /// The ValidatingWebhookConfiguration whose `caBundle`s a self-signed certificate goes into.
    #[arg(long, default_value = "quorate-operator")]
    pub webhook_configuration: String,
    /// Further users allowed to change protected components (druid's exempt accounts).
    #[arg(long = "component-protection-exempt-user")]
    pub exempt_users: Vec<String>,
    /// Namespace the operator runs in (its leader lease and identity).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// The operator's ServiceAccount, never refused by component protection.
    #[arg(
        long,
        env = "OPERATOR_SERVICE_ACCOUNT",
        default_value = "quorate-operator"
    )]
    pub service_account: String,
    /// Elect a leader among replicas (`--leader-elect=false`: this replica always runs the
    /// controller); `--leader-election` is the earlier name.
    #[arg(
        long = "leader-elect",
        visible_alias = "leader-election",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_election: bool,
    /// Name of the leader lease (sharded: `<id>-shard-<I>-of-<M>`, one lease per share).
    #[arg(long, default_value = "quorate-operator")]
    pub leader_election_id: String,
    /// This replica set's share of the `Etcd`s, `INDEX/COUNT` (e.g. `0/2` and `1/2` for two):
    /// it reconciles, caches and serves tasks of only the `Etcd`s whose `namespace/name` hash
    /// to INDEX, under a leader lease of its own; `0/1` (the default) is all of them.
    #[arg(long, env = "QUORATE_OPERATOR_SHARD", default_value = "0/1", value_parser = Shard::parse)]
    pub shard: Shard,
    /// This replica's identity (the pod name).
    #[arg(long, env = "POD_NAME", default_value = "quorate-operator")]
    pub identity: String,
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No Kubernetes client configuration.
    #[error("no Kubernetes configuration (in-cluster or KUBECONFIG): {0}")]
    Config(#[source] kube::Error),
    /// The kubeconfig named by `--kubeconfig`/`--context` cannot be used.
    #[error("kubeconfig {path} (context {context}): {source}; check --kubeconfig and --context")]
    Kubeconfig {
        /// The file, or "the default kubeconfig".
        path: String,
        /// The context asked for, or "current".
        context: String,
        /// Why.
        source: kube::config::KubeconfigError,
    },
    /// The image vector override is bad.
    #[error(transparent)]
    Images(#[from] ImageVectorError),
    /// The controller could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// `--install-crds` could not install them.
    #[error(transparent)]
    Crds(#[from] crate::crd_install::CrdInstallError),
    /// The webhooks could not be served.
    #[error(transparent)]
    Webhooks(#[from] webhook::WebhookError),
    /// The webhook certificate could not be made or published.
    #[error("webhook certificate: {0}")]
    Certificate(String),
    /// The metrics/health endpoint could not be served.
    #[error("serving {addr}: {source}")]
    Http {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// Leader election failed.
    #[error("leader election on lease {lease}: {message}")]
    LeaderElection {
        /// The lease.
        lease: String,
        /// What failed.
        message: String,
    },
    /// Another replica took over; exiting lets this one restart as a standby.
    #[error("lost the leader lease {0}; exiting so a fresh process stands by")]
    LostLeadership(String),
}

/// Runs the operator until `shutdown` turns true.
pub async fn run_operator(
    args: OperatorArgs,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let client = kube_client(&args).await?;
    if args.install_crds {
        let version = crate::crd_install::install_crds(&client).await?;
        tracing::info!(kubernetes = %version, "CRDs applied for this server");
    }
    let settings = OperatorSettings {
        auto_reconcile: args.enable_etcd_spec_auto_reconcile,
        images: Images::from_env()?,
        disable_service_account_automount: args.disable_etcd_serviceaccount_automount,
        status_sync_period: args.etcd_status_sync_period.max(Duration::from_secs(1)),
        workers: args.etcd_workers,
        allowed_host_paths: args.allowed_host_paths.clone(),
        ..OperatorSettings::default()
    };
    tracing::info!(member_image = %settings.images.member, auto_reconcile = settings.auto_reconcile, "starting");
    let metrics = Metrics::default();
    let ready = Arc::new(AtomicBool::new(false));
    let probes = Probes {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let http_addr = args.http_address;
    let stop = stopped(shutdown.clone());
    let probe_server = args
        .health_probe_address
        .filter(|a| *a != http_addr)
        .map(|addr| {
            let (probes, stop) = (probes.clone(), stopped(shutdown.clone()));
            (
                addr,
                tokio::spawn(async move { http::serve(addr, probes, stop).await }),
            )
        });
    let http = tokio::spawn(async move { http::serve(http_addr, probes, stop).await });
    let webhooks = if args.disable_webhooks {
        None
    } else {
        prepare_certificates(&args, &client).await?;
        let mut config = WebhookConfig::new(service_account_username(
            &args.namespace,
            &args.service_account,
        ));
        config.protection.exempt_users = args.exempt_users.clone();
        let (addr, dir, client, stop) = (
            args.webhook_address,
            args.webhook_cert_dir.clone(),
            client.clone(),
            stopped(shutdown.clone()),
        );
        Some(tokio::spawn(async move {
            webhook::serve_webhooks(addr, &dir, config, client, stop).await
        }))
    };
    let scope = Scope {
        namespace: args.watch_namespace.clone(),
        identity: args.identity.clone(),
        shard: args.shard,
    };
    if args.shard.is_sharded() {
        tracing::info!(shard = %args.shard, lease = %leader_lease_name(&args), "sharded: reconciling only this share of the Etcds");
    }
    let result = if args.leader_election {
        run_as_leader(&args, client, settings, metrics, scope, ready, shutdown).await
    } else {
        ready.store(true, Ordering::Release);
        controller::run(client, settings, metrics, scope, shutdown)
            .await
            .map_err(RunError::from)
    };
    if let Some(webhooks) = webhooks
        && let Ok(Err(e)) = webhooks.await
    {
        tracing::warn!("webhooks: {e}");
    }
    if let Some((addr, server)) = probe_server
        && let Ok(Err(source)) = server.await
    {
        return Err(RunError::Http { addr, source });
    }
    match http.await {
        Ok(Err(source)) => Err(RunError::Http {
            addr: http_addr,
            source,
        }),
        _ => result,
    }
}

/// Completes when `shutdown` turns true.
/// A duration as druid's flags take it (Go's `15s`, `1m30s`, `1h`), or bare seconds as
/// `--etcd-status-sync-period-seconds` took them.
pub fn parse_period(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    text.parse::<jiff::SignedDuration>()
        .ok()
        .and_then(|d| Duration::try_from(d).ok())
        .ok_or_else(|| format!("{text:?} is not a duration: write it as 15s, 1m or 1m30s"))
}

/// The Kubernetes client: from `--kubeconfig`/`--context` when given, else the default
/// (in-cluster, `KUBECONFIG`, `~/.kube/config`).
async fn kube_client(args: &OperatorArgs) -> Result<Client, RunError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    if args.kubeconfig.is_none() && args.context.is_none() {
        return Client::try_default().await.map_err(RunError::Config);
    }
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let failed = |source| RunError::Kubeconfig {
        path: args.kubeconfig.as_ref().map_or_else(
            || "the default kubeconfig".to_string(),
            |p| p.display().to_string(),
        ),
        context: args
            .context
            .clone()
            .unwrap_or_else(|| "current".to_string()),
        source,
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(failed)?;
            kube::Config::from_custom_kubeconfig(file, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .map_err(failed)?;
    Client::try_from(config).map_err(RunError::Config)
}

/// How long the leader lease lasts. A standby polls it only when it expires, also after the
/// leader released it on shutdown, so this bounds how long an operator upgrade leaves the
/// clusters unreconciled (kube-lease-manager's default, 30 s, left the kit's new operator idle
/// for 21 s); controller-runtime's (druid's) default is the same 15 s.
const LEADER_LEASE_SECONDS: u64 = 15;
/// The leader renews this long before its lease expires.
const LEADER_LEASE_GRACE_SECONDS: u64 = 5;

/// The leader lease of this replica's share: `--leader-election-id` unsharded, else one lease
/// per share, so each share elects its own leader and standbys of one share never take
/// another's.
pub fn leader_lease_name(args: &OperatorArgs) -> String {
    if args.shard.is_sharded() {
        format!(
            "{}-shard-{}-of-{}",
            args.leader_election_id,
            args.shard.index(),
            args.shard.count()
        )
    } else {
        args.leader_election_id.clone()
    }
}

async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

async fn run_as_leader(
    args: &OperatorArgs,
    client: Client,
    settings: OperatorSettings,
    metrics: Metrics,
    scope: Scope,
    ready: Arc<AtomicBool>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let lease = leader_lease_name(args);
    let election_error = |e: kube_lease_manager::LeaseManagerError| RunError::LeaderElection {
        lease: lease.clone(),
        message: e.to_string(),
    };
    let manager = LeaseManagerBuilder::new(client.clone(), &lease)
        .with_namespace(&args.namespace)
        .with_identity(&args.identity)
        .with_duration(LEADER_LEASE_SECONDS)
        .with_grace(LEADER_LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(election_error)?;
    let (mut leading, election) = manager.watch().await;
    // A standby replica is ready: it serves webhooks and metrics.
    ready.store(true, Ordering::Release);
    tokio::select! {
        _ = leading.wait_for(|l| *l) => {}
        _ = shutdown.wait_for(|s| *s) => {
            election.abort();
            return Ok(());
        }
    }
    tracing::info!(%lease, "leading; starting the controller");
    let (stop_tx, stop_rx) = watch::channel(false);
    let lost = {
        let mut leading = leading.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let lost = tokio::select! {
                _ = leading.wait_for(|l| !*l) => true,
                _ = shutdown.wait_for(|s| *s) => false,
            };
            let _ = stop_tx.send(true);
            lost
        })
    };
    controller::run(client, settings, metrics, scope, stop_rx).await?;
    let lost = lost.await.unwrap_or(false);
    drop(leading);
    let _ = election.await;
    if lost {
        return Err(RunError::LostLeadership(lease));
    }
    Ok(())
}

/// With `--webhook-self-signed-service` and no certificate in the directory: make one and put
/// its CA into the webhook configuration, so plain manifests need no certificate tooling.
async fn prepare_certificates(args: &OperatorArgs, client: &Client) -> Result<(), RunError> {
    let Some(service) = &args.webhook_self_signed_service else {
        return Ok(());
    };
    let dir = &args.webhook_cert_dir;
    let cert = dir.join(webhook::CERT_FILE);
    let ca_file = dir.join(webhook::CA_FILE);
    if !cert.exists() {
        let names = service_dns_names(service, &args.namespace);
        let certs = generate_webhook_certs(&names, jiff::Timestamp::now())
            .map_err(|e| RunError::Certificate(e.to_string()))?;
        certs
            .write_to(dir)
            .map_err(|e| RunError::Certificate(e.to_string()))?;
    }
    let ca = std::fs::read_to_string(&ca_file)
        .map_err(|e| RunError::Certificate(format!("reading {}: {e}", ca_file.display())))?;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let name = &args.webhook_configuration;
    let current = api.get(name).await.map_err(|e| {
        RunError::Certificate(format!(
            "reading ValidatingWebhookConfiguration {name}: {e}"
        ))
    })?;
    let bundle = k8s_openapi::ByteString(ca.into_bytes());
    let webhooks: Vec<_> = current
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|mut w| {
            w.client_config.ca_bundle = Some(bundle.clone());
            w
        })
        .collect();
    let patch = serde_json::json!({ "webhooks": webhooks });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| RunError::Certificate(format!("setting the caBundle of {name}: {e}")))?;
    tracing::info!(configuration = %name, "published the webhook CA");
    Ok(())
}

#[cfg(test)]
mod flag_tests {
    use super::*;
    use clap::{Command, FromArgMatches};

    fn parse(args: &[&str]) -> OperatorArgs {
        let command = OperatorArgs::augment_args(Command::new("operator").no_binary_name(true));
        let matches = command
            .try_get_matches_from(args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        OperatorArgs::from_arg_matches(&matches).expect("operator arguments")
    }

    /// What a parse decides, comparable.
    fn key(a: &OperatorArgs) -> (SocketAddr, Option<SocketAddr>, bool, Duration) {
        (
            a.http_address,
            a.health_probe_address,
            a.leader_election,
            a.etcd_status_sync_period,
        )
    }

    #[test]
    fn controller_runtimes_and_druids_names_parse_as_the_earlier_ones() {
        let new = parse(&[
            "--metrics-bind-address=127.0.0.1:9090",
            "--leader-elect=false",
            "--etcd-status-sync-period=30s",
        ]);
        let old = parse(&[
            "--http-address=127.0.0.1:9090",
            "--leader-election=false",
            "--etcd-status-sync-period-seconds=30",
        ]);
        assert_eq!(key(&new), key(&old));
        assert_eq!(
            key(&new),
            (
                "127.0.0.1:9090".parse().unwrap(),
                None,
                false,
                Duration::from_secs(30)
            )
        );
        // As controller-runtime's bool flag: alone it means true.
        assert!(parse(&["--leader-elect"]).leader_election);
        assert!(parse(&[]).leader_election);
        assert_eq!(parse(&[]).etcd_status_sync_period, Duration::from_secs(15));
        let probes = parse(&[
            "--health-probe-bind-address=0.0.0.0:8081",
            "--kubeconfig=/tmp/kc",
            "--context=kind-a",
        ]);
        assert_eq!(
            probes.health_probe_address,
            Some("0.0.0.0:8081".parse().unwrap())
        );
        assert_eq!(probes.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        assert_eq!(probes.context.as_deref(), Some("kind-a"));
    }

    #[test]
    fn periods_read_as_go_durations_or_seconds() {
        for (text, secs) in [
            ("15s", 15),
            ("2m", 120),
            ("1m30s", 90),
            ("1h", 3600),
            ("45", 45),
        ] {
            assert_eq!(parse_period(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        let err = parse_period("soon").unwrap_err();
        assert!(err.contains("15s"), "{err}");
        assert!(parse_period("-5s").is_err());
    }
}
