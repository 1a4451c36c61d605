//! Restoring a member from the backup bucket: list the bucket, plan the restore (newest full
//! snapshot plus the deltas after it, up to a target), stream the objects down and hand them to
//! the restore in `quorate-backup`. Used by the agent after a total loss and by
//! `quorate restore`.

use futures::StreamExt;
use quorate_backup::restore::{
    DeltaContent, DeltaObject, EtcdTools, FetchError, FullSnapshotInput, FullSnapshotSource,
    MemberIdentity, RestoreInputs, RestoreOptions, RestoreReport, RestoreTarget, plan_restore,
    restore,
};
use quorate_backup::store::{SnapStore, StoreOptions};
use quorate_core::backup_chain::ChainRecord;
use quorate_core::cluster_config::{BackupConfig, ClusterConfig};
use quorate_core::membership::start::Backups;
use std::path::Path;

/// The store of a cluster's backups.
pub fn open_store(backup: &BackupConfig) -> Result<SnapStore, String> {
    let spec = backup
        .spec
        .store
        .as_ref()
        .ok_or("spec.backup.store is not set")?;
    let options = StoreOptions {
        local_root: backup.local_root.clone().into(),
        secret_dir: backup.secret_dir.clone().map(Into::into),
    };
    SnapStore::open(spec, &options).map_err(|e| e.to_string())
}

/// How long a member waits for the bucket's listing before it starts.
const STORE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Refuses a prefix another cluster claimed, unless adopting was asked for; claims an unclaimed
/// one for this cluster, but only if it holds no snapshots yet (an unmarked prefix with
/// snapshots was written by etcd-druid, etcd-backup-restore or an older quorate: taking it over
/// needs the adopt annotation). The claim is a conditional create, so of two clusters claiming
/// one prefix only one wins.
pub async fn check_owner(store: &SnapStore, backup: &BackupConfig) -> Result<(), String> {
    let uid = &backup.cluster_uid;
    match store.owner().await.map_err(|e| e.to_string())? {
        Some(owner) if &owner == uid => Ok(()),
        Some(_) if backup.adopt_foreign_backups => {
            store.claim(uid).await.map_err(|e| e.to_string())
        }
        Some(owner) => Err(foreign(store, &owner, backup)),
        None if backup.adopt_foreign_backups => store.claim(uid).await.map_err(|e| e.to_string()),
        None => {
            let listed = store.list().await.map_err(|e| e.to_string())?;
            if !listed.is_empty() {
                return Err(unmarked(store, listed.len()));
            }
            match store
                .claim_unclaimed(uid)
                .await
                .map_err(|e| e.to_string())?
            {
                winner if &winner == uid => Ok(()),
                winner => Err(foreign(store, &winner, backup)),
            }
        }
    }
}

fn unmarked(store: &SnapStore, snapshots: usize) -> String {
    format!(
        "{} holds {snapshots} snapshot(s) but no owner marker (written by etcd-druid, \
         etcd-backup-restore or an older quorate?): refusing to restore from or write to it. \
         Annotate the Etcd with {}=\"true\" to take it over, or use another prefix",
        store.describe(),
        quorate_api::annotations::ADOPT_BACKUPS
    )
}

/// The bucket's chain record, if it has a readable one.
pub async fn chain_record(store: &SnapStore) -> Result<Option<ChainRecord>, String> {
    let text = store.marker("chain").await.map_err(|e| e.to_string())?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// Records `record` as the bucket's chain.
pub async fn put_chain_record(store: &SnapStore, record: &ChainRecord) -> Result<(), String> {
    let text = serde_json::to_string(record).expect("a chain record serializes");
    store
        .put_marker("chain", &text)
        .await
        .map_err(|e| e.to_string())
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

fn foreign(store: &SnapStore, owner: &str, backup: &BackupConfig) -> String {
    format!(
        "{} holds the backups of another cluster ({owner}; this one is {}): refusing to restore from or \
         write to it. Use another prefix, or annotate the Etcd with {}=\"true\" to take it over",
        store.describe(),
        backup.cluster_uid,
        quorate_api::annotations::ADOPT_BACKUPS
    )
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
        Err(e) => return Backups::Unreadable(e),
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
        Err(e) => Err(e),
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

/// Restores `data_dir` as `member` from `store`, up to `target`.
pub async fn restore_from_store(
    store: &SnapStore,
    target: RestoreTarget,
    member: MemberIdentity,
    data_dir: &Path,
    tools: EtcdTools,
) -> Result<RestoreReport, String> {
    let listed = store.list().await.map_err(|e| e.to_string())?;
    let plan =
        plan_restore(&listed, target).map_err(|e| format!("{} in {}", e, store.describe()))?;
    let full = plan.full;
    let full_stream = store.download(full).await.map_err(|e| e.to_string())?;
    let deltas: Vec<_> = plan.deltas.iter().map(|d| d.snapshot.clone()).collect();
    let store = store.clone();
    let delta_stream = futures::stream::iter(deltas)
        .then(move |snapshot| {
            let store = store.clone();
            async move {
                let object = snapshot.name.file_name();
                let fail = |e: String| FetchError {
                    object: object.clone(),
                    source: e.into(),
                };
                let mut body = store
                    .download(&snapshot)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                let mut bytes = Vec::with_capacity(snapshot.size as usize);
                while let Some(chunk) = body.next().await {
                    bytes.extend_from_slice(&chunk.map_err(|e| fail(e.to_string()))?);
                }
                Ok(DeltaObject {
                    name: object.clone(),
                    content: DeltaContent::Raw(bytes.into()),
                })
            }
        })
        .boxed();
    let inputs = RestoreInputs {
        full: FullSnapshotInput {
            name: full.name.file_name(),
            source: FullSnapshotSource::Stream(full_stream),
        },
        deltas: delta_stream,
        member,
        data_dir: data_dir.to_path_buf(),
        tools,
        target: plan.target,
        options: RestoreOptions::default(),
    };
    restore(inputs).await.map_err(|e| e.to_string())
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
    let store = open_store(backup)?;
    let me = cluster.member(&opts.member).ok_or("not a desired member")?;
    let member = MemberIdentity {
        name: me.name.clone(),
        peer_urls: vec![me.peer_url.clone()],
        initial_cluster: format!("{}={}", me.name, me.peer_url),
        cluster_token: cluster.cluster_token.clone(),
    };
    let etcdctl = crate::etcd_process::find_on_path("etcdctl")
        .or_else(|| opts.etcd_binary.parent().map(|d| d.join("etcdctl")))
        .ok_or("etcdctl is needed to restore a snapshot; install etcd-client")?;
    let tools = EtcdTools::new(&opts.etcd_binary, etcdctl);
    tracing::warn!(member = %me.name, store = %store.describe(), "no member has data: restoring from the bucket");
    let chain = chain_record(&store).await?;
    let report =
        restore_from_store(&store, RestoreTarget::Latest, member, &opts.data_dir, tools).await?;
    if let Some(chain) = chain {
        let from = ChainRecord {
            cluster_id: chain.cluster_id,
            since_revision: report.restored_revision,
        };
        std::fs::write(
            restored_marker(&opts.data_dir),
            serde_json::to_string(&from).expect("a chain record serializes"),
        )
        .map_err(|e| format!("recording where the data was restored from: {e}"))?;
    }
    tracing::info!(
        member = %me.name,
        revision = report.restored_revision,
        deltas = report.deltas_applied,
        events = report.events_applied,
        "restored from the bucket"
    );
    Ok(())
}
