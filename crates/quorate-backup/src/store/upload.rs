//! Streams one object into the store without holding it whole: a single PUT when it fits in one
//! part, otherwise a multipart upload of fixed-size parts (a few in flight at once) that is
//! aborted when the data or the store fails, so no half-written snapshot or orphaned part is left.

use std::io;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

use crate::compress::ByteStream;

/// Why an upload failed.
pub(crate) enum UploadFailure {
    /// The body stream failed.
    Source(io::Error),
    /// The store failed.
    Store(object_store::Error),
}

/// What was uploaded.
pub(crate) struct Uploaded {
    /// Bytes stored.
    pub size: u64,
    /// Parts of the multipart upload; 0 for a single PUT.
    pub parts: usize,
}

/// Uploads `body` to `path` in parts of `part_size` bytes, at most `concurrency` in flight.
pub(crate) async fn upload(
    store: &dyn ObjectStore,
    path: &Path,
    mut body: ByteStream<'_>,
    part_size: usize,
    concurrency: usize,
) -> Result<Uploaded, UploadFailure> {
    // Small objects (most delta snapshots) go in one PUT.
    let mut first: Vec<Bytes> = Vec::new();
    let mut size = 0usize;
    while size < part_size {
        match body.next().await {
            Some(Ok(chunk)) => {
                size += chunk.len();
                first.push(chunk);
            }
            Some(Err(e)) => return Err(UploadFailure::Source(e)),
            None => {
                let payload: PutPayload = first.into_iter().collect();
                store
                    .put(path, payload)
                    .await
                    .map_err(UploadFailure::Store)?;
                return Ok(Uploaded {
                    size: size as u64,
                    parts: 0,
                });
            }
        }
    }

    let upload = store
        .put_multipart(path)
        .await
        .map_err(UploadFailure::Store)?;
    let mut guard = AbortOnDrop {
        writer: Some(WriteMultipart::new_with_chunk_size(upload, part_size)),
        path: path.clone(),
    };
    let writer = guard
        .writer
        .as_mut()
        .expect("writer present until finished");
    for chunk in first {
        writer.put(chunk);
    }
    loop {
        let next = body.next().await;
        if let Err(e) = writer.wait_for_capacity(concurrency).await {
            guard.abort().await;
            return Err(UploadFailure::Store(e));
        }
        match next {
            Some(Ok(chunk)) => {
                size += chunk.len();
                writer.put(chunk);
            }
            Some(Err(e)) => {
                guard.abort().await;
                return Err(UploadFailure::Source(e));
            }
            None => break,
        }
    }
    let parts = size.div_ceil(part_size);
    let writer = guard.writer.take().expect("writer present until finished");
    // `finish` aborts the upload itself when completing fails.
    writer.finish().await.map_err(UploadFailure::Store)?;
    Ok(Uploaded {
        size: size as u64,
        parts,
    })
}

/// Owns a multipart upload until it is finished; aborts it on failure and also when the
/// upload is cancelled (its future dropped, e.g. when this member stops being the backup
/// leader), so no parts are left behind.
struct AbortOnDrop {
    writer: Option<WriteMultipart>,
    path: Path,
}

impl AbortOnDrop {
    async fn abort(&mut self) {
        if let Some(writer) = self.writer.take() {
            abort(writer, &self.path).await;
        }
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        let Some(writer) = self.writer.take() else {
            return;
        };
        let path = self.path.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { abort(writer, &path).await });
            }
            Err(_) => {
                tracing::warn!(%path, "multipart upload dropped outside a runtime; its parts stay until the bucket's lifecycle rules remove them");
            }
        }
    }
}

/// Aborts a multipart upload, logging (not returning) a failure to abort: the upload's own error
/// is what the caller needs to see.
async fn abort(writer: WriteMultipart, path: &Path) {
    if let Err(e) = writer.abort().await {
        tracing::warn!(%path, error = %e, "could not abort the multipart upload; its parts stay until the bucket's lifecycle rules remove them");
    }
}
