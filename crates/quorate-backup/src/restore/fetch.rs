//! The pipeline's first step: the full snapshot onto local disk, and the delta objects fetched
//! and decoded one ahead of the replay. Downloading and decompressing is the caller's job (the
//! [`super::DeltaStream`]); this turns what it hands over into files and events.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use super::RestoreError;
use super::{DeltaContent, DeltaObject, DeltaStream, FullSnapshotInput, FullSnapshotSource};
use crate::delta::{self, DeltaEvent};
use crate::trailer::{TRAILER_LEN, TrailingSha256};

/// The full snapshot as a local file: the caller's file as it is, or a stream written to
/// `work/full.db`. Unless `skip_hash_check`, its integrity hash (the SHA-256 etcd appends to
/// a snapshot) is verified here, before anything reads the file: a stream's as its bytes
/// reach the disk, a file's in one read.
pub(crate) async fn full_to_disk(
    full: FullSnapshotInput,
    work: &Path,
    data_dir: &Path,
    skip_hash_check: bool,
) -> Result<PathBuf, RestoreError> {
    let damaged = |problem: String| RestoreError::FullSnapshotDamaged {
        object: full.name.clone(),
        problem,
    };
    match full.source {
        FullSnapshotSource::File(path) => {
            if !skip_hash_check {
                let file = path.clone();
                let hashed = tokio::task::spawn_blocking(move || hash_file(&file))
                    .await
                    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
                    .map_err(|source| RestoreError::Io {
                        data_dir: data_dir.display().to_string(),
                        what: format!("read full snapshot {}", path.display()),
                        source,
                    })?;
                check_snapshot_hash(hashed).map_err(damaged)?;
            }
            Ok(path)
        }
        FullSnapshotSource::Stream(stream) => {
            let path = work.join("full.db");
            let hashed = write_stream(stream, &path)
                .await
                .map_err(|source| RestoreError::Io {
                    data_dir: data_dir.display().to_string(),
                    what: format!("write full snapshot {} to disk", full.name),
                    source,
                })?;
            if !skip_hash_check {
                check_snapshot_hash(hashed).map_err(damaged)?;
            }
            Ok(path)
        }
    }
}

/// A snapshot from etcd ends in the SHA-256 of what precedes it (its size is then 32 more than
/// a multiple of 512); a copied database file has none, and is refused unless the caller skips
/// the check, as `etcdctl snapshot restore` does.
fn check_snapshot_hash(hashed: TrailingSha256) -> Result<(), String> {
    if hashed.len() % 512 != TRAILER_LEN as u64 {
        return Err(format!(
            "it has no integrity hash ({} bytes; a database file copied from a data directory, \
             or truncated?); a copied database file restores only with the hash check skipped",
            hashed.len()
        ));
    }
    if !hashed.matches() {
        return Err(
            "its integrity hash (SHA-256) does not match its content: the object was damaged \
             or altered"
                .to_string(),
        );
    }
    Ok(())
}

/// A local file read once through [`TrailingSha256`].
fn hash_file(path: &Path) -> std::io::Result<TrailingSha256> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hashed = TrailingSha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hashed);
        }
        hashed.update(&buf[..n]);
    }
}

/// Delta objects decoded ahead of the replay, in order.
pub(crate) type Decoded =
    tokio::sync::mpsc::Receiver<Result<(String, Vec<DeltaEvent>), RestoreError>>;

/// Fetches and decodes the deltas (`first`, then the rest of `deltas`) on a task of their own,
/// one object ahead of the replay: downloading, decompressing, checking and decoding the next
/// object overlaps with applying this one, and at most three objects are held at once (one
/// applied, one waiting, one being decoded). Dropping the receiver stops the task.
pub(crate) fn decode_ahead(first: Option<DeltaObject>, mut deltas: DeltaStream) -> Decoded {
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
                    content: DeltaContent::Checked(bytes),
                }) => tokio::task::spawn_blocking(move || {
                    delta::decode_checked(&name, &bytes).map(|events| (name, events))
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

/// Writes a byte stream to a new file and syncs it, hashing it on the way.
async fn write_stream(
    mut stream: impl Stream<Item = std::io::Result<Bytes>> + Unpin,
    path: &Path,
) -> std::io::Result<TrailingSha256> {
    let mut file = tokio::fs::File::create(path).await?;
    let mut hashed = TrailingSha256::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        hashed.update(&chunk);
        file.write_all(&chunk).await?;
    }
    file.flush().await?;
    file.sync_all().await?;
    Ok(hashed)
}
