//! Restoring a member's data directory from a full snapshot and the delta snapshots after it.
//!
//! One pipeline, one step per module, in this order:
//!
//! 1. **fetch** ([`fetch`]): the full snapshot onto local disk and its revision read; the
//!    deltas fetched and decoded one object ahead of the replay (at most three deltas' events
//!    are in memory). Downloading and decompressing is the caller's job: the full snapshot
//!    comes as a file or a byte stream, the deltas as a stream of objects in plan order.
//! 2. **plan** ([`plan`], pure): the newest full snapshot at or before the target and the chain
//!    of deltas after it, tolerating overlaps, refusing gaps; how far to raise the revision of
//!    a point-in-time restore ([`plan::revision_bump`]); and what to do when the full snapshot,
//!    once read, holds more than its name says ([`plan::full_fits`],
//!    [`plan::replan_past_full`]).
//! 3. **replay** ([`replay`]): groups the deltas' events into source revisions, skips what is
//!    already applied, stops at the target, and hands each revision to an [`Applier`] — the
//!    only place the [`ReplayMethod`] is looked at is where the applier is created. By default
//!    ([`ReplayMethod::Direct`], [`direct`], [`bolt`]) a new database file is written directly:
//!    no etcd runs until the restored member starts. The fallback ([`ReplayMethod::Txn`],
//!    [`txn`]) sends one txn per source revision through a temporary etcd.
//! 4. **finish** ([`Applier::finish`], [`finish`]): the replayed data becomes the member's data
//!    directory in `<dir>.part` with etcd's own tool (`etcdutl`/`etcdctl snapshot restore`,
//!    [`tools`]) and is checked against the hash etcd recorded at backup time ([`verify`]);
//!    only then is it swapped into place ([`swap`]). Any failure leaves the target directory
//!    exactly as it was.
//!
//! A new step goes into the module of the stage it belongs to and is called from [`restore`]'s
//! `build`; a new way of applying revisions implements [`Applier`].

pub mod apply;
pub mod bolt;
pub mod direct;
mod fetch;
mod finish;
pub mod leases;
pub mod plan;
pub mod progress;
pub mod proto;
pub mod replay;
pub mod swap;
pub mod temp_etcd;
pub mod tools;
pub mod txn;
pub mod verify;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use thiserror::Error;

pub use apply::{Applier, Landed, Landing, Pending};
pub use direct::DirectApplier;
pub use plan::{Listed, PlanError, PlannedDelta, RestorePlan, RestoreTarget, plan_restore};
pub use replay::{
    DEFAULT_LEASE_TTL, DeltaOutcome, ReplayError, ReplayMethod, ReplayStats, Replayer,
};
pub use temp_etcd::{DEFAULT_QUOTA_BACKEND_BYTES, TempEtcd, TempEtcdConfig, TempEtcdError};
pub use tools::{EtcdTools, MemberIdentity, ToolError};
pub use txn::TxnApplier;

use crate::delta::{DeltaError, DeltaEvent};

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
    /// The decompressed object whose SHA-256 the caller verified as it streamed
    /// ([`crate::delta::check_streamed`]): decoded without hashing it again.
    Checked(Bytes),
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
    /// The full snapshot's integrity hash (the SHA-256 etcd appends) is missing or does not
    /// match; checked as the bytes reached the disk, before anything read the file.
    #[error(
        "full snapshot {object}: {problem}; nothing was changed, restore from another full snapshot"
    )]
    FullSnapshotDamaged {
        /// The object.
        object: String,
        /// What is wrong.
        problem: String,
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
    Fetch(FetchError),
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

impl From<FetchError> for RestoreError {
    /// A delta whose bytes failed their checksum as they streamed is damaged, not unreadable:
    /// reported as such ([`RestoreError::Delta`]), whoever fetched it.
    fn from(e: FetchError) -> RestoreError {
        match e.source.downcast::<DeltaError>() {
            Ok(delta) => RestoreError::Delta(*delta),
            Err(source) => RestoreError::Fetch(FetchError {
                object: e.object,
                source,
            }),
        }
    }
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

/// Builds the restored data directory in `part`: the pipeline's steps in order.
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
    // Fetch: the full snapshot on disk, and the revision it holds.
    let full_name = full.name.clone();
    let db = fetch::full_to_disk(full, work, &data_dir, options.skip_hash_check).await?;
    // Checked by quorate's own reader first: a crafted file never reaches etcd's tools.
    {
        let (db, object) = (db.clone(), full_name.clone());
        tokio::task::spawn_blocking(move || bolt::check(&db, &object))
            .await
            .map_err(|e| RestoreError::Invalid {
                data_dir: data_dir.display().to_string(),
                problem: format!("checking the full snapshot failed: {e}"),
            })?
            .map_err(|source| RestoreError::FullSnapshotInvalid {
                object: full_name.clone(),
                source,
            })?;
    }
    // `snapshot status` reports the newest key revision, 0 for a keyspace never written to;
    // etcd's own revision starts at 1, which is what the restored member reports.
    let full_revision = tools::snapshot_revision(&tools, &db, &full_name)
        .await?
        .max(1);
    check_full(&full_name, full_revision, target)?;
    let mut report = RestoreReport::start(data_dir.clone(), full_revision);
    // Plan what is left to do: nothing past the full snapshot, or a replay.
    let first = if matches!(target, RestoreTarget::ToRevision(rev) if rev == full_revision) {
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
            last: full_name,
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
            &full_name,
            &member,
            part,
            options.skip_hash_check,
        )
        .await?;
        report.verification =
            finish::verify_file(finish::member_db(part), full_revision, &options).await?;
        return Ok(report);
    }
    // Replay, through the applier the method names (the only place it is looked at), and
    // finish.
    let run = Run {
        started,
        full_name: &full_name,
        target,
        tools: &tools,
        member: &member,
        part,
        work,
        options: &options,
    };
    let deltas = fetch::decode_ahead(first, deltas);
    match options.replay_method {
        ReplayMethod::Direct => {
            let applier = DirectApplier::open(&options, &db, &full_name, work).await?;
            replay(applier, &run, deltas, report).await
        }
        ReplayMethod::Txn => {
            let applier =
                TxnApplier::start(&options, &tools, &db, &full_name, &member, part, work).await?;
            replay(applier, &run, deltas, report).await
        }
    }
}

/// A full snapshot read past a point-in-time target cannot start the restore
/// ([`plan::full_fits`]); the caller plans again ([`plan::replan_past_full`]).
fn check_full(object: &str, full_revision: i64, target: RestoreTarget) -> Result<(), RestoreError> {
    match target {
        RestoreTarget::ToRevision(rev) if !plan::full_fits(target, full_revision) => {
            Err(RestoreError::FullPastTarget {
                object: object.to_string(),
                full_revision,
                target: rev,
            })
        }
        _ => Ok(()),
    }
}

impl RestoreReport {
    /// The report of a restore starting from a full snapshot at `full_revision`.
    fn start(data_dir: PathBuf, full_revision: i64) -> RestoreReport {
        RestoreReport {
            data_dir,
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
        }
    }
}

/// What the replay step needs besides the applier and the deltas.
struct Run<'a> {
    started: Instant,
    full_name: &'a str,
    target: RestoreTarget,
    tools: &'a EtcdTools,
    member: &'a MemberIdentity,
    part: &'a Path,
    work: &'a Path,
    options: &'a RestoreOptions,
}

/// Replays the decoded deltas through `applier`, checks the target was reached, and has the
/// applier leave the data in `run.part`.
async fn replay<A: Applier>(
    applier: A,
    run: &Run<'_>,
    mut decoded: fetch::Decoded,
    mut report: RestoreReport,
) -> Result<RestoreReport, RestoreError> {
    let (full_name, target) = (run.full_name, run.target);
    let full_revision = report.full_revision;
    let replay_started = Instant::now();
    let mut replayer = Replayer::new(applier, full_name, target);
    if replayer.head() < full_revision {
        return Err(RestoreError::StartRevision {
            object: full_name.to_string(),
            expected: full_revision,
            actual: replayer.head(),
        });
    }
    if replayer.head() > full_revision {
        // `snapshot status` reads the newest key; a compaction at a delete at the head leaves
        // no key at the head revision. etcd's own head is the snapshot's revision.
        let head = replayer.head();
        check_full(full_name, head, target)?;
        tracing::info!(object = %full_name, keys_end = full_revision, head, "the snapshot's revision is etcd's head, past its newest key");
        report.full_revision = head;
        report.restored_revision = head;
    }
    let mut last_object = full_name.to_string();
    let tell = |objects_done: u64, stats: ReplayStats| {
        if let Some(sink) = &run.options.progress {
            sink.report(progress::RestoreProgress {
                objects_done,
                events_done: stats.events_applied + stats.events_skipped,
                elapsed: run.started.elapsed(),
                ..progress::RestoreProgress::default()
            });
        }
    };
    tell(1, replayer.stats());
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
    let (stats, applier) = replayer.finish().await?;
    // Again with the last revision, which stays buffered until the end.
    tell(1 + report.deltas_read, stats);
    report.replay_duration = replay_started.elapsed();
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
    let label = format!("{full_name} replayed to revision {}", stats.head_revision);
    let landing = Landing {
        tools: run.tools,
        label: &label,
        member: run.member,
        part: run.part,
        work: run.work,
        options: run.options,
    };
    let landed = applier.finish(&landing, stats.head_revision).await?;
    report.restored_revision = landed.restored_revision;
    report.revision_bumped_by = (landed.restored_revision - stats.head_revision) as u64;
    report.verification = landed.verification;
    Ok(report)
}
