//! The agent's use of the backup bucket: the store of its cluster configuration, the start
//! decision's view of the bucket, and restoring its member after a total loss. The store
//! work itself (opening, the owner claim, the restore) is `quorate_backup::store_restore`;
//! this module maps the agent's [`ClusterConfig`] onto it.

use quorate_backup::restore::{EtcdTools, MemberIdentity, RestoreTarget};
use quorate_backup::store::{SnapStore, StoreOptions};
use quorate_backup::store_restore::{self, StoreRestoreError, foreign_owner, restore_from_store};
use quorate_core::cluster_config::{BackupConfig, ClusterConfig};
use quorate_core::member_start::Backups;

/// The store of a cluster's backups.
pub fn open_store(backup: &BackupConfig) -> Result<SnapStore, StoreRestoreError> {
    let options = StoreOptions {
        local_root: backup.local_root.clone().into(),
        secret_dir: backup.secret_dir.clone().map(Into::into),
    };
    store_restore::open_store(&backup.spec, &options)
}

/// How long a member waits for the bucket's listing before it starts.
const STORE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Refuses a prefix another cluster claimed, unless adopting was asked for; claims an unclaimed
/// one for this cluster.
pub async fn check_owner(
    store: &SnapStore,
    backup: &BackupConfig,
) -> Result<(), StoreRestoreError> {
    store_restore::check_owner(store, &backup.cluster_uid, backup.adopt_foreign_backups).await
}

/// What the bucket holds, for the start decision.
pub async fn backups_in_store(cluster: &ClusterConfig) -> Backups {
    let Some(backup) = &cluster.backup else {
        return Backups::NotConfigured;
    };
    if let Ok(store) = open_store(backup)
        && let Ok(Some(owner)) = store.owner().await
        && owner != backup.cluster_uid
        && !backup.adopt_foreign_backups
    {
        return Backups::Unreadable(foreign_owner(&store, &owner, &backup.cluster_uid).to_string());
    }
    let listed = match open_store(backup) {
        Ok(store) => match tokio::time::timeout(STORE_CHECK_TIMEOUT, store.list()).await {
            Ok(listed) => listed.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "{} did not answer within {}s",
                store.describe(),
                STORE_CHECK_TIMEOUT.as_secs()
            )),
        },
        Err(e) => Err(e.to_string()),
    };
    match listed {
        Ok(all) if all.is_empty() => Backups::Empty,
        Ok(all) => Backups::Available {
            newest_revision: all.iter().map(|s| s.name.last_revision).max().unwrap_or(0),
        },
        Err(e) => Backups::Unreadable(e),
    }
}

/// Restores this agent's member from the bucket as a single-member cluster (after a total
/// loss); the other members join it as learners afterwards.
pub async fn restore_member(
    cluster: &ClusterConfig,
    opts: &crate::AgentOptions,
) -> Result<(), String> {
    let backup = cluster
        .backup
        .as_ref()
        .ok_or("backups are not configured")?;
    let store = open_store(backup).map_err(|e| e.to_string())?;
    let me = cluster.member(&opts.member).ok_or("not a desired member")?;
    let member = MemberIdentity {
        name: me.name.clone(),
        peer_urls: vec![me.peer_url.clone()],
        initial_cluster: format!("{}={}", me.name, me.peer_url),
        cluster_token: cluster.cluster_token.clone(),
    };
    let etcdctl = quorate_etcd::binaries::find_on_path("etcdctl")
        .or_else(|| opts.etcd_binary.parent().map(|d| d.join("etcdctl")))
        .ok_or("etcdctl is needed to restore a snapshot; install etcd-client")?;
    let tools = EtcdTools::new(&opts.etcd_binary, etcdctl);
    tracing::warn!(member = %me.name, store = %store.describe(), "no member has data: restoring from the bucket");
    let report = restore_from_store(&store, RestoreTarget::Latest, member, &opts.data_dir, tools)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(
        member = %me.name,
        revision = report.restored_revision,
        deltas = report.deltas_applied,
        events = report.events_applied,
        "restored from the bucket"
    );
    Ok(())
}
