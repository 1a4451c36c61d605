//! A cluster's backup store as its users need it: opened from `spec.backup`, guarded by the
//! owner claim (so one cluster never restores from or writes over another's backups), and
//! restored from (list, plan the newest full snapshot plus the deltas after it up to a target,
//! stream the objects into [`restore`]). Used by the agent (backup leader, restore after a
//! total loss) and by `quorate backups list` / `quorate restore`, so it lives here, below both.
//! Inputs are plain (the spec, paths, the cluster's identity) so this crate needs no core types.

use crate::restore::{
    DeltaContent, DeltaObject, EtcdTools, FetchError, FullSnapshotInput, FullSnapshotSource,
    MemberIdentity, PlanError, RestoreError, RestoreInputs, RestoreOptions, RestoreReport,
    RestoreTarget, plan_restore, restore,
};
use crate::store::{SnapStore, StoreError, StoreOptions};
use futures::StreamExt;
use quorate_api::BackupSpec;
use std::path::Path;
use thiserror::Error;

/// Why a cluster's store could not be opened, claimed or restored from.
#[derive(Debug, Error)]
pub enum StoreRestoreError {
    /// `spec.backup.store` is unset: the cluster has no store.
    #[error("spec.backup.store is not set")]
    NotConfigured,
    /// The store failed (configuration, credentials, reachability ...).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another cluster claimed the prefix and taking it over was not asked for.
    #[error(
        "{store} holds the backups of another cluster ({owner}; this one is {cluster}): refusing to restore from or \
         write to it. Use another prefix, or annotate the Etcd with {adopt}=\"true\" to take it over",
        adopt = quorate_api::annotations::ADOPT_BACKUPS
    )]
    ForeignOwner {
        /// The store's description.
        store: String,
        /// The cluster that claimed it.
        owner: String,
        /// This cluster.
        cluster: String,
    },
    /// The listed snapshots cannot reach the target.
    #[error("{source} in {store}")]
    Plan {
        /// The store's description.
        store: String,
        /// Why no plan.
        source: PlanError,
    },
    /// The restore itself failed.
    #[error(transparent)]
    Restore(#[from] RestoreError),
}

/// Opens the store `backup.store` names; `NotConfigured` when it names none.
pub fn open_store(
    backup: &BackupSpec,
    options: &StoreOptions,
) -> Result<SnapStore, StoreRestoreError> {
    let spec = backup
        .store
        .as_ref()
        .ok_or(StoreRestoreError::NotConfigured)?;
    Ok(SnapStore::open(spec, options)?)
}

/// Refuses a prefix another cluster claimed, unless `adopt_foreign` (then it is claimed for
/// `cluster_uid`); claims an unclaimed one for `cluster_uid`.
pub async fn check_owner(
    store: &SnapStore,
    cluster_uid: &str,
    adopt_foreign: bool,
) -> Result<(), StoreRestoreError> {
    match store.owner().await? {
        Some(owner) if owner == cluster_uid || adopt_foreign => {
            if owner != cluster_uid {
                store.claim(cluster_uid).await?;
            }
            Ok(())
        }
        Some(owner) => Err(foreign_owner(store, &owner, cluster_uid)),
        None => Ok(store.claim(cluster_uid).await?),
    }
}

/// The refusal for a prefix `owner` claimed while `cluster_uid` asked for it.
pub fn foreign_owner(store: &SnapStore, owner: &str, cluster_uid: &str) -> StoreRestoreError {
    StoreRestoreError::ForeignOwner {
        store: store.describe(),
        owner: owner.to_string(),
        cluster: cluster_uid.to_string(),
    }
}

/// Restores `data_dir` as `member` from `store`, up to `target`.
pub async fn restore_from_store(
    store: &SnapStore,
    target: RestoreTarget,
    member: MemberIdentity,
    data_dir: &Path,
    tools: EtcdTools,
) -> Result<RestoreReport, StoreRestoreError> {
    let listed = store.list().await?;
    let plan = plan_restore(&listed, target).map_err(|source| StoreRestoreError::Plan {
        store: store.describe(),
        source,
    })?;
    let full = plan.full;
    let full_stream = store.download(full).await?;
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
    Ok(restore(inputs).await?)
}
