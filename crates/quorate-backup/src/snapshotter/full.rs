//! Full snapshots: the member's whole database, streamed from etcd's `Maintenance.Snapshot`
//! without ever being held in memory, and checked against the SHA-256 etcd appends.
//!
//! Like etcd-backup-restore, the head revision is read *before* the snapshot call; the two are
//! not atomic (etcd#9037), so the database may be slightly ahead of the revision. Deltas start
//! at `revision + 1`, and a restore skips the events the database already holds.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;

use bytes::Bytes;
use futures::Stream;
use quorate_etcd::{EtcdError, MemberClient, SnapshotStream};
use tokio::sync::mpsc;

use super::error::CaptureError;
use super::hash::TrailerCheck;

/// The bytes of a snapshot: etcd's database followed by its 32-byte SHA-256, the format
/// `etcdctl snapshot save` writes and `etcdctl snapshot restore` reads. A damaged or truncated
/// download ends with an [`io::ErrorKind::InvalidData`] error instead of a clean end, so an
/// uploader aborts rather than storing it.
pub type SnapshotBytes = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// A full snapshot being streamed.
pub struct FullSnapshot {
    /// Head revision read just before the snapshot call; the data may be slightly ahead.
    pub revision: i64,
    /// The snapshot data, chunk by chunk as etcd sends it.
    pub stream: SnapshotBytes,
}

impl std::fmt::Debug for FullSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullSnapshot")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// Starts a full snapshot of `client`'s member.
pub async fn full_snapshot(client: &MemberClient) -> Result<FullSnapshot, CaptureError> {
    let (revision, stream) = start(client).await?;
    let endpoint = client.endpoint().to_string();
    Ok(FullSnapshot {
        revision,
        stream: Box::pin(checked_stream(stream, endpoint)),
    })
}

/// A snapshot written to a file by [`save_to_file`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedSnapshot {
    /// Head revision read just before the snapshot call; the data may be slightly ahead.
    pub revision: i64,
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes (database plus the 32-byte trailer).
    pub size: u64,
}

/// Chunks in flight between the network task and the file writer: 64 × etcd's 32 KiB.
const WRITE_QUEUE: usize = 64;
/// Write buffer of the file writer, so the disk sees large writes.
const WRITE_BUFFER: usize = 1 << 20;

/// Saves a full snapshot of `client`'s member to `path`, like `etcdctl snapshot save`: the data
/// goes to `<path>.part`, is checked against etcd's SHA-256 and synced, then renamed into
/// place, so `path` only ever holds a complete snapshot. Receiving and writing run in parallel
/// (the writer on a blocking thread) with at most ~3 MiB in flight.
pub async fn save_to_file(
    client: &MemberClient,
    path: impl AsRef<Path>,
) -> Result<SavedSnapshot, CaptureError> {
    let path = path.as_ref().to_path_buf();
    let part = part_path(&path);
    let (revision, mut stream) = start(client).await?;
    let endpoint = client.endpoint().to_string();

    let (tx, rx) = mpsc::channel::<Bytes>(WRITE_QUEUE);
    let writer = {
        let (part, path) = (part.clone(), path.clone());
        tokio::task::spawn_blocking(move || write_file(rx, &part, &path))
    };
    let received = receive(&mut stream, &tx).await;
    drop(tx);
    let written = writer.await.unwrap_or_else(|e| {
        Err(WriteError::Io(io::Error::other(format!(
            "snapshot writer thread failed: {e}"
        ))))
    });
    let result = match (received, written) {
        // A network failure explains a short file better than the file's own complaint.
        (Err(e), _) => Err(CaptureError::Etcd(e)),
        (Ok(()), Ok(size)) => Ok(SavedSnapshot {
            revision,
            path: path.clone(),
            size,
        }),
        (Ok(()), Err(WriteError::Io(source))) => Err(CaptureError::File {
            path: path.clone(),
            source,
        }),
        (Ok(()), Err(WriteError::Corrupt(detail))) => {
            Err(CaptureError::SnapshotCorrupt { endpoint, detail })
        }
    };
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result
}

async fn start(client: &MemberClient) -> Result<(i64, SnapshotStream), CaptureError> {
    let revision = client.status().await?.revision;
    let stream = client.snapshot().await?;
    Ok((revision, stream))
}

/// Forwards chunks to the writer until the stream ends, the writer stops, or etcd fails.
async fn receive(stream: &mut SnapshotStream, tx: &mpsc::Sender<Bytes>) -> Result<(), EtcdError> {
    while let Some(chunk) = stream.next_chunk().await? {
        if tx.send(chunk).await.is_err() {
            // The writer gave up (I/O error); it reports why.
            break;
        }
    }
    Ok(())
}

enum WriteError {
    Io(io::Error),
    Corrupt(String),
}

fn write_file(mut rx: mpsc::Receiver<Bytes>, part: &Path, path: &Path) -> Result<u64, WriteError> {
    let file = std::fs::File::create(part).map_err(WriteError::Io)?;
    let mut out = io::BufWriter::with_capacity(WRITE_BUFFER, file);
    let mut check = TrailerCheck::new();
    while let Some(chunk) = rx.blocking_recv() {
        check.update(&chunk);
        out.write_all(&chunk).map_err(WriteError::Io)?;
    }
    let size = check.total();
    check.finish().map_err(WriteError::Corrupt)?;
    let file = out
        .into_inner()
        .map_err(|e| WriteError::Io(e.into_error()))?;
    file.sync_all().map_err(WriteError::Io)?;
    drop(file);
    std::fs::rename(part, path).map_err(WriteError::Io)?;
    // Make the rename itself durable.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(WriteError::Io)?;
    }
    Ok(size)
}

fn part_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

/// The snapshot chunks with the trailer checked at the end.
fn checked_stream(
    stream: SnapshotStream,
    endpoint: String,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    struct State {
        stream: SnapshotStream,
        check: Option<TrailerCheck>,
        endpoint: String,
    }
    let state = State {
        stream,
        check: Some(TrailerCheck::new()),
        endpoint,
    };
    futures::stream::unfold(state, |mut s| async move {
        let check = s.check.as_mut()?;
        match s.stream.next_chunk().await {
            Ok(Some(chunk)) => {
                check.update(&chunk);
                Some((Ok(chunk), s))
            }
            Ok(None) => {
                let check = s.check.take()?;
                match check.finish() {
                    Ok(()) => None,
                    Err(detail) => {
                        let err = CaptureError::SnapshotCorrupt {
                            endpoint: s.endpoint.clone(),
                            detail,
                        };
                        Some((Err(io::Error::new(io::ErrorKind::InvalidData, err)), s))
                    }
                }
            }
            Err(e) => {
                s.check = None;
                Some((Err(io::Error::other(e)), s))
            }
        }
    })
}
