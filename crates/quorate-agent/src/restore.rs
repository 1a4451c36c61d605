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
use quorate_core::cluster_config::{BackupConfig, ClusterConfig};
use quorate_core::member_start::Backups;
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
/// one for this cluster.
pub async fn check_owner(store: &SnapStore, backup: &BackupConfig) -> Result<(), String> {
    match store.owner().await.map_err(|e| e.to_string())? {
        Some(owner) if owner == backup.cluster_uid || backup.adopt_foreign_backups => {
            if owner != backup.cluster_uid {
                store
                    .claim(&backup.cluster_uid)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        Some(owner) => Err(foreign(store, &owner, backup)),
        None => store
            .claim(&backup.cluster_uid)
            .await
            .map_err(|e| e.to_string()),
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
    if let Ok(store) = open_store(backup)
        && let Ok(Some(owner)) = store.owner().await
        && owner != backup.cluster_uid
        && !backup.adopt_foreign_backups
    {
        return Backups::Unreadable(foreign(&store, &owner, backup));
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
        Err(e) => Err(e),
    };
    match listed {
        Ok(all) if all.is_empty() => Backups::Empty,
        Ok(all) => Backups::Available {
            newest_revision: all.iter().map(|s| s.name.last_revision).max().unwrap_or(0),
        },
        Err(e) => Backups::Unreadable(e),
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
    let report =
        restore_from_store(&store, RestoreTarget::Latest, member, &opts.data_dir, tools).await?;
    tracing::info!(
        member = %me.name,
        revision = report.restored_revision,
        deltas = report.deltas_applied,
        events = report.events_applied,
        "restored from the bucket"
    );
    Ok(())
}
