//! Backups, run by the member whose etcd is the raft leader (the backup leader): a full
//! snapshot on the cron schedule, delta snapshots from a watch in between, garbage collection,
//! and the snapshot leases that `BackupReady` is judged from. Leadership follows etcd's: when
//! the leader moves, the old leader stops after uploading what it captured and the new one
//! continues from the newest stored revision + 1, so there is neither a gap nor an overlap.

use crate::backup_hash::record_hash;
use crate::state::SharedState;
use quorate_api::CronSchedule;
use quorate_backup::layout::{SnapshotKind, SnapshotName};
use quorate_backup::snapshotter::{
    CaptureError, CutSchedule, DeltaBatch, DeltaConfig, DeltaWatcher, full_snapshot,
};
use quorate_backup::store::{SnapStore, StoreError, StoredSnapshot};
use quorate_coord::Coordination;
use quorate_core::backup_chain::{ChainDecision, ChainEvidence, decide_chain};
use quorate_core::backup_continuity::{ChainFault, audit_chain};
use quorate_core::backup_hash::HashOccasion;
use quorate_core::backup_schedule::{StartupAction, startup_action};
use quorate_core::cluster_config::{BackupConfig, ClusterConfig};
use quorate_core::gc::{self, GcPolicy, SnapshotInfo};
use quorate_core::hibernation::FinalSnapshotReport;
use quorate_core::lease::{BACKUP_ERROR_ANNOTATION, SnapshotLease};
use quorate_core::maintenance::backup_compaction::{
    DeltaBacklog, events_threshold, full_snapshot_for_backlog,
};
use quorate_etcd::{EtcdTimeouts, MemberClient};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Why backups failed in one period of leadership (the leader records it on the snapshot
/// leases, so `BackupReady` says it, and tries again).
#[derive(Clone, Debug, thiserror::Error)]
pub enum BackupError {
    /// The store could not be opened, listed or written.
    #[error("{0}")]
    Store(String),
    /// This member's etcd did not answer.
    #[error("etcd: {0}")]
    Etcd(String),
    /// Taking a full snapshot failed.
    #[error("full snapshot: {0}")]
    FullSnapshot(String),
    /// Uploading a snapshot failed.
    #[error("uploading {object}: {reason}")]
    Upload {
        /// The object.
        object: String,
        /// What went wrong.
        reason: String,
    },
    /// The store acknowledged a snapshot but does not hold it (positive evidence: asked right
    /// after, it answers "not found" or another size): the chain does not count it, and the
    /// next period of leadership continues from what the bucket holds.
    #[error("the store lost {object}: {reason}")]
    Lost {
        /// The object.
        object: String,
        /// What the store answered.
        reason: String,
    },
    /// Capturing deltas failed.
    #[error("delta capture failed: {0}")]
    Capture(String),
    /// The bucket's chain is not etcd's history: nothing is written to or deleted from it.
    #[error("backups stopped: {0}")]
    ChainRefused(String),
    /// This member is not the backup leader (answer to an on-demand request).
    #[error("this member is not the backup leader")]
    NotLeader,
}

impl BackupError {
    fn store(e: impl std::fmt::Display) -> Self {
        BackupError::Store(e.to_string())
    }

    /// A failed upload of `object`: [`BackupError::Lost`] when the store did not keep it.
    fn upload(object: String, e: &StoreError) -> Self {
        let reason = e.to_string();
        match e {
            StoreError::NotKept { .. } => BackupError::Lost { object, reason },
            _ => BackupError::Upload { object, reason },
        }
    }

    /// What failed, as `etcdbr_snapshotter_failure{error}` counts it: `etcd`, `store`,
    /// `encryption` or `chain`.
    fn metric_label(&self) -> &'static str {
        match self {
            BackupError::Etcd(_) | BackupError::FullSnapshot(_) | BackupError::Capture(_) => "etcd",
            BackupError::ChainRefused(_) => "chain",
            BackupError::Lost { .. } => "lost",
            BackupError::NotLeader => "leadership",
            BackupError::Store(reason) | BackupError::Upload { reason, .. }
                if reason.contains("encryption") || reason.contains("backup key") =>
            {
                "encryption"
            }
            BackupError::Store(_) | BackupError::Upload { .. } => "store",
        }
    }
}

/// Where the answer to an on-demand full snapshot goes.
type FullReply = oneshot::Sender<Result<StoredSnapshot, BackupError>>;
type DeltaReply = oneshot::Sender<Result<Option<StoredSnapshot>, BackupError>>;

/// An on-demand snapshot asked for over HTTP.
#[derive(Debug)]
pub enum BackupRequest {
    /// `/snapshot/full[?final=true]`.
    Full {
        /// Mark the snapshot final (taken before a migration or hibernation).
        is_final: bool,
        /// The stored snapshot, or why there is none.
        reply: FullReply,
    },
    /// `/snapshot/delta`.
    Delta {
        /// The stored delta (`None` when nothing changed), or why it failed.
        reply: oneshot::Sender<Result<Option<StoredSnapshot>, BackupError>>,
    },
}

/// How long a member leads before it starts backing up (the old leader stops within 500 ms
/// and uploads its last batch meanwhile).
const LEADERSHIP_SETTLE: Duration = Duration::from_secs(2);

/// Why one period of leadership ended.
enum LeadEnd {
    /// This member is no longer the leader (or the agent stops).
    LostLeadership,
}

/// Runs backups whenever this member leads, until `shutdown`.
pub async fn run_backups<C: Coordination>(
    coord: C,
    me: String,
    state: SharedState,
    mut requests: mpsc::Receiver<BackupRequest>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut leading_since: Option<std::time::Instant> = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let leading_now = {
            let s = state.get();
            s.is_leader && s.healthy
        };
        // A new leader waits until the previous one has noticed and uploaded what it captured,
        // so the new one's first delta starts after it: no overlapping deltas.
        leading_since = if leading_now {
            leading_since.or(Some(std::time::Instant::now()))
        } else {
            None
        };
        let leading = leading_since.is_some_and(|t| t.elapsed() >= LEADERSHIP_SETTLE);
        let cluster = if leading {
            coord.cluster_config().await.ok()
        } else {
            None
        };
        match cluster
            .as_ref()
            .and_then(|c| c.backup.clone().map(|b| (c, b)))
        {
            Some((cluster, backup)) => {
                let mut leader = Leader {
                    coord: &coord,
                    cluster,
                    backup: &backup,
                    me: &me,
                    state: &state,
                };
                match leader.lead(&mut requests, &mut shutdown).await {
                    Ok(LeadEnd::LostLeadership) => leading_since = None,
                    // Failures caused by the agent stopping are not the store's fault.
                    Err(_) if *shutdown.borrow() => return,
                    Err(error) => {
                        tracing::warn!(member = %me, %error, "backups failed; retrying");
                        state.metrics().failure(error.metric_label());
                        record_final_snapshot(&state, Err(&error));
                        leader.record_error(&error.to_string()).await;
                        let _ =
                            tokio::time::timeout(Duration::from_secs(5), shutdown.changed()).await;
                    }
                }
            }
            None => {
                // Not the leader: answer requests with a pointer to who is.
                while let Ok(request) = requests.try_recv() {
                    refuse(request);
                }
                let _ = tokio::time::timeout(Duration::from_millis(500), shutdown.changed()).await;
            }
        }
    }
}

/// Records the outcome of a final snapshot for the hibernation the configuration asks for (if
/// one is due): the controller stops the members on the stored revision, and reports failures.
fn record_final_snapshot(state: &SharedState, outcome: Result<i64, &BackupError>) {
    state.update(|s| {
        let Some(request) = s.final_snapshot_due() else {
            return;
        };
        let failures = s
            .final_snapshot
            .as_ref()
            .filter(|r| r.request == request)
            .map_or(0, |r| r.failures);
        s.final_snapshot = Some(match outcome {
            Ok(revision) => FinalSnapshotReport {
                request,
                revision: Some(revision),
                failures,
                error: None,
            },
            Err(error) => FinalSnapshotReport {
                request,
                revision: None,
                failures: failures + 1,
                error: Some(error.to_string()),
            },
        });
    });
}

fn refuse(request: BackupRequest) {
    match request {
        BackupRequest::Full { reply, .. } => {
            let _ = reply.send(Err(BackupError::NotLeader));
        }
        BackupRequest::Delta { reply } => {
            let _ = reply.send(Err(BackupError::NotLeader));
        }
    }
}

struct Leader<'a, C: Coordination> {
    coord: &'a C,
    cluster: &'a ClusterConfig,
    backup: &'a BackupConfig,
    me: &'a str,
    state: &'a SharedState,
}

impl<C: Coordination> Leader<'_, C> {
    fn still_leading(&self) -> bool {
        let s = self.state.get();
        s.is_leader && s.healthy
    }

    async fn member_client(&self) -> Result<MemberClient, BackupError> {
        // Over loopback: a stopping pod's last delta does not wait on cluster DNS.
        let (url, tls) = crate::executor::own_etcd(self.cluster, self.me);
        MemberClient::connect(&url, tls.as_ref(), EtcdTimeouts::default())
            .await
            .map_err(|e| BackupError::Etcd(e.to_string()))
    }

    fn compression(&self) -> Option<quorate_api::CompressionPolicy> {
        let spec = &self.backup.spec;
        spec.compression_enabled()
            .then(|| spec.compression_policy())
    }

    /// One period of leadership.
    async fn lead(
        &mut self,
        requests: &mut mpsc::Receiver<BackupRequest>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<LeadEnd, BackupError> {
        crate::secret_files::write_backup_keys(self.coord, self.cluster)
            .await
            .map_err(BackupError::store)?;
        let store = crate::restore::open_store(self.backup).map_err(BackupError::store)?;
        store.check().await.map_err(BackupError::store)?;
        crate::restore::check_owner(&store, self.backup)
            .await
            .map_err(BackupError::store)?;
        let mut stored = store.list().await.map_err(BackupError::store)?;
        if self.check_chain(&store, &stored).await? {
            stored.clear();
        }
        let schedule = self.backup.spec.full_snapshot_cron();
        let now = crate::clock::now();
        let newest_full = stored.iter().rfind(|s| s.name.kind == SnapshotKind::Full);
        let newest_revision = stored
            .iter()
            .map(|s| s.name.last_revision)
            .max()
            .unwrap_or(0);
        let last_full = newest_full.map(|f| (unix(f.name.created_unix), newest_revision));
        let infos: Vec<SnapshotInfo> = stored.iter().map(StoredSnapshot::info).collect();
        let lost = audit_chain(&infos, 0);
        if let Some(fault) = &lost {
            tracing::warn!(member = %self.me, %fault, "the bucket's chain has a gap");
            self.state.metrics().failure("lost");
        }
        let action = if self.state.get().final_snapshot_due().is_some() || lost.is_some() {
            StartupAction::TakeFullSnapshot
        } else {
            startup_action(last_full, &schedule, now)
        };
        let full_due = matches!(action, StartupAction::TakeFullSnapshot);
        let metrics = self.state.metrics();
        metrics.snapshot_required(SnapshotKind::Full.as_str(), full_due);
        metrics.backup_schedule(
            quorate_core::backup_schedule::full_snapshot_window(&schedule, now),
            self.backup.spec.delta_snapshot_period(),
        );
        if let Some(full) = newest_full {
            metrics.backup_current(SnapshotKind::Full.as_str(), full.name.created_unix);
        }
        let events_threshold = events_threshold(&self.backup.spec);
        let mut backlog = backlog_in(&stored);
        self.state.metrics().backlog(backlog);
        let mut next_revision = match action {
            StartupAction::CatchUpDelta { from_revision } => {
                tracing::info!(member = %self.me, from = from_revision, "backup leader: continuing deltas");
                from_revision
            }
            StartupAction::TakeFullSnapshot => {
                let is_final = self.state.get().marks_final();
                backlog = DeltaBacklog::default();
                self.state.metrics().backlog(backlog);
                self.take_full(&store, is_final).await?.name.last_revision + 1
            }
        };
        self.clear_error().await;
        let mut next_full = next_fire(&schedule, now);
        let mut gc = tokio::time::interval(
            self.backup
                .spec
                .garbage_collection_period()
                .max(Duration::from_secs(1)),
        );
        gc.tick().await;
        let mut leadership = tokio::time::interval(Duration::from_millis(500));
        // Renew the delta lease every period even when nothing changed, so a quiet cluster
        // still shows its backups are current.
        let mut renew = tokio::time::interval(
            self.backup
                .spec
                .delta_snapshot_period()
                .max(Duration::from_millis(500)),
        );
        let mut captured_through = next_revision - 1;
        // The key-space hash of a delta's revision under way (at most one at a time).
        let mut hashing: Option<tokio::task::JoinHandle<()>> = None;
        // Delta requests that arrived while a full snapshot was taken, for the next watch.
        let mut deferred_deltas: Vec<DeltaReply> = Vec::new();
        loop {
            let client = self.member_client().await?;
            let mut config = DeltaConfig::new(next_revision);
            config.memory_limit = self.backup.spec.delta_snapshot_memory_limit_bytes() as usize;
            config.schedule = CutSchedule::Every(self.backup.spec.delta_snapshot_period());
            config.clock = std::sync::Arc::new(crate::clock::AgentClock);
            let (handle, mut batches, task) = DeltaWatcher::spawn(client, config)
                .map_err(|e| BackupError::Capture(e.to_string()))?;
            // Delta requests waiting for the cut under way; one cut answers them all.
            let mut pending_delta: Vec<DeltaReply> = std::mem::take(&mut deferred_deltas);
            let mut cut_replies =
                mpsc::channel::<Result<quorate_backup::snapshotter::CutOutcome, CaptureError>>(1);
            let request_cut = |tx: mpsc::Sender<_>| {
                let handle = handle.clone();
                tokio::spawn(async move {
                    let _ = tx.send(handle.request_cut().await).await;
                });
            };
            if !pending_delta.is_empty() {
                request_cut(cut_replies.0.clone());
            }
            // What ends this watch: `Some(is_final, replies)` = take a full snapshot next and
            // answer everyone who asked for it.
            let mut full_after: Option<(bool, Vec<FullReply>)> = None;
            let mut lost = false;
            loop {
                tokio::select! {
                    batch = batches.recv() => match batch {
                        Some(batch) => {
                            captured_through = captured_through.max(batch.last_revision);
                            let uploaded = self.upload_delta(&store, &batch).await;
                            if uploaded.is_ok() && hashing.as_ref().is_none_or(|h| h.is_finished()) {
                                let (cluster, me, store) = (self.cluster.clone(), self.me.to_string(), store.clone());
                                let revision = batch.last_revision;
                                hashing = Some(tokio::spawn(async move {
                                    record_hash(&cluster, &me, &store, revision, HashOccasion::Delta).await
                                }));
                            }
                            for reply in pending_delta.drain(..) {
                                let _ = reply.send(uploaded.clone().map(Some));
                            }
                            backlog = backlog.add(batch.events.len() as u64, uploaded?.size);
                            self.state.metrics().backlog(backlog);
                            if full_after.is_none()
                                && let Some(why) = full_snapshot_for_backlog(backlog, events_threshold)
                            {
                                // A restore would replay too much: start again from a full one.
                                tracing::info!(member = %self.me, %why, "taking a full snapshot");
                                full_after = Some((false, Vec::new()));
                                handle.stop().await;
                            }
                        }
                        None => break,
                    },
                    outcome = cut_replies.1.recv() => {
                        if let Some(Ok(quorate_backup::snapshotter::CutOutcome::NoEvents { .. })) = outcome {
                            for reply in pending_delta.drain(..) {
                                let _ = reply.send(Ok(None));
                            }
                        }
                    }
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(next_full)), if full_after.is_none() && !lost => {
                        full_after = Some((false, Vec::new()));
                        handle.stop().await;
                    }
                    _ = renew.tick() => self.record(&self.backup.delta_snapshot_lease, captured_through).await,
                    _ = gc.tick() => {
                        // Every capture up to `captured_through` was uploaded and confirmed (a
                        // failed upload ends the period): the bucket must still hold it.
                        match self.audit(&store, captured_through).await {
                            Ok(Some(fault)) if full_after.is_none() => {
                                tracing::warn!(member = %self.me, %fault, "the store lost part of the chain");
                                self.state.metrics().failure("lost");
                                full_after = Some((false, Vec::new()));
                                handle.stop().await;
                            }
                            Ok(_) => {}
                            Err(e) => tracing::warn!(member = %self.me, error = %e, "auditing the chain failed"),
                        }
                        if let Err(e) = self.collect_garbage(&store).await {
                            tracing::warn!(member = %self.me, error = %e, "garbage collection failed");
                        }
                    }
                    _ = leadership.tick(), if !lost => {
                        if !self.still_leading() || *shutdown.borrow() {
                            lost = true;
                            handle.stop().await;
                        } else if full_after.is_none() && self.state.get().final_snapshot_due().is_some() {
                            // A hibernation or an upgrade was asked for: its snapshot, now.
                            full_after = Some((self.state.get().marks_final(), Vec::new()));
                            handle.stop().await;
                        }
                    }
                    request = requests.recv() => match request {
                        Some(BackupRequest::Full { is_final, reply }) => match &mut full_after {
                            // One already asked for: this request joins it.
                            Some((finality, replies)) => {
                                *finality |= is_final;
                                replies.push(reply);
                            }
                            None => {
                                full_after = Some((is_final, vec![reply]));
                                handle.stop().await;
                            }
                        },
                        Some(BackupRequest::Delta { reply }) => {
                            // A cut already asked for answers this request too.
                            if pending_delta.is_empty() {
                                request_cut(cut_replies.0.clone());
                            }
                            pending_delta.push(reply);
                        }
                        None => {}
                    },
                }
            }
            // Delta requests still waiting are answered by the next watch's first cut.
            deferred_deltas.append(&mut pending_delta);
            // The batch channel closed: the capture ended (stopped, or failed).
            match task.await {
                Ok(Ok(end)) => next_revision = end.next_revision,
                Ok(Err(CaptureError::Compacted { .. })) => {
                    full_after = full_after.or(Some((false, Vec::new())))
                }
                Ok(Err(e)) => return Err(BackupError::Capture(e.to_string())),
                Err(e) => return Err(BackupError::Capture(format!("the capture task ended: {e}"))),
            }
            if lost {
                return Ok(LeadEnd::LostLeadership);
            }
            if let Some((is_final, replies)) = full_after {
                let taken = self.take_full(&store, is_final).await;
                // Requests that came while it was taken join it too.
                while let Ok(request) = requests.try_recv() {
                    match request {
                        BackupRequest::Full { reply, .. } => {
                            let _ = reply.send(taken.clone());
                        }
                        BackupRequest::Delta { reply } => deferred_deltas.push(reply),
                    }
                }
                for reply in replies {
                    let _ = reply.send(taken.clone());
                }
                next_revision = taken?.name.last_revision + 1;
                backlog = DeltaBacklog::default();
                self.state.metrics().backlog(backlog);
                next_full = next_fire(&schedule, crate::clock::now());
            }
        }
    }

    /// Continues the bucket's chain only if etcd's history is the chain's (issue 12): decided
    /// by `backup_chain` from the chain record, the bucket's newest revision and etcd's status.
    /// `stored` is the bucket's listing; true when a new chain was started (every listed
    /// snapshot moved aside).
    async fn check_chain(
        &self,
        store: &SnapStore,
        stored: &[StoredSnapshot],
    ) -> Result<bool, BackupError> {
        let status = self
            .member_client()
            .await?
            .status()
            .await
            .map_err(|e| BackupError::Etcd(e.to_string()))?;
        let record = crate::restore::chain_record(store)
            .await
            .map_err(BackupError::store)?;
        let newest = stored.iter().map(|s| s.name.last_revision).max();
        let evidence = ChainEvidence {
            record: record.as_ref(),
            bucket_newest: newest,
            etcd_cluster_id: status.cluster_id,
            etcd_revision: status.revision,
            new_chain_requested: self.backup.new_chain_request.is_some(),
        };
        match decide_chain(evidence) {
            ChainDecision::Continue => Ok(false),
            ChainDecision::Record(record) => crate::restore::put_chain_record(store, &record)
                .await
                .map(|()| false)
                .map_err(BackupError::store),
            ChainDecision::StartNew(record) => {
                let suffix = crate::clock::now().as_second().to_string();
                let moved = store.archive(&suffix).await.map_err(BackupError::store)?;
                tracing::warn!(member = %self.me, moved, suffix = %suffix, "new backup chain asked for: the old snapshots were moved aside");
                crate::restore::put_chain_record(store, &record)
                    .await
                    .map(|()| true)
                    .map_err(BackupError::store)
            }
            ChainDecision::Refuse(why) => Err(BackupError::ChainRefused(why)),
        }
    }

    async fn take_full(
        &self,
        store: &SnapStore,
        is_final: bool,
    ) -> Result<StoredSnapshot, BackupError> {
        let started = std::time::Instant::now();
        let taken = self.take_full_unmeasured(store, is_final).await;
        let stored = taken
            .as_ref()
            .ok()
            .map(|s| (s.name.last_revision, s.name.created_unix));
        let metrics = self.state.metrics();
        metrics.snapshot(SnapshotKind::Full.as_str(), started.elapsed(), stored);
        if stored.is_some() {
            metrics.snapshot_required(SnapshotKind::Full.as_str(), false);
            metrics.snapshot_required(SnapshotKind::Incr.as_str(), false);
        }
        taken
    }

    async fn take_full_unmeasured(
        &self,
        store: &SnapStore,
        is_final: bool,
    ) -> Result<StoredSnapshot, BackupError> {
        let client = self.member_client().await?;
        let snapshot = full_snapshot(&client)
            .await
            .map_err(|e| BackupError::FullSnapshot(e.to_string()))?;
        let mut name = SnapshotName::full(
            snapshot.revision,
            crate::clock::now().as_second(),
            self.compression(),
        );
        name.is_final = is_final;
        let stored = store
            .upload(&name, snapshot.stream)
            .await
            .map_err(|e| BackupError::upload(name.file_name(), &e))?;
        tracing::info!(member = %self.me, snapshot = %stored.path, size = stored.size, "full snapshot stored");
        record_hash(
            self.cluster,
            self.me,
            store,
            snapshot.revision,
            HashOccasion::FullSnapshot,
        )
        .await;
        // Any full snapshot answers a request that is due (a hibernation's, an upgrade's).
        record_final_snapshot(self.state, Ok(snapshot.revision));
        self.record(&self.backup.full_snapshot_lease, snapshot.revision)
            .await;
        // A full snapshot also covers everything a delta would have.
        self.record(&self.backup.delta_snapshot_lease, snapshot.revision)
            .await;
        Ok(stored)
    }

    async fn upload_delta(
        &self,
        store: &SnapStore,
        batch: &DeltaBatch,
    ) -> Result<StoredSnapshot, BackupError> {
        let name = SnapshotName::incr(
            batch.start_revision,
            batch.last_revision,
            crate::clock::now().as_second(),
            self.compression(),
        );
        let body = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(
            batch.encoded.clone(),
        ))]);
        let started = std::time::Instant::now();
        let uploaded = store.upload(&name, body).await;
        self.state.metrics().snapshot(
            SnapshotKind::Incr.as_str(),
            started.elapsed(),
            uploaded
                .as_ref()
                .ok()
                .map(|s| (s.name.last_revision, s.name.created_unix)),
        );
        // As etcd-backup-restore: a failed delta leaves one owed until the next one succeeds.
        self.state
            .metrics()
            .snapshot_required(SnapshotKind::Incr.as_str(), uploaded.is_err());
        let stored = uploaded.map_err(|e| BackupError::upload(name.file_name(), &e))?;
        tracing::debug!(member = %self.me, snapshot = %stored.path, events = batch.events.len(), "delta snapshot stored");
        self.record(&self.backup.delta_snapshot_lease, batch.last_revision)
            .await;
        Ok(stored)
    }

    /// What is missing from the bucket's chain, on its listing's evidence, given that this
    /// leader stored (and the store confirmed) every revision up to `stored_through`.
    async fn audit(
        &self,
        store: &SnapStore,
        stored_through: i64,
    ) -> Result<Option<ChainFault>, BackupError> {
        let stored = store.list().await.map_err(BackupError::store)?;
        let infos: Vec<SnapshotInfo> = stored.iter().map(StoredSnapshot::info).collect();
        Ok(audit_chain(&infos, stored_through))
    }

    async fn collect_garbage(&self, store: &SnapStore) -> Result<(), BackupError> {
        let stored = store.list().await.map_err(BackupError::store)?;
        let infos: Vec<SnapshotInfo> = stored.iter().map(StoredSnapshot::info).collect();
        let policy = GcPolicy::from_backup_spec(&self.backup.spec);
        let garbage = gc::garbage(&infos, policy, crate::clock::now());
        for &index in &garbage {
            let deleted = store.delete(&stored[index]).await;
            self.state
                .metrics()
                .garbage_collected(stored[index].name.kind.as_str(), deleted.is_ok());
            deleted.map_err(BackupError::store)?;
            tracing::info!(member = %self.me, snapshot = %stored[index].path, "garbage-collected");
        }
        // Hash records below the oldest full snapshot kept: no restore can end there any more.
        if let Some(oldest_full) = stored
            .iter()
            .enumerate()
            .filter(|(i, s)| s.name.kind == SnapshotKind::Full && !garbage.contains(i))
            .map(|(_, s)| s.name.last_revision)
            .min()
        {
            store
                .prune_hash_records(oldest_full)
                .await
                .map_err(BackupError::store)?;
        }
        Ok(())
    }

    /// Records a snapshot on its lease; revisions never go down.
    async fn record(&self, lease_name: &str, revision: i64) {
        let mut lease = self
            .coord
            .snapshot_lease(lease_name)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| SnapshotLease::new(lease_name));
        let current = lease.revision().and_then(Result::ok).unwrap_or(0);
        let now = crate::clock::now();
        lease.record(revision.max(current), now);
        lease.annotations.remove(BACKUP_ERROR_ANNOTATION);
        let kind = if lease_name == self.backup.full_snapshot_lease {
            SnapshotKind::Full
        } else {
            SnapshotKind::Incr
        };
        self.state
            .metrics()
            .backup_current(kind.as_str(), now.as_second());
        if let Err(e) = self.coord.put_snapshot_lease(&lease).await {
            tracing::warn!(member = %self.me, error = %e, "updating snapshot lease {lease_name} failed");
        }
    }

    /// Puts `error` on the snapshot leases, so `BackupReady` turns False with it.
    async fn record_error(&self, error: &str) {
        for name in [
            &self.backup.full_snapshot_lease,
            &self.backup.delta_snapshot_lease,
        ] {
            let mut lease = self
                .coord
                .snapshot_lease(name)
                .await
                .ok()
                .flatten()
                .unwrap_or_else(|| SnapshotLease::new(name.clone()));
            lease
                .annotations
                .insert(BACKUP_ERROR_ANNOTATION.to_string(), error.to_string());
            let _ = self.coord.put_snapshot_lease(&lease).await;
        }
    }

    async fn clear_error(&self) {
        for name in [
            &self.backup.full_snapshot_lease,
            &self.backup.delta_snapshot_lease,
        ] {
            if let Ok(Some(mut lease)) = self.coord.snapshot_lease(name).await
                && lease.annotations.remove(BACKUP_ERROR_ANNOTATION).is_some()
            {
                let _ = self.coord.put_snapshot_lease(&lease).await;
            }
        }
    }
}

/// The deltas after the newest full snapshot in `stored`, as a restore would replay them: the
/// revisions they span (at least one event each) and their size.
fn backlog_in(stored: &[StoredSnapshot]) -> DeltaBacklog {
    let full = stored
        .iter()
        .filter(|s| s.name.kind == SnapshotKind::Full)
        .map(|s| s.name.last_revision)
        .max()
        .unwrap_or(0);
    stored
        .iter()
        .filter(|s| s.name.kind != SnapshotKind::Full && s.name.start_revision > full)
        .fold(DeltaBacklog::default(), |b, s| {
            let span = s.name.last_revision - s.name.start_revision + 1;
            b.add(u64::try_from(span).unwrap_or(0), s.size)
        })
}

fn unix(seconds: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(seconds).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// When the schedule fires next, as a tokio instant.
fn next_fire(schedule: &CronSchedule, now: jiff::Timestamp) -> std::time::Instant {
    let wait = schedule
        .next_after(now)
        .map(|t| t.duration_since(now).unsigned_abs())
        .unwrap_or(Duration::from_secs(24 * 3600));
    std::time::Instant::now() + wait
}
