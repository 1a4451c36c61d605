//! The snapshot stream of one member's backend, chunk by chunk, with a stall bound.

use std::time::Duration;

use bytes::Bytes;
use futures::Stream;

use crate::error::{ErrorKind, EtcdError};

/// A running snapshot download. etcd ends the stream with a SHA-256 of the data, so the
/// concatenated chunks form a file `etcdctl snapshot restore` accepts.
pub struct SnapshotStream {
    inner: etcd_client::SnapshotStreaming,
    endpoint: String,
    chunk_timeout: Duration,
    received: u64,
}

impl std::fmt::Debug for SnapshotStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotStream")
            .field("endpoint", &self.endpoint)
            .field("received", &self.received)
            .finish()
    }
}

impl SnapshotStream {
    pub(crate) fn new(
        inner: etcd_client::SnapshotStreaming,
        endpoint: String,
        chunk_timeout: Duration,
    ) -> SnapshotStream {
        SnapshotStream {
            inner,
            endpoint,
            chunk_timeout,
            received: 0,
        }
    }

    /// The next chunk, or `None` at the end. A member that sends nothing for the chunk
    /// timeout fails the download as [`ErrorKind::Unreachable`].
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, EtcdError> {
        let message = tokio::time::timeout(self.chunk_timeout, self.inner.message())
            .await
            .map_err(|_| {
                EtcdError::new(
                    ErrorKind::Unreachable,
                    "snapshot",
                    &self.endpoint,
                    format!(
                        "no data for {:?} after {} bytes",
                        self.chunk_timeout, self.received
                    ),
                )
            })?
            .map_err(|e| EtcdError::from_client("snapshot", &self.endpoint, e))?;
        Ok(message.map(|m| {
            self.received += m.blob().len() as u64;
            Bytes::copy_from_slice(m.blob())
        }))
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The chunks as a `futures::Stream`, for piping into an uploader.
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, EtcdError>> + Send {
        futures::stream::try_unfold(self, |mut s| async move {
            Ok(s.next_chunk().await?.map(|chunk| (chunk, s)))
        })
    }
}
