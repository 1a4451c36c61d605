//! A cluster's backup store as its users need it: opened from `spec.backup`, guarded by the
//! owner claim (so one cluster never restores from or writes over another's backups), and
//! restored from (list, plan the newest full snapshot plus the deltas after it up to a target,
//! stream the objects into [`restore`]). Used by the agent (backup leader, restore after a
//! total loss) and by `quorate backups list` / `quorate restore`, so it lives here, below both.
//! Inputs are plain (the spec, paths, the cluster's identity) so this crate needs no core types.

use crate::restore::progress::{ProgressSink, RestoreProgress};
use crate::restore::{
    DeltaContent, DeltaObject, EtcdTools, FetchError, FullSnapshotInput, FullSnapshotSource,
    MemberIdentity, PlanError, ReplayMethod, RestoreError, RestoreInputs, RestoreOptions,
    RestorePlan, RestoreReport, RestoreTarget, plan_restore, restore,
};
use crate::store::StoredSnapshot;
use crate::store::{SnapStore, StoreError, StoreOptions};
use crate::trailer::TrailingSha256;
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
    /// The prefix holds snapshots but nobody claimed it (etcd-druid, etcd-backup-restore or an
    /// older quorate wrote them) and taking it over was not asked for.
    #[error(
        "{store} holds {snapshots} snapshot(s) but no owner marker (written by etcd-druid, \
         etcd-backup-restore or an older quorate?): refusing to restore from or write to it. \
         Annotate the Etcd with {adopt}=\"true\" to take it over, or use another prefix",
        adopt = quorate_api::annotations::ADOPT_BACKUPS
    )]
    Unclaimed {
        /// The store's description.
        store: String,
        /// How many snapshots it holds.
        snapshots: usize,
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
/// `cluster_uid`). An unclaimed prefix is claimed for `cluster_uid` only while it holds no
/// snapshots (one with snapshots needs `adopt_foreign`), and with a conditional create, so of
/// two clusters claiming one prefix only one wins.
pub async fn check_owner(
    store: &SnapStore,
    cluster_uid: &str,
    adopt_foreign: bool,
) -> Result<(), StoreRestoreError> {
    match store.owner().await? {
        Some(owner) if owner == cluster_uid => Ok(()),
        Some(_) | None if adopt_foreign => Ok(store.claim(cluster_uid).await?),
        Some(owner) => Err(foreign_owner(store, &owner, cluster_uid)),
        None => {
            let snapshots = store.list().await?.len();
            if snapshots > 0 {
                return Err(StoreRestoreError::Unclaimed {
                    store: store.describe(),
                    snapshots,
                });
            }
            match store.claim_unclaimed(cluster_uid).await? {
                winner if winner == cluster_uid => Ok(()),
                winner => Err(foreign_owner(store, &winner, cluster_uid)),
            }
        }
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

/// Restores `data_dir` as `member` from `store`, up to `target`. A full snapshot is named
/// with the revision read just before it was taken and may hold a little more; when it turns
/// out to be past a point-in-time target, the restore is planned again without it (an older
/// full snapshot and more deltas), so every target the bucket covers can be restored.
///
/// `progress` is told where the restore stands after the full snapshot and after each delta
/// snapshot (see [`crate::restore::progress`]).
pub async fn restore_from_store(
    store: &SnapStore,
    target: RestoreTarget,
    member: MemberIdentity,
    data_dir: &Path,
    tools: EtcdTools,
    options: StoreRestoreOptions,
) -> Result<RestoreReport, StoreRestoreError> {
    let listed = store.list().await?;
    let plan_err = |source| StoreRestoreError::Plan {
        store: store.describe(),
        source,
    };
    let mut plan = plan_restore(&listed, target).map_err(plan_err)?;
    loop {
        match restore_planned(
            store,
            &listed,
            &plan,
            member.clone(),
            data_dir,
            tools.clone(),
            options.clone(),
        )
        .await
        {
            Err(StoreRestoreError::Restore(RestoreError::FullPastTarget { object, .. })) => {
                tracing::info!(%object, "full snapshot holds more than its name says; planning without it");
                plan = crate::restore::plan::replan_past_full(&listed, &plan).map_err(plan_err)?;
            }
            other => return other,
        }
    }
}

/// Fetches the objects `plan` names from `store` and restores them.
async fn restore_planned(
    store: &SnapStore,
    listed: &[StoredSnapshot],
    plan: &RestorePlan<'_, StoredSnapshot>,
    member: MemberIdentity,
    data_dir: &Path,
    tools: EtcdTools,
    options: StoreRestoreOptions,
) -> Result<RestoreReport, StoreRestoreError> {
    let revision_bump = match options.replay_method {
        ReplayMethod::Direct if !options.keep_revision => {
            crate::restore::plan::revision_bump(plan, listed).map_err(|source| {
                StoreRestoreError::Plan {
                    store: store.describe(),
                    source,
                }
            })?
        }
        _ => None,
    };
    // What etcd said about the key space at the revision this restore reaches, if recorded.
    let hash_record = if options.skip_verification {
        None
    } else {
        store.hash_record(plan.expected_revision()).await?
    };
    let full = plan.full;
    // Stored sizes in plan order: what the progress counts in.
    let sizes: Vec<u64> = std::iter::once(full.size)
        .chain(plan.deltas.iter().map(|d| d.snapshot.size))
        .collect();
    let limits = options.limits;
    let full_stream = store
        .download_bounded(
            full,
            limits.full_bytes,
            "the bound for a full snapshot (the quota)",
        )
        .await?;
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
                    .download_bounded(
                        &snapshot,
                        limits.delta_bytes,
                        "the bound for a delta (twice the delta memory limit)",
                    )
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                // Hashed as the bytes arrive: the object is handed over only once its
                // SHA-256 matched, so none of its events is applied before that.
                let mut bytes = Vec::with_capacity(snapshot.size.min(limits.delta_bytes) as usize);
                let mut hashed = TrailingSha256::new();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(|e| fail(e.to_string()))?;
                    hashed.update(&chunk);
                    bytes.extend_from_slice(&chunk);
                }
                crate::delta::check_streamed(&object, hashed).map_err(|e| FetchError {
                    object: object.clone(),
                    source: Box::new(e),
                })?;
                Ok(DeltaObject {
                    name: object.clone(),
                    content: DeltaContent::Checked(bytes.into()),
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
        options: RestoreOptions {
            progress: options.progress.map(|sink| with_sizes(sink, &sizes)),
            replay_method: options.replay_method,
            revision_bump,
            hash_record,
            skip_verification: options.skip_verification,
            ..RestoreOptions::default()
        },
    };
    Ok(restore(inputs).await?)
}

/// How a restore from a store runs.
#[derive(Clone, Debug, Default)]
pub struct StoreRestoreOptions {
    /// Told how far the restore is, in stored bytes.
    pub progress: Option<ProgressSink>,
    /// Keep the revision where the restored data ends even when that is older than what the
    /// bucket holds (by default such a restore raises it and marks it compacted, see
    /// [`crate::restore::plan::revision_bump`]).
    pub keep_revision: bool,
    /// How the deltas are replayed (the one-txn-per-revision replay keeps the revision).
    pub replay_method: ReplayMethod,
    /// Do not compare the restored key space with etcd's hash recorded at backup time
    /// ([`crate::restore::verify`]).
    pub skip_verification: bool,
    /// How large decompressed objects may be.
    pub limits: SizeLimits,
}

/// Bounds on what an object from the bucket may decompress to, checked while it streams: a
/// full snapshot is at most the cluster's database (its quota), a delta at most what the
/// snapshotter holds in memory before it cuts one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeLimits {
    /// Bytes of a full snapshot (the database file).
    pub full_bytes: u64,
    /// Bytes of a delta (its encoded events).
    pub delta_bytes: u64,
}

impl SizeLimits {
    /// For a cluster with backend quota `quota_bytes` and `deltaSnapshotMemoryLimit`
    /// `delta_memory_bytes`: the database may exceed its quota by the writes in flight when
    /// the alarm is raised (a quarter more is allowed), and a delta its memory limit by the
    /// event that crossed it and its encoding (twice is allowed).
    pub fn for_cluster(quota_bytes: u64, delta_memory_bytes: u64) -> SizeLimits {
        SizeLimits {
            full_bytes: quota_bytes.saturating_add(quota_bytes / 4),
            delta_bytes: delta_memory_bytes.saturating_mul(2),
        }
    }
}

impl Default for SizeLimits {
    /// etcd's largest recommended quota (8 GiB) and druid's default delta memory limit.
    fn default() -> SizeLimits {
        SizeLimits::for_cluster(
            crate::restore::DEFAULT_QUOTA_BACKEND_BYTES,
            quorate_api::defaults::DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT_BYTES,
        )
    }
}

/// `sink` with the plan's objects and stored bytes filled in: the restore reports how many
/// objects are done, in plan order, and `sizes` says what they weigh.
fn with_sizes(sink: ProgressSink, sizes: &[u64]) -> ProgressSink {
    let sizes = sizes.to_vec();
    ProgressSink::new(move |mut progress: RestoreProgress| {
        let done = usize::try_from(progress.objects_done).unwrap_or(usize::MAX);
        progress.objects_total = sizes.len() as u64;
        progress.bytes_total = sizes.iter().sum();
        progress.bytes_done = sizes.iter().take(done).sum();
        sink.report(progress)
    })
}
