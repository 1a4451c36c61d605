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

/// Command-line options of `quorate operator` (druid's names where druid has the option).
#[derive(Clone, Debug, Args)]
pub struct OperatorArgs {
    /// Apply spec changes without waiting for the reconcile annotation.
    #[arg(long)]
    pub enable_etcd_spec_auto_reconcile: bool,
    /// Etcd objects reconciled at the same time.
    #[arg(long, default_value_t = 3)]
    pub etcd_workers: u16,
    /// How often a cluster's status is refreshed, in seconds.
    #[arg(long, default_value_t = 15)]
    pub etcd_status_sync_period_seconds: u64,
    /// Only watch this namespace (default: all).
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// A host directory `Local` backup buckets may live under (the store Secret's `hostPath`);
    /// repeatable. `/etc/gardener/local-backupbuckets` (druid's default) is always allowed;
    /// any other directory is refused unless listed.
    #[arg(long = "allowed-local-backup-host-path")]
    pub allowed_host_paths: Vec<String>,
    /// Render ServiceAccounts with `automountServiceAccountToken: false`.
    #[arg(long)]
    pub disable_etcd_serviceaccount_automount: bool,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub http_address: SocketAddr,
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
    /// Elect a leader among replicas (off: this replica always runs the controller).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader lease.
    #[arg(long, default_value = "quorate-operator")]
    pub leader_election_id: String,
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
    /// The image vector override is bad.
    #[error(transparent)]
    Images(#[from] ImageVectorError),
    /// The controller could not start.
    #[error(transparent)]
    Start(#[from] StartError),
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
    let client = Client::try_default().await.map_err(RunError::Config)?;
    let settings = OperatorSettings {
        auto_reconcile: args.enable_etcd_spec_auto_reconcile,
        images: Images::from_env()?,
        disable_service_account_automount: args.disable_etcd_serviceaccount_automount,
        status_sync_period: Duration::from_secs(args.etcd_status_sync_period_seconds.max(1)),
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
    };
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
    match http.await {
        Ok(Err(source)) => Err(RunError::Http {
            addr: http_addr,
            source,
        }),
        _ => result,
    }
}

/// Completes when `shutdown` turns true.
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
    let lease = args.leader_election_id.clone();
    let election_error = |e: kube_lease_manager::LeaseManagerError| RunError::LeaderElection {
        lease: lease.clone(),
        message: e.to_string(),
    };
    let manager = LeaseManagerBuilder::new(client.clone(), &lease)
        .with_namespace(&args.namespace)
        .with_identity(&args.identity)
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
