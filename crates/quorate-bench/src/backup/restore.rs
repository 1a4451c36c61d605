//! Restores of the full snapshot by quorate ([`restore`]) and by `etcdctl snapshot restore`,
//! and the replay of delta snapshots captured from the member after that snapshot.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use quorate_backup::layout::SnapshotKind;
use quorate_backup::restore::{
    DeltaContent, DeltaObject, DeltaStream, EtcdTools, FetchError, FullSnapshotInput,
    FullSnapshotSource, MemberIdentity, ReplayMethod, RestoreInputs, RestoreOptions, RestoreReport,
    RestoreTarget, deltas_from_iter, restore,
};
use quorate_backup::store::{SnapStore, StoredSnapshot};
use quorate_testkit::{etcd_binary, etcdctl_binary};

use super::snapshot::run_etcdctl;
use crate::error::{BenchError, Result};

const NAME: &str = "bench-restored";
const PEER_URL: &str = "http://127.0.0.1:2380";
const TOKEN: &str = "quorate-bench-restore";

/// The member both restores restore as.
fn identity() -> MemberIdentity {
    MemberIdentity {
        name: NAME.to_string(),
        peer_urls: vec![PEER_URL.to_string()],
        initial_cluster: format!("{NAME}={PEER_URL}"),
        cluster_token: TOKEN.to_string(),
    }
}

/// The default etcd tools (those the tests use: etcd 3.4 unless overridden).
pub fn default_tools() -> EtcdTools {
    EtcdTools::new(etcd_binary(), etcdctl_binary())
}

/// etcd 3.5's tools where `scripts/install-deps.sh` puts them, when present: the replay
/// baseline runs on them with `--unsafe-no-fsync`, as etcd-backup-restore runs today.
pub fn etcd35_tools() -> Option<EtcdTools> {
    let etcd = quorate_etcd::binaries::EtcdBinaries::default()
        .etcd(quorate_api::EtcdVersion::V3_5)
        .ok()?;
    let etcdctl = etcd.parent()?.join("etcdctl");
    etcdctl.is_file().then(|| EtcdTools::new(&etcd, etcdctl))
}

fn inputs(snapshot: &Path, deltas: DeltaStream, data_dir: &Path) -> RestoreInputs {
    RestoreInputs {
        full: FullSnapshotInput {
            name: snapshot
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            source: FullSnapshotSource::File(snapshot.to_path_buf()),
        },
        deltas,
        member: identity(),
        data_dir: data_dir.to_path_buf(),
        tools: default_tools(),
        target: RestoreTarget::Latest,
        options: RestoreOptions::default(),
    }
}

/// quorate's restore of `snapshot` alone (no deltas) into the new directory `data_dir`.
pub async fn restore_quorate(snapshot: &Path, data_dir: &Path) -> Result<Duration> {
    let started = Instant::now();
    restore(inputs(snapshot, deltas_from_iter([]), data_dir))
        .await
        .map_err(|e| BenchError::failed(format!("quorate restore: {e}")))?;
    Ok(started.elapsed())
}

/// `etcdctl snapshot restore` of `snapshot` into the new directory `data_dir`, as the same
/// member.
pub async fn restore_etcdctl(snapshot: &Path, data_dir: &Path) -> Result<Duration> {
    let started = Instant::now();
    run_etcdctl(&[
        "snapshot".to_string(),
        "restore".to_string(),
        snapshot.display().to_string(),
        format!("--name={NAME}"),
        format!("--data-dir={}", data_dir.display()),
        format!("--initial-cluster={NAME}={PEER_URL}"),
        format!("--initial-cluster-token={TOKEN}"),
        format!("--initial-advertise-peer-urls={PEER_URL}"),
    ])
    .await?;
    Ok(started.elapsed())
}

/// `etcdctl snapshot status` of `snapshot`: the step quorate's restore runs before
/// `snapshot restore` to learn the snapshot's revision.
pub async fn status_etcdctl(snapshot: &Path) -> Result<Duration> {
    let started = Instant::now();
    run_etcdctl(&[
        "snapshot".to_string(),
        "status".to_string(),
        snapshot.display().to_string(),
        "--write-out=json".to_string(),
    ])
    .await?;
    Ok(started.elapsed())
}

/// The delta snapshots in `store`, in order.
async fn delta_objects(store: &SnapStore) -> Result<Vec<StoredSnapshot>> {
    Ok(store
        .list()
        .await
        .map_err(|e| BenchError::failed(format!("listing the delta snapshots: {e}")))?
        .into_iter()
        .filter(|s| s.name.kind == SnapshotKind::Incr)
        .collect())
}

/// One object's decompressed bytes.
async fn fetch(
    store: &SnapStore,
    object: &StoredSnapshot,
) -> std::result::Result<Bytes, Box<dyn std::error::Error + Send + Sync>> {
    let mut body = store.download(object).await?;
    let mut data = Vec::new();
    while let Some(chunk) = body.next().await {
        data.extend_from_slice(&chunk?);
    }
    Ok(Bytes::from(data))
}

/// quorate's restore of `snapshot` plus every delta snapshot in `store`, downloaded and
/// decompressed one at a time while the replay runs, as a restore from a bucket does.
pub async fn restore_with_deltas(
    snapshot: &Path,
    store: &SnapStore,
    data_dir: &Path,
    method: ReplayMethod,
    tools: EtcdTools,
    hash_record: Option<quorate_backup::store::HashRecord>,
) -> Result<RestoreReport> {
    let objects = delta_objects(store).await?;
    let store = store.clone();
    let deltas: DeltaStream = futures::stream::iter(objects)
        .then(move |object| {
            let store = store.clone();
            async move {
                let data = fetch(&store, &object).await.map_err(|source| FetchError {
                    object: object.path.clone(),
                    source,
                })?;
                Ok(DeltaObject {
                    name: object.name.file_name(),
                    content: DeltaContent::Raw(data),
                })
            }
        })
        .boxed();
    let mut inputs = inputs(snapshot, deltas, data_dir);
    inputs.options.replay_method = method;
    inputs.options.hash_record = hash_record;
    inputs.tools = tools;
    restore(inputs)
        .await
        .map_err(|e| BenchError::failed(format!("quorate restore with deltas ({method:?}): {e}")))
}

/// Resets this process's peak resident set size (`/proc/self/clear_refs`), so
/// [`peak_rss_bytes`] reports the peak of what runs after.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// This process's peak resident set size since start or the last [`reset_peak_rss`]
/// (`VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How long downloading, decompressing and decoding every delta in `store` takes, without
/// applying anything: the part of the replay that is not etcd.
pub async fn fetch_and_decode(store: &SnapStore) -> Result<Duration> {
    let started = Instant::now();
    for object in delta_objects(store).await? {
        let data = fetch(store, &object)
            .await
            .map_err(|e| BenchError::failed(format!("fetching {}: {e}", object.path)))?;
        quorate_backup::delta::decode(&object.path, &data)
            .map_err(|e| BenchError::failed(format!("decoding {}: {e}", object.path)))?;
    }
    Ok(started.elapsed())
}

/// `dir/<name>`, removed first if it exists (the restores want a new directory).
pub fn fresh_dir(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    remove_dir(&path)?;
    Ok(path)
}

/// Removes a directory tree; a missing one is fine.
pub fn remove_dir(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(BenchError::io("remove", path)(e)),
    }
}

/// How long computing etcd's `HashKV` over the database restored in `data_dir` takes: the
/// restore's verification, measured apart.
pub fn time_verification(
    data_dir: &Path,
    record: &quorate_backup::store::HashRecord,
) -> Result<Duration> {
    use quorate_backup::restore::verify::{self, Verification};
    let db = data_dir.join("member").join("snap").join("db");
    let started = Instant::now();
    let checked = verify::check(&db, record.revision, Some(record))
        .map_err(|e| BenchError::failed(format!("hashing {}: {e}", db.display())))?;
    match checked {
        Ok(Verification::Verified { .. }) => Ok(started.elapsed()),
        other => Err(BenchError::failed(format!(
            "the restored database does not verify: {other:?}"
        ))),
    }
}
