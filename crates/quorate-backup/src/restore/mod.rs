//! Restoring a member's data directory from a full snapshot and the delta snapshots after it.
//!
//! 1. [`plan`] chooses the objects (pure): the newest full snapshot at or before the target and
//!    the chain of deltas after it, tolerating overlaps, refusing gaps; and how far to raise the
//!    revision of a point-in-time restore ([`plan::revision_bump`]).
//! 2. [`restore`] [`replay`]s the deltas onto the full snapshot and builds the data directory in
//!    `<dir>.part` with etcd's own tool (`etcdutl`/`etcdctl snapshot restore`), and only then
//!    swaps it into place ([`swap`]). Any failure leaves the target directory exactly as it was.
//!    By default ([`ReplayMethod::Direct`]) the replay writes a new database file itself
//!    ([`direct`], [`bolt`]): no etcd runs until the restored member starts. The fallback
//!    ([`ReplayMethod::Txn`]) starts a temporary etcd on the restored snapshot and sends one txn
//!    per source revision while keeping every lease alive; a member of a multi-member
//!    `initial-cluster` cannot run alone on its data (it would wait for a quorum), so for such
//!    identities that replay runs in a single-member scratch copy, snapshotted and restored once
//!    more with the real identity.
//!
//! Downloading and decompressing objects is the caller's job: the full snapshot comes as a
//! file or a byte stream, the deltas as a stream of objects in plan order, decoded one object
//! ahead of the replay (at most three deltas' events are in memory).

pub mod bolt;
pub mod direct;
pub mod leases;
pub mod plan;
pub mod progress;
pub mod proto;
pub mod replay;
pub mod swap;
pub mod temp_etcd;
pub mod tools;
pub mod verify;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use thiserror::Error;
use tokio::io::AsyncWriteExt;

pub use direct::DirectApplier;
pub use plan::{Listed, PlanError, PlannedDelta, RestorePlan, RestoreTarget, plan_restore};
pub use replay::{
    DEFAULT_LEASE_TTL, DeltaOutcome, ReplayError, ReplayMethod, ReplayStats, Replayer,
};
pub use temp_etcd::{DEFAULT_QUOTA_BACKEND_BYTES, TempEtcd, TempEtcdConfig, TempEtcdError};
pub use tools::{EtcdTools, MemberIdentity, ToolError};

use crate::delta::{self, DeltaError, DeltaEvent};

/// Where the full snapshot comes from.
pub enum FullSnapshotSource {
    /// A local, decompressed `.db` file (left untouched).
    File(PathBuf),
    /// The decompressed bytes, written to a scratch file first.
    Stream(BoxStream<'static, std::io::Result<Bytes>>),
}

impl std::fmt::Debug for FullSnapshotSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FullSnapshotSource::File(p) => f.debug_tuple("File").field(p).finish(),
            FullSnapshotSource::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

/// The full snapshot to start from.
#[derive(Debug)]
pub struct FullSnapshotInput {
    /// Its object name, for messages (e.g. `Full-00000000-00000042-1700000000.gz`).
    pub name: String,
    /// Its bytes.
    pub source: FullSnapshotSource,
}

/// The content of one delta snapshot object.
#[derive(Clone, Debug)]
pub enum DeltaContent {
    /// The decompressed object: JSON events followed by their SHA-256 (checked before use).
    Raw(Bytes),
    /// Events already decoded and verified by the caller.
    Events(Vec<DeltaEvent>),
}

/// One delta snapshot object.
#[derive(Clone, Debug)]
pub struct DeltaObject {
    /// Its object name.
    pub name: String,
    /// Its content.
    pub content: DeltaContent,
}

/// A delta snapshot the caller could not fetch.
#[derive(Debug, Error)]
#[error("fetching delta snapshot {object} failed: {source}")]
pub struct FetchError {
    /// The object.
    pub object: String,
    /// Why.
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Delta objects in the order they are applied.
pub type DeltaStream = BoxStream<'static, Result<DeltaObject, FetchError>>;

/// A [`DeltaStream`] over objects already in memory (tests, small restores).
pub fn deltas_from_iter(objects: impl IntoIterator<Item = DeltaObject>) -> DeltaStream {
    let objects: Vec<_> = objects.into_iter().map(Ok).collect();
    futures::stream::iter(objects).boxed()
}

/// Tunables with safe defaults.
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// TTL for leases whose TTL the deltas do not record.
    pub default_lease_ttl: i64,
    /// The temporary etcd's `--quota-backend-bytes`.
    pub quota_backend_bytes: u64,
    /// Restore a full snapshot without etcd's integrity hash (a copied `member/snap/db`).
    pub skip_hash_check: bool,
    /// How long the temporary etcd may take to start.
    pub etcd_start_timeout: Duration,
    /// Told after the full snapshot and after each delta snapshot is applied (objects done,
    /// events applied; the caller knows the sizes).
    pub progress: Option<progress::ProgressSink>,
    /// How revisions reach the restored data.
    pub replay_method: ReplayMethod,
    /// Raise the restored revision by this much and mark it compacted (as `etcdutl snapshot
    /// restore --bump-revision --mark-compacted`), so clients holding revisions of the source
    /// (Kubernetes watch caches) relist instead of waiting for events that will never come.
    pub revision_bump: Option<u64>,
    /// etcd's hash of the key space recorded at backup time at the revision the restore is
    /// expected to reach ([`verify`]); the restored data must hash the same.
    pub hash_record: Option<crate::store::HashRecord>,
    /// Do not compare the restored data with the recorded hash.
    pub skip_verification: bool,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        RestoreOptions {
            default_lease_ttl: DEFAULT_LEASE_TTL,
            quota_backend_bytes: DEFAULT_QUOTA_BACKEND_BYTES,
            skip_hash_check: false,
            etcd_start_timeout: Duration::from_secs(60),
            progress: None,
            replay_method: ReplayMethod::default(),
            revision_bump: None,
            hash_record: None,
            skip_verification: false,
        }
    }
}

/// Everything a restore needs.
pub struct RestoreInputs {
    /// The full snapshot.
    pub full: FullSnapshotInput,
    /// The deltas after it, in plan order (may be empty).
    pub deltas: DeltaStream,
    /// The member to restore as.
    pub member: MemberIdentity,
    /// The data directory to (re)place.
    pub data_dir: PathBuf,
    /// etcd binaries.
    pub tools: EtcdTools,
    /// How far to restore.
    pub target: RestoreTarget,
    /// Tunables.
    pub options: RestoreOptions,
}

/// What a restore did.
#[derive(Clone, Debug, PartialEq)]
pub struct RestoreReport {
    /// The data directory now in place.
    pub data_dir: PathBuf,
    /// The full snapshot's revision.
    pub full_revision: i64,
    /// The revision the restored data ends at (after a bump, the raised one).
    pub restored_revision: i64,
    /// How far the revision was raised past the replayed data (0: not bumped).
    pub revision_bumped_by: u64,
    /// Delta objects read.
    pub deltas_read: u64,
    /// Delta objects that contributed at least one event.
    pub deltas_applied: u64,
    /// Events applied.
    pub events_applied: u64,
    /// Source revisions applied (one txn each).
    pub revisions_applied: u64,
    /// Events skipped because their revision was already there (overlaps).
    pub events_skipped: u64,
    /// Leases granted for PUTs whose lease the full snapshot did not have.
    pub leases_granted: u64,
    /// Events applied per second of replay.
    pub events_per_second: f64,
    /// Time spent replaying deltas.
    pub replay_duration: Duration,
    /// Time of the whole restore.
    pub duration: Duration,
    /// Whether the restored key space is the one etcd recorded at backup time.
    pub verification: verify::Verification,
}

/// A restore failed; the target data directory is unchanged.
#[derive(Debug, Error)]
pub enum RestoreError {
    /// Bad inputs.
    #[error("cannot restore into {data_dir}: {problem}")]
    Invalid {
        /// The target.
        data_dir: String,
        /// What is wrong.
        problem: String,
    },
    /// Local file trouble.
    #[error("restore into {data_dir}: {what}: {source}")]
    Io {
        /// The target.
        data_dir: String,
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The full snapshot could not be used.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The full snapshot's pages do not hold together ([`bolt::check`]); etcd's tools never
    /// saw it.
    #[error("{source}; nothing was changed, restore from another full snapshot")]
    FullSnapshotInvalid {
        /// The object.
        object: String,
        /// What is wrong, naming the page.
        source: bolt::BoltError,
    },
    /// The full snapshot is already past the target revision.
    #[error(
        "full snapshot {object} is at revision {full_revision}, past the target revision \
         {target}; plan the restore again to pick an older full snapshot"
    )]
    FullPastTarget {
        /// The object.
        object: String,
        /// Its revision.
        full_revision: i64,
        /// The target.
        target: i64,
    },
    /// A delta could not be fetched.
    #[error("{0}; nothing was changed, retry the restore once the object can be read")]
    Fetch(#[from] FetchError),
    /// A delta is damaged.
    #[error("{0}; the restore was abandoned, nothing was changed")]
    Delta(#[from] DeltaError),
    /// The temporary etcd failed.
    #[error(transparent)]
    TempEtcd(#[from] TempEtcdError),
    /// Replaying failed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The restored etcd did not start at the full snapshot's revision.
    #[error(
        "the temporary etcd restored from {object} starts at revision {actual}, not at the \
         snapshot's revision {expected}; something changed the data before the replay"
    )]
    StartRevision {
        /// The full snapshot.
        object: String,
        /// Its revision.
        expected: i64,
        /// What etcd reports.
        actual: i64,
    },
    /// The backups end before the target revision.
    #[error(
        "the backups end at revision {reached} ({last}), before the target revision {target}; \
         nothing was changed. Restore to revision {reached} or supply the missing delta \
         snapshots"
    )]
    TargetNotReached {
        /// The target.
        target: i64,
        /// The revision reached.
        reached: i64,
        /// The last object applied.
        last: String,
    },
    /// The restored key space is not what etcd recorded at backup time.
    #[error(
        "the restored key space at revision {} hashes to {:08x}, but etcd recorded {:08x} \
         (compaction at revision {}) when it was backed up: the backups do not reproduce the \
         data they were taken from, and nothing was changed. Keep the bucket as it is for \
         inspection; to restore it anyway, run `quorate restore --no-verify` or delete the \
         record {}",
        .0.revision, .0.restored, .0.recorded, .0.compact_revision, .0.record
    )]
    KeySpaceMismatch(verify::HashMismatch),
    /// The restored database could not be read back to verify it.
    #[error("reading the restored database to verify it failed: {message}; nothing was changed")]
    Verify {
        /// Why.
        message: String,
    },
    /// Snapshotting the replayed scratch member failed.
    #[error("snapshotting the replayed data failed: {message}; nothing was changed")]
    Snapshot {
        /// Why.
        message: String,
    },
}

/// Restores `inputs.data_dir` as `inputs.member` from the full snapshot and the deltas, up to
/// `inputs.target`. The directory is replaced only when everything succeeded.
pub async fn restore(inputs: RestoreInputs) -> Result<RestoreReport, RestoreError> {
    let started = Instant::now();
    let target_dir = inputs.data_dir.clone();
    let invalid = |problem: String| RestoreError::Invalid {
        data_dir: target_dir.display().to_string(),
        problem,
    };
    if target_dir.file_name().is_none() {
        return Err(invalid("the data directory has no name".to_string()));
    }
    if let Some(problem) = inputs.member.problem() {
        return Err(invalid(problem));
    }
    let part = swap::part_dir(&target_dir);
    let work = swap::work_dir(&target_dir);
    let io_err = |what: String| {
        let data_dir = target_dir.display().to_string();
        move |source| RestoreError::Io {
            data_dir,
            what,
            source,
        }
    };
    // Leftovers of an interrupted restore.
    swap::remove_if_exists(&part).map_err(io_err(format!("remove {}", part.display())))?;
    swap::remove_if_exists(&work).map_err(io_err(format!("remove {}", work.display())))?;
    std::fs::create_dir_all(&work).map_err(io_err(format!("create {}", work.display())))?;

    let result = build(inputs, &part, &work).await;
    let result = match result {
        Ok(mut report) => swap::swap_into_place(&part, &target_dir)
            .map_err(io_err(format!("move {} into place", part.display())))
            .map(|()| {
                report.duration = started.elapsed();
                report
            }),
        Err(e) => Err(e),
    };
    // The temporary etcd is gone by now (stopped, or killed when `build` returned).
    if result.is_err() {
        let _ = swap::remove_if_exists(&part);
    }
    let _ = swap::remove_if_exists(&work);
    result
}

/// Compares database file `db`, replayed up to `revision`, with etcd's hash recorded there.
/// The direct replay's file is checked before `snapshot restore` reads it: with a revision
/// bump, etcd's tool carries out the compaction the bump schedules, which drops history the
/// recorded hash covers.
async fn verify_file(
    db: PathBuf,
    revision: i64,
    options: &RestoreOptions,
) -> Result<verify::Verification, RestoreError> {
    if options.skip_verification {
        return Ok(verify::Verification::Skipped);
    }
    let record = options.hash_record.clone();
    let checked =
        tokio::task::spawn_blocking(move || verify::check(&db, revision, record.as_ref()))
            .await
            .expect("the hash task does not panic")
            .map_err(|e| RestoreError::Verify {
                message: e.to_string(),
            })?;
    checked.map_err(RestoreError::KeySpaceMismatch)
}

/// The database a data directory built by `snapshot restore` holds.
fn member_db(data_dir: &Path) -> PathBuf {
    data_dir.join("member").join("snap").join("db")
}

/// Builds the restored data directory in `part`.
async fn build(
    inputs: RestoreInputs,
    part: &Path,
    work: &Path,
) -> Result<RestoreReport, RestoreError> {
    let started = Instant::now();
    let RestoreInputs {
        full,
        mut deltas,
        member,
        data_dir,
        tools,
        target,
        options,
    } = inputs;
    let io_err = |what: String| {
        let data_dir = data_dir.display().to_string();
        move |source| RestoreError::Io {
            data_dir,
            what,
            source,
        }
    };
    let db = match full.source {
        FullSnapshotSource::File(path) => path,
        FullSnapshotSource::Stream(stream) => {
            let path = work.join("full.db");
            write_stream(stream, &path)
                .await
                .map_err(io_err(format!("write full snapshot {} to disk", full.name)))?;
            path
        }
    };
    // Checked by quorate's own reader first: a crafted file never reaches etcd's tools.
    {
        let (db, object) = (db.clone(), full.name.clone());
        tokio::task::spawn_blocking(move || bolt::check(&db, &object))
            .await
            .map_err(|e| RestoreError::Invalid {
                data_dir: data_dir.display().to_string(),
                problem: format!("checking the full snapshot failed: {e}"),
            })?
            .map_err(|source| RestoreError::FullSnapshotInvalid {
                object: full.name.clone(),
                source,
            })?;
    }
    // `snapshot status` reports the newest key revision, 0 for a keyspace never written to;
    // etcd's own revision starts at 1, which is what the restored member reports.
    let full_revision = tools::snapshot_revision(&tools, &db, &full.name)
        .await?
        .max(1);
    if let RestoreTarget::ToRevision(rev) = target
        && full_revision > rev
    {
        return Err(RestoreError::FullPastTarget {
            object: full.name,
            full_revision,
            target: rev,
        });
    }
    let mut report = RestoreReport {
        data_dir: data_dir.clone(),
        full_revision,
        restored_revision: full_revision,
        revision_bumped_by: 0,
        deltas_read: 0,
        deltas_applied: 0,
        events_applied: 0,
        revisions_applied: 0,
        events_skipped: 0,
        leases_granted: 0,
        events_per_second: 0.0,
        replay_duration: Duration::ZERO,
        duration: Duration::ZERO,
        verification: verify::Verification::Skipped,
    };
    let at_target = matches!(target, RestoreTarget::ToRevision(rev) if rev == full_revision);
    let first = if at_target {
        None
    } else {
        deltas.next().await.transpose()?
    };
    if first.is_none()
        && let RestoreTarget::ToRevision(rev) = target
        && rev > full_revision
    {
        return Err(RestoreError::TargetNotReached {
            target: rev,
            reached: full_revision,
            last: full.name,
        });
    }
    if options.revision_bump.is_some() && options.replay_method != ReplayMethod::Direct {
        return Err(RestoreError::Invalid {
            data_dir: data_dir.display().to_string(),
            problem: "bumping the revision needs the default replay (the database file is \
                      written directly); leave out the one-txn-per-revision replay or the bump"
                .to_string(),
        });
    }
    if first.is_none() && options.revision_bump.is_none() {
        tools::snapshot_restore(
            &tools,
            &db,
            &full.name,
            &member,
            part,
            options.skip_hash_check,
        )
        .await?;
        report.verification = verify_file(member_db(part), full_revision, &options).await?;
        return Ok(report);
    }

    let mut replay = Replay::start(&options, &tools, &db, &full.name, &member, part, work).await?;
    let replay_started = Instant::now();
    let mut replayer = match &mut replay {
        Replay::Direct { applier } => {
            Replayer::into_file(applier.take().expect("set by start"), &full.name, target)
        }
        Replay::Txn { client, .. } => {
            Replayer::start(
                (**client).clone(),
                &full.name,
                target,
                options.default_lease_ttl,
            )
            .await?
        }
    };
    if replayer.head() < full_revision {
        return Err(RestoreError::StartRevision {
            object: full.name,
            expected: full_revision,
            actual: replayer.head(),
        });
    }
    if replayer.head() > full_revision {
        // `snapshot status` reads the newest key; a compaction at a delete at the head leaves
        // no key at the head revision. etcd's own head is the snapshot's revision.
        let head = replayer.head();
        if let RestoreTarget::ToRevision(rev) = target
            && head > rev
        {
            return Err(RestoreError::FullPastTarget {
                object: full.name,
                full_revision: head,
                target: rev,
            });
        }
        tracing::info!(object = %full.name, keys_end = full_revision, head, "the snapshot's revision is etcd's head, past its newest key");
        report.full_revision = head;
        report.restored_revision = head;
    }
    let mut last_object = full.name.clone();
    let tell = |objects_done: u64, stats: ReplayStats| {
        if let Some(sink) = &options.progress {
            sink.report(progress::RestoreProgress {
                objects_done,
                events_done: stats.events_applied + stats.events_skipped,
                elapsed: started.elapsed(),
                ..progress::RestoreProgress::default()
            });
        }
    };
    tell(1, replayer.stats());
    let mut decoded = decode_ahead(first, deltas);
    while let Some(object) = decoded.recv().await {
        let (name, events) = object?;
        report.deltas_read += 1;
        let outcome = replayer.apply_delta(&name, events).await?;
        if outcome.events_taken > 0 {
            report.deltas_applied += 1;
            last_object = name;
        }
        tell(1 + report.deltas_read, replayer.stats());
        if replayer.done() {
            break;
        }
    }
    drop(decoded);
    let (stats, written) = replayer.finish().await?;
    // Again with the last revision, which stays buffered until the end.
    tell(1 + report.deltas_read, stats);
    report.replay_duration = replay_started.elapsed();
    report.restored_revision = written.as_ref().map_or(stats.head_revision, |w| w.1);
    report.revision_bumped_by = (report.restored_revision - stats.head_revision) as u64;
    report.events_applied = stats.events_applied;
    report.revisions_applied = stats.revisions_applied;
    report.events_skipped = stats.events_skipped;
    report.leases_granted = stats.leases_granted;
    report.events_per_second =
        stats.events_applied as f64 / report.replay_duration.as_secs_f64().max(1e-9);
    if let RestoreTarget::ToRevision(rev) = target
        && stats.head_revision < rev
    {
        return Err(RestoreError::TargetNotReached {
            target: rev,
            reached: stats.head_revision,
            last: last_object,
        });
    }
    let label = format!("{} replayed to revision {}", full.name, stats.head_revision);
    if let Some((file, _)) = &written {
        report.verification = verify_file(file.clone(), stats.head_revision, &options).await?;
    }
    let direct = written.is_some();
    replay
        .finish(&tools, &label, &member, part, work, written)
        .await?;
    if !direct {
        report.verification = verify_file(member_db(part), stats.head_revision, &options).await?;
    }
    Ok(report)
}

/// The scratch member's name in a replay that runs apart from the real identity.
const SCRATCH_NAME: &str = "quorate-restore";

/// Where and how the deltas are replayed.
enum Replay {
    /// Into a new database file written beside the work directory's other files.
    Direct { applier: Option<DirectApplier> },
    /// Through a running etcd's API: on the real directory for a single member, else on a
    /// single-member scratch copy.
    Txn {
        etcd: TempEtcd,
        client: Box<etcd_client::Client>,
        single: bool,
        no_fsync: bool,
    },
}

impl Replay {
    /// Restores the full snapshot where the replay runs and prepares it.
    async fn start(
        options: &RestoreOptions,
        tools: &EtcdTools,
        db: &Path,
        full_name: &str,
        member: &MemberIdentity,
        part: &Path,
        work: &Path,
    ) -> Result<Replay, RestoreError> {
        if options.replay_method == ReplayMethod::Direct {
            let (db, name, out) = (
                db.to_path_buf(),
                full_name.to_string(),
                work.join("replayed.db"),
            );
            let (skip, ttl, bump) = (
                options.skip_hash_check,
                options.default_lease_ttl,
                options.revision_bump,
            );
            // Reading and copying the whole snapshot is blocking file work.
            let applier = tokio::task::spawn_blocking(move || {
                DirectApplier::start(&db, &name, &out, skip, ttl, bump)
            })
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
            return Ok(Replay::Direct {
                applier: Some(applier),
            });
        }
        let scratch_dir = work.join("replay");
        let scratch_peer = "http://127.0.0.1:2380";
        let single = member.cluster_size() == 1;
        let (dir, identity) = if single {
            (part.to_path_buf(), member.clone())
        } else {
            (
                scratch_dir,
                MemberIdentity {
                    name: SCRATCH_NAME.to_string(),
                    peer_urls: vec![scratch_peer.to_string()],
                    initial_cluster: format!("{SCRATCH_NAME}={scratch_peer}"),
                    cluster_token: SCRATCH_NAME.to_string(),
                },
            )
        };
        tools::snapshot_restore(
            tools,
            db,
            full_name,
            &identity,
            &dir,
            options.skip_hash_check,
        )
        .await?;
        let mut config =
            TempEtcdConfig::new(&tools.etcd, &dir, &identity.name, &work.join("etcd.log"));
        config.quota_backend_bytes = options.quota_backend_bytes;
        config.start_timeout = options.etcd_start_timeout;
        config.no_fsync = tools::etcd_version(&tools.etcd)
            .await
            .is_some_and(|version| version >= (3, 5));
        let no_fsync = config.no_fsync;
        let (etcd, client) = TempEtcd::start(config).await?;
        Ok(Replay::Txn {
            etcd,
            client: Box::new(client),
            single,
            no_fsync,
        })
    }

    /// Leaves the replayed data in `part` as `member` (`written`: the database file a direct
    /// replay wrote).
    async fn finish(
        self,
        tools: &EtcdTools,
        label: &str,
        member: &MemberIdentity,
        part: &Path,
        work: &Path,
        written: Option<(PathBuf, i64)>,
    ) -> Result<(), RestoreError> {
        let sync_err = |source| RestoreError::Io {
            data_dir: part.display().to_string(),
            what: format!("sync {}", part.display()),
            source,
        };
        match self {
            Replay::Direct { .. } => {
                let (db, _) = written.expect("a direct replay writes a database file");
                // The file carries no integrity hash; it was checked as it was written.
                tools::snapshot_restore(tools, &db, label, member, part, true).await?;
            }
            Replay::Txn {
                etcd,
                no_fsync,
                single: true,
                ..
            } => {
                etcd.stop().await?;
                if no_fsync {
                    swap::sync_tree(part).map_err(sync_err)?;
                }
            }
            Replay::Txn { etcd, client, .. } => {
                let replayed = work.join("replayed.db");
                snapshot_to_file(*client, &replayed).await?;
                etcd.stop().await?;
                tools::snapshot_restore(tools, &replayed, label, member, part, false).await?;
            }
        }
        Ok(())
    }
}

/// Delta objects decoded ahead of the replay, in order.
type Decoded = tokio::sync::mpsc::Receiver<Result<(String, Vec<DeltaEvent>), RestoreError>>;

/// Fetches and decodes the deltas (`first`, then the rest of `deltas`) on a task of their own,
/// one object ahead of the replay: downloading, decompressing, checking and decoding the next
/// object overlaps with applying this one, and at most three objects are held at once (one
/// applied, one waiting, one being decoded). Dropping the receiver stops the task.
fn decode_ahead(first: Option<DeltaObject>, mut deltas: DeltaStream) -> Decoded {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        let mut next = first.map(Ok);
        while let Some(object) = next.take() {
            let decoded = match object {
                Ok(DeltaObject {
                    name,
                    content: DeltaContent::Raw(bytes),
                }) => tokio::task::spawn_blocking(move || {
                    delta::decode(&name, &bytes).map(|events| (name, events))
                })
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
                .map_err(RestoreError::from),
                Ok(DeltaObject {
                    name,
                    content: DeltaContent::Events(events),
                }) => Ok((name, events)),
                Err(e) => Err(RestoreError::from(e)),
            };
            let failed = decoded.is_err();
            if tx.send(decoded).await.is_err() || failed {
                return;
            }
            next = deltas.next().await;
        }
    });
    rx
}

/// Writes a byte stream to a new file and syncs it.
async fn write_stream(
    mut stream: impl Stream<Item = std::io::Result<Bytes>> + Unpin,
    path: &Path,
) -> std::io::Result<()> {
    let mut file = tokio::fs::File::create(path).await?;
    while let Some(chunk) = stream.next().await {
        file.write_all(&chunk?).await?;
    }
    file.flush().await?;
    file.sync_all().await
}

/// Streams a snapshot of the etcd behind `client` to `path`.
async fn snapshot_to_file(
    mut client: etcd_client::Client,
    path: &Path,
) -> Result<(), RestoreError> {
    let err = |message: String| RestoreError::Snapshot { message };
    let mut stream = client
        .snapshot()
        .await
        .map_err(|e| err(format!("starting the snapshot: {e}")))?;
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| err(format!("create {}: {e}", path.display())))?;
    while let Some(message) = stream
        .message()
        .await
        .map_err(|e| err(format!("receiving the snapshot: {e}")))?
    {
        file.write_all(message.blob())
            .await
            .map_err(|e| err(format!("write {}: {e}", path.display())))?;
    }
    file.sync_all()
        .await
        .map_err(|e| err(format!("sync {}: {e}", path.display())))
}
