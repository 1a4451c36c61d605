//! Full snapshots of the member, by quorate ([`save_to_file`]) and by `etcdctl snapshot save`,
//! and the upload of a saved snapshot into a snapshot store, measured apart from the snapshot.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use quorate_api::{CompressionPolicy, StoreSpec};
use quorate_backup::layout::SnapshotName;
use quorate_backup::snapshotter::{SavedSnapshot, full_snapshot, save_to_file};
use quorate_backup::store::{SnapStore, StoreOptions, StoredSnapshot};
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::etcdctl_binary;
use tokio::io::AsyncReadExt;

use crate::error::{BenchError, Result};

/// Read size when streaming a file into the store.
const READ_CHUNK: usize = 1 << 20;

/// `quorate`'s full snapshot into `path`: a fresh client (its connection is made inside the
/// measured time, as etcdctl's is), then [`save_to_file`].
pub async fn save_quorate(url: &str, path: &Path) -> Result<(Duration, SavedSnapshot)> {
    let started = Instant::now();
    let client = MemberClient::connect(url, None, EtcdTimeouts::default()).await?;
    let saved = save_to_file(&client, path)
        .await
        .map_err(|e| BenchError::failed(format!("quorate full snapshot: {e}")))?;
    Ok((started.elapsed(), saved))
}

/// `etcdctl snapshot save <path>`; returns the time and the file's size.
pub async fn save_etcdctl(url: &str, path: &Path) -> Result<(Duration, u64)> {
    let started = Instant::now();
    run_etcdctl(&[
        format!("--endpoints={url}"),
        "--dial-timeout=3s".to_string(),
        // etcdctl 3.4 bounds `snapshot save` by the command timeout (5 s by default).
        "--command-timeout=600s".to_string(),
        "snapshot".to_string(),
        "save".to_string(),
        path.display().to_string(),
    ])
    .await?;
    let elapsed = started.elapsed();
    let size = std::fs::metadata(path)
        .map_err(BenchError::io("read the size of", path))?
        .len();
    Ok((elapsed, size))
}

/// Runs etcdctl (API v3, no other `ETCDCTL_*` settings) and fails with its output unless it
/// succeeds.
pub async fn run_etcdctl(args: &[String]) -> Result<String> {
    let output = tokio::process::Command::new(etcdctl_binary())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ETCDCTL_API", "3")
        .kill_on_drop(true)
        .output()
        .await
        .map_err(BenchError::io("run", &etcdctl_binary()))?;
    if !output.status.success() {
        return Err(BenchError::failed(format!(
            "`etcdctl {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A `Local` snapshot store in `root/<container>/bench/v2/`.
pub fn local_store(root: &Path, container: &str) -> Result<SnapStore> {
    let spec = StoreSpec {
        container: Some(container.to_string()),
        prefix: "bench".to_string(),
        provider: Some("Local".to_string()),
        ..StoreSpec::default()
    };
    let options = StoreOptions {
        local_root: root.to_path_buf(),
        secret_dir: None,
        encryption_keys: None,
    };
    SnapStore::open(&spec, &options)
        .map_err(|e| BenchError::failed(format!("opening a local snapshot store: {e}")))
}

/// The file as a stream of 1 MiB chunks.
async fn file_stream(
    path: &Path,
) -> Result<impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(BenchError::io("open", path))?;
    Ok(Box::pin(futures::stream::try_unfold(
        file,
        |mut file| async move {
            let mut buf = Vec::with_capacity(READ_CHUNK);
            let n = (&mut file)
                .take(READ_CHUNK as u64)
                .read_to_end(&mut buf)
                .await?;
            Ok((n > 0).then(|| (Bytes::from(buf), file)))
        },
    )))
}

/// Uploads the saved snapshot `path` (of `revision`) to `store` as a full snapshot with
/// `compression`; returns the time and what was stored, then deletes the object again.
pub async fn upload_file(
    store: &SnapStore,
    path: &Path,
    revision: i64,
    compression: Option<CompressionPolicy>,
) -> Result<(Duration, StoredSnapshot)> {
    let name = SnapshotName::full(revision, jiff::Timestamp::now().as_second(), compression);
    let started = Instant::now();
    let body = file_stream(path).await?;
    let stored = store
        .upload(&name, body)
        .await
        .map_err(|e| BenchError::failed(format!("uploading {}: {e}", name.file_name())))?;
    let elapsed = started.elapsed();
    delete(store, &stored).await?;
    Ok((elapsed, stored))
}

/// What the agent does: a full snapshot streamed from etcd straight into the store with gzip,
/// never touching a local file. Returns the time, the snapshot's size and what was stored.
pub async fn stream_to_store(
    url: &str,
    store: &SnapStore,
) -> Result<(Duration, u64, StoredSnapshot)> {
    let started = Instant::now();
    let client = MemberClient::connect(url, None, EtcdTimeouts::default()).await?;
    let snapshot = full_snapshot(&client)
        .await
        .map_err(|e| BenchError::failed(format!("quorate full snapshot: {e}")))?;
    let name = SnapshotName::full(
        snapshot.revision,
        jiff::Timestamp::now().as_second(),
        Some(CompressionPolicy::Gzip),
    );
    let total = Arc::new(AtomicU64::new(0));
    let counted = {
        let total = total.clone();
        snapshot.stream.inspect_ok(move |chunk| {
            total.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        })
    };
    let stored = store
        .upload(&name, counted)
        .await
        .map_err(|e| BenchError::failed(format!("uploading {}: {e}", name.file_name())))?;
    let elapsed = started.elapsed();
    delete(store, &stored).await?;
    let size = total.load(Ordering::SeqCst);
    Ok((elapsed, size, stored))
}

async fn delete(store: &SnapStore, stored: &StoredSnapshot) -> Result<()> {
    store
        .delete(stored)
        .await
        .map_err(|e| BenchError::failed(format!("deleting {}: {e}", stored.path)))
}

/// `dir/<name>`, with any file of that name removed first.
pub fn fresh_file(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(BenchError::io("remove", &path)(e)),
    }
}
