//! This member's part in an etcd version change: it reads the cluster version its etcd
//! reports (for its lease: the evidence a chained change waits for), and while it leads it
//! asks etcd's downgrade API for what core `upgrade::downgrade_action` says (enable a
//! downgrade to the configured version, or cancel one the request no longer wants).

use std::time::Duration;

use quorate_api::EtcdVersion;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::upgrade::{
    DowngradeAction, DowngradeEvidence, cluster_version_from_metrics, downgrade_action,
};
use quorate_etcd::{DowngradeCall, MemberClient, MemberStatus};

use crate::state::SharedState;

/// How long reading etcd's metrics may take: it answers from memory.
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);

/// The cluster version this member's etcd reports on its plain-HTTP metrics listener (every
/// member has one, `--listen-metrics-urls`); `None` when it cannot be read.
pub async fn cluster_version(cluster: &ClusterConfig, me: &str) -> Option<EtcdVersion> {
    let port = cluster.member(me)?.metrics_port?;
    let host = match cluster.listen_host.as_str() {
        "0.0.0.0" | "::" | "" => "127.0.0.1",
        host => host,
    };
    let url = format!("http://{host}:{port}/metrics");
    let text = metrics_client()?
        .get(&url)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    cluster_version_from_metrics(&text)
}

/// The one HTTP client of these reads, made on first use: a client per read would set up a
/// connection pool (and a TLS configuration) every poll interval; this one keeps its
/// connection to etcd's metrics listener. `None` when it cannot be built (no TLS backend),
/// which reads as "cannot be read", as before.
fn metrics_client() -> Option<&'static reqwest::Client> {
    static CLIENT: std::sync::OnceLock<Option<reqwest::Client>> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .timeout(METRICS_TIMEOUT)
                .build()
                .ok()
        })
        .as_ref()
}

/// Whether this member should add raft entries so its etcd takes a snapshot (core
/// `etcd_version::wants_snapshot_entries`); `snapshot` is the published value (`none`
/// without one).
fn wants_snapshot(latest: &ClusterConfig, cluster: EtcdVersion, snapshot: &str) -> bool {
    quorate_core::etcd_version::wants_snapshot_entries(
        latest.etcd_version,
        latest.etcd.snapshot_count,
        cluster,
        EtcdVersion::parse(snapshot).ok(),
    )
}

/// The cluster version recorded in this member's newest raft snapshot file (`none` without
/// one), read only while core `etcd_version::reads_snapshot_evidence` says the step this member
/// runs waits for it (the file can be 64 MiB); `None` otherwise and when it cannot be read, so
/// the lease carries no evidence then.
fn snapshot_evidence(
    latest: &ClusterConfig,
    me: &str,
    data_dir: &std::path::Path,
) -> Option<String> {
    if !quorate_core::etcd_version::reads_snapshot_evidence(
        latest.etcd_version,
        latest.etcd_version_target,
    ) {
        return None;
    }
    match quorate_etcd::snap_file::newest(data_dir) {
        Ok(Some(file)) => Some(file.cluster_version.unwrap_or_else(|| "none".into())),
        Ok(None) => Some("none".to_string()),
        Err(e) => {
            tracing::warn!(member = %me, error = %e, "reading etcd's newest raft snapshot failed");
            None
        }
    }
}

/// What this member's etcd says about a downgrade: its status and the cluster version.
pub fn evidence(status: &MemberStatus, cluster: Option<EtcdVersion>) -> DowngradeEvidence {
    DowngradeEvidence {
        cluster,
        enabled_target: status
            .downgrade_target
            .as_deref()
            .and_then(|v| EtcdVersion::parse(v).ok()),
        storage: EtcdVersion::parse(&status.storage_version).ok(),
    }
}

/// Records the cluster version for the lease and, while this member leads, makes the
/// downgrade call `latest` needs: validate then enable, or cancel. etcd's refusal is kept as
/// the member's message (status shows it), and the next check tries again.
pub async fn check(
    latest: &ClusterConfig,
    me: &str,
    data_dir: &std::path::Path,
    client: &MemberClient,
    status: &MemberStatus,
    state: &SharedState,
) {
    let cluster = cluster_version(latest, me).await;
    state.update(|s| s.cluster_version = cluster.map(|v| v.to_string()));
    let snapshot = snapshot_evidence(latest, me, data_dir);
    if let (Some(cluster), Some(snapshot)) = (cluster, &snapshot)
        && wants_snapshot(latest, cluster, snapshot)
    {
        // The 3.6 → 3.7 step waits for this member's snapshot: two entries bring it nearer.
        if let Err(e) = client.lease_grant_and_revoke().await {
            tracing::debug!(member = %me, error = %e, "adding raft entries for a snapshot failed");
        }
    }
    state.update(|s| s.snapshot_cluster_version = snapshot);
    if !status.is_leader() {
        return;
    }
    let Some(action) = downgrade_action(latest.etcd_version, evidence(status, cluster)) else {
        return;
    };
    let result = match action {
        DowngradeAction::Enable(version) => {
            let target = version.to_string();
            match client
                .downgrade(DowngradeCall::Validate(target.clone()))
                .await
            {
                Ok(_) => client.downgrade(DowngradeCall::Enable(target)).await,
                Err(e) => Err(e),
            }
        }
        DowngradeAction::Cancel => client.downgrade(DowngradeCall::Cancel).await,
    };
    match result {
        Ok(answer) => {
            tracing::info!(member = %me, ?action, cluster_version = %answer, "etcd downgrade call made");
        }
        Err(e) => {
            tracing::warn!(member = %me, ?action, error = %e, "etcd refused the downgrade call");
            state.update(|s| {
                s.message = format!(
                    "etcd refuses the downgrade call {action:?} for etcd {}: {e}",
                    latest.etcd_version
                );
            });
        }
    }
}
