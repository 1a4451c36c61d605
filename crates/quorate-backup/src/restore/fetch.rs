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

/// The full snapshot as a local file: the caller's file as it is, or a stream written to
/// `work/full.db`.
pub(crate) async fn full_to_disk(
    full: FullSnapshotInput,
    work: &Path,
    data_dir: &Path,
) -> Result<PathBuf, RestoreError> {
    match full.source {
        FullSnapshotSource::File(path) => Ok(path),
        FullSnapshotSource::Stream(stream) => {
            let path = work.join("full.db");
            write_stream(stream, &path)
                .await
                .map_err(|source| RestoreError::Io {
                    data_dir: data_dir.display().to_string(),
                    what: format!("write full snapshot {} to disk", full.name),
                    source,
                })?;
            Ok(path)
        }
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
