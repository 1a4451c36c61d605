//! The agent's use of the backup bucket: the store of its cluster configuration, the start
//! decision's view of the bucket, and restoring its member after a total loss. The store
//! work itself (opening, the owner claim, the restore) is `quorate_backup::store_restore`;
//! this module maps the agent's [`ClusterConfig`] onto it.

use quorate_backup::restore::progress::{ProgressSink, RestoreProgress};
use quorate_backup::restore::{EtcdTools, MemberIdentity, RestoreTarget};
use quorate_backup::store::{SnapStore, StoreError, StoreOptions};
use quorate_backup::store_restore::{
    self, StoreRestoreError, StoreRestoreOptions, restore_from_store,
};
use quorate_core::backup_chain::ChainRecord;
use quorate_core::cluster_config::{BackupConfig, ClusterConfig};
use quorate_core::membership::recovery::RecoveryRecord;
use quorate_core::membership::start::Backups;
use std::path::Path;

/// The store of a cluster's backups, accepting clear objects only within the migration
/// window the configuration names, if any.
pub fn open_store(backup: &BackupConfig) -> Result<SnapStore, StoreRestoreError> {
    let options = StoreOptions {
        local_root: backup.local_root.clone().into(),
        secret_dir: backup.secret_dir.clone().map(Into::into),
        encryption_keys: backup.encryption_key_dir.clone().map(Into::into),
    };
    let store = store_restore::open_store(&backup.spec, &options)?;
    // Clear objects of a bucket's migration window to encryption (`quorate.io/accept-plaintext-before`).
    Ok(match backup.accept_plaintext_before {
        Some(before) => store.accept_plaintext_before(before),
        None => store,
    })
}

/// How long a member waits for the bucket's listing before it starts.
const STORE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Refuses a prefix another cluster claimed or that holds unclaimed snapshots, unless adopting
/// was asked for; claims an empty unclaimed one for this cluster.
pub async fn check_owner(
    store: &SnapStore,
    backup: &BackupConfig,
) -> Result<(), StoreRestoreError> {
    store_restore::check_owner(store, &backup.cluster_uid, backup.adopt_foreign_backups).await
}

/// The bucket's chain record, if it has a readable one.
pub async fn chain_record(store: &SnapStore) -> Result<Option<ChainRecord>, StoreError> {
    let text = store.marker("chain").await?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// Records `record` as the bucket's chain.
pub async fn put_chain_record(store: &SnapStore, record: &ChainRecord) -> Result<(), StoreError> {
    let text = serde_json::to_string(record).expect("a chain record serializes");
    store.put_marker("chain", &text).await
}

/// The cluster whose history the bucket's chain holds, if the bucket records it.
pub async fn chain_cluster(cluster: &ClusterConfig) -> Option<u64> {
    let store = open_store(cluster.backup.as_ref()?).ok()?;
    chain_record(&store).await.ok()?.map(|r| r.cluster_id)
}

/// Beside a data directory restored from the bucket: which chain it was restored from, so the
/// restored cluster (a new cluster ID) continues that chain once etcd runs.
fn restored_marker(data_dir: &Path) -> std::path::PathBuf {
    data_dir.with_file_name("quorate-restored-from.json")
}

/// After a restore from the bucket, once etcd runs as cluster `cluster_id`: the chain the data
/// came from continues with this cluster (the restored data is that history up to the bucket's
/// newest revision). Done once; the marker goes when the chain records the new cluster.
pub async fn continue_chain_after_restore(
    cluster: &ClusterConfig,
    data_dir: &Path,
    cluster_id: u64,
) {
    let path = restored_marker(data_dir);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let Ok(from) = serde_json::from_str::<ChainRecord>(&text) else {
        let _ = std::fs::remove_file(&path);
        return;
    };
    let Some(Ok(store)) = cluster.backup.as_ref().map(open_store) else {
        return;
    };
    match chain_record(&store).await {
        Ok(current)
            if current
                .as_ref()
                .is_none_or(|c| c.cluster_id == from.cluster_id) =>
        {
            let record = ChainRecord {
                cluster_id,
                since_revision: from.since_revision,
            };
            if put_chain_record(&store, &record).await.is_ok() {
                tracing::info!(cluster = %format!("{cluster_id:x}"), from = %format!("{:x}", from.cluster_id), "the restored cluster continues the bucket's chain");
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(_) => {
            tracing::warn!(
                "the bucket's chain changed since this member restored from it; not continuing it"
            );
            let _ = std::fs::remove_file(&path);
        }
        Err(e) => tracing::debug!(error = %e, "reading the chain record failed; retrying later"),
    }
}

/// What the bucket holds, for the start decision.
pub async fn backups_in_store(cluster: &ClusterConfig) -> Backups {
    let Some(backup) = &cluster.backup else {
        return Backups::NotConfigured;
    };
    let owner = match open_store(backup) {
        Ok(store) => match store.owner().await {
            Ok(owner) => owner,
            Err(e) => return Backups::Unreadable(e.to_string()),
        },
        Err(e) => return Backups::Unreadable(e.to_string()),
    };
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
    let store = open_store(backup).map(|s| s.describe()).unwrap_or_default();
    match (listed, owner) {
        (Ok(all), _) if all.is_empty() => Backups::Empty,
        (Ok(_), Some(owner)) if owner != backup.cluster_uid && !backup.adopt_foreign_backups => {
            Backups::Unreadable(format!(
                "{store} holds the backups of another cluster ({owner}; this one is {}); annotate \
                 the Etcd with {}=\"true\" to restore from it",
                backup.cluster_uid,
                quorate_api::annotations::ADOPT_BACKUPS
            ))
        }
        (Ok(all), None) if !backup.adopt_foreign_backups => Backups::Unreadable(format!(
            "{store} holds {} snapshot(s) but no owner marker; annotate the Etcd with {}=\"true\" \
             to restore from it",
            all.len(),
            quorate_api::annotations::ADOPT_BACKUPS
        )),
        (Ok(all), _) => Backups::Available {
            newest_revision: all.iter().map(|s| s.name.last_revision).max().unwrap_or(0),
        },
        (Err(e), _) => Backups::Unreadable(e),
    }
}

/// Why restoring this member from the bucket failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreMemberError {
    /// The cluster has no backups.
    #[error("backups are not configured")]
    NotConfigured,
    /// The member is not desired.
    #[error("{0} is not a desired member")]
    NotDesired(String),
    /// etcdctl is missing.
    #[error("etcdctl is needed to restore a snapshot; install etcd-client")]
    NoEtcdctl,
    /// The cluster's etcd version is not installed here.
    #[error(transparent)]
    MissingEtcd(quorate_etcd::binaries::MissingEtcd),
    /// Reading the bucket's markers failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Opening the store or the restore failed.
    #[error(transparent)]
    Restore(#[from] StoreRestoreError),
    /// The note of where the data came from could not be written.
    #[error("recording where the data was restored from: {0}")]
    Marker(std::io::Error),
}

/// Restores this agent's member from the bucket as a single-member cluster (after a total
/// loss); the other members join it as learners afterwards.
///
/// `superseded`: the recovery records that exist now; none of them can speak of the restored
/// data, which is kept with it (see `RecoveryRecord::dropped_by_any`).
/// The whole cluster comes from the bucket (etcd-backup-restore's `single_node` restoration); the
/// time it took is in `etcdbr_restoration_duration_seconds`.
pub async fn restore_member(
    cluster: &ClusterConfig,
    opts: &crate::options::AgentOptions,
    state: &crate::state::SharedState,
    superseded: Vec<RecoveryRecord>,
) -> Result<(), RestoreMemberError> {
    let started = std::time::Instant::now();
    let result = restore_from_bucket(cluster, opts, state, superseded).await;
    state
        .metrics()
        .restored(true, started.elapsed(), result.is_ok());
    result
}

async fn restore_from_bucket(
    cluster: &ClusterConfig,
    opts: &crate::options::AgentOptions,
    state: &crate::state::SharedState,
    superseded: Vec<RecoveryRecord>,
) -> Result<(), RestoreMemberError> {
    let backup = cluster
        .backup
        .as_ref()
        .ok_or(RestoreMemberError::NotConfigured)?;
    let store = open_store(backup)?;
    let me = cluster
        .member(&opts.member)
        .ok_or_else(|| RestoreMemberError::NotDesired(opts.member.clone()))?;
    let member = MemberIdentity {
        name: me.name.clone(),
        peer_urls: vec![me.peer_url.clone()],
        initial_cluster: format!("{}={}", me.name, me.peer_url),
        cluster_token: cluster.cluster_token.clone(),
    };
    // The cluster's own version replays the snapshot, with the tools installed beside it.
    let etcd = opts
        .etcd_binaries
        .etcd(cluster.etcd_version)
        .map_err(RestoreMemberError::MissingEtcd)?;
    let etcdctl = etcd
        .parent()
        .map(|d| d.join("etcdctl"))
        .filter(|p| p.is_file())
        .or_else(|| quorate_etcd::binaries::find_on_path("etcdctl"))
        .ok_or(RestoreMemberError::NoEtcdctl)?;
    let tools = EtcdTools::new(&etcd, etcdctl);
    tracing::warn!(member = %me.name, store = %store.describe(), "no member has data: restoring from the bucket");
    let chain = chain_record(&store).await?;
    let report = restore_from_store(
        &store,
        RestoreTarget::Latest,
        member,
        &opts.data_dir,
        tools,
        StoreRestoreOptions {
            progress: Some(progress_log(&me.name, state)),
            limits: quorate_backup::store_restore::SizeLimits::for_cluster(
                cluster.etcd.quota_backend_bytes,
                backup.spec.delta_snapshot_memory_limit_bytes(),
            ),
            ..StoreRestoreOptions::default()
        },
    )
    .await?;
    if let Some(chain) = chain {
        let from = ChainRecord {
            cluster_id: chain.cluster_id,
            since_revision: report.restored_revision,
        };
        std::fs::write(
            restored_marker(&opts.data_dir),
            serde_json::to_string(&from).expect("a chain record serializes"),
        )
        .map_err(RestoreMemberError::Marker)?;
    }
    crate::facts::store_superseded(&opts.data_dir, &superseded)
        .map_err(RestoreMemberError::Marker)?;
    state.update(|s| s.superseded_recoveries = superseded);
    tracing::info!(
        member = %me.name,
        revision = report.restored_revision,
        deltas = report.deltas_applied,
        events = report.events_applied,
        verification = %report.verification,
        "restored from the bucket"
    );
    Ok(())
}

/// Where an automatic restore stands: logged at most every 5 seconds (and at its end), and in
/// the metrics `quorate_restore_progress_ratio` and `quorate_restore_events_per_second`.
fn progress_log(member: &str, state: &crate::state::SharedState) -> ProgressSink {
    let (member, state) = (member.to_string(), state.clone());
    let last = std::sync::Mutex::new(None::<std::time::Instant>);
    ProgressSink::new(move |p: RestoreProgress| {
        state.metrics().restore_progress(&p);
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(5));
        if due || p.objects_done == p.objects_total {
            *last = Some(std::time::Instant::now());
            tracing::info!(
                member = %member,
                objects = format!("{}/{}", p.objects_done, p.objects_total),
                bytes = format!("{}/{}", p.bytes_done, p.bytes_total),
                percent = format!("{:.0}", p.fraction() * 100.0),
                events = p.events_done,
                events_per_second = format!("{:.0}", p.events_per_second()),
                eta_seconds = p.eta().map_or(0, |d| d.as_secs()),
                "restoring from the bucket"
            );
        }
    })
}
