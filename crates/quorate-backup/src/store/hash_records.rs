//! etcd's hash of the key space, recorded beside the snapshots so a restore can prove it
//! reproduced the data it was taken from ([`crate::restore::verify`]).
//!
//! Format: one small JSON object per revision at `<prefix>.hashkv/<revision, 20 digits>`
//! (`{"revision":…,"compactRevision":…,"hash":…,"member":…,"recordedAt":…}`), beside the
//! prefix like the `owner` and `chain` markers, so etcd-backup-restore never lists them and
//! the bucket stays readable by it. Records go with the snapshots: garbage collection drops
//! those older than the oldest snapshot kept, and a new chain moves them aside with the
//! snapshots.

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use super::error::classify;
use super::{SnapStore, StoreError};

/// The marker directory the records live in.
const HASHKV: &str = "hashkv";

/// What etcd answered to `HashKV(revision)` while the backups were taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HashRecord {
    /// The revision hashed.
    pub revision: i64,
    /// The compaction revision of the member that hashed.
    pub compact_revision: i64,
    /// etcd's CRC-32C of the key space.
    pub hash: u32,
    /// The member that answered.
    pub member: String,
    /// When (RFC 3339), for people reading the bucket.
    pub recorded_at: String,
    /// Where the record is stored (filled in when read).
    #[serde(skip)]
    pub location: String,
}

impl SnapStore {
    fn hash_record_path(&self, revision: i64) -> Path {
        self.marker_path(&format!("{HASHKV}/{revision:020}"))
    }

    /// Stores `record`, replacing one for the same revision.
    pub async fn put_hash_record(&self, record: &HashRecord) -> Result<(), StoreError> {
        let path = self.hash_record_path(record.revision);
        let text = serde_json::to_string(record).expect("a hash record serializes");
        self.store
            .put(&path, object_store::PutPayload::from(text))
            .await
            .map(|_| ())
            .map_err(|e| classify(e, self.cx("write hash record", Some(path.as_ref()))))
    }

    /// The record for `revision`, if the backups hold one. A record that does not parse is
    /// an error: it was written to be read.
    pub async fn hash_record(&self, revision: i64) -> Result<Option<HashRecord>, StoreError> {
        let path = self.hash_record_path(revision);
        let bytes = match self.store.get(&path).await {
            Ok(result) => result
                .bytes()
                .await
                .map_err(|e| classify(e, self.cx("read hash record", Some(path.as_ref()))))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => {
                return Err(classify(
                    e,
                    self.cx("read hash record", Some(path.as_ref())),
                ));
            }
        };
        let mut record: HashRecord =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                store: self.description.clone(),
                path: path.to_string(),
                detail: format!("not a hash record: {e}"),
            })?;
        record.location = path.to_string();
        Ok(Some(record))
    }

    /// The revisions that have a record, ascending.
    pub async fn hash_record_revisions(&self) -> Result<Vec<i64>, StoreError> {
        Ok(self
            .hash_record_paths()
            .await?
            .into_iter()
            .map(|(revision, _)| revision)
            .collect())
    }

    async fn hash_record_paths(&self) -> Result<Vec<(i64, Path)>, StoreError> {
        let dir = self.marker_path(HASHKV);
        let mut objects = self.store.list(Some(&dir));
        let mut found = Vec::new();
        while let Some(meta) = objects.next().await {
            let meta = meta.map_err(|e| classify(e, self.cx("list hash records", None)))?;
            if let Some(revision) = meta
                .location
                .filename()
                .and_then(|name| name.parse::<i64>().ok())
            {
                found.push((revision, meta.location));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Deletes the records of revisions below `revision` (no snapshot reaches back to them any
    /// more); returns how many went.
    pub async fn prune_hash_records(&self, revision: i64) -> Result<usize, StoreError> {
        let mut pruned = 0;
        for (rev, path) in self.hash_record_paths().await? {
            if rev >= revision {
                break;
            }
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => pruned += 1,
                Err(e) => {
                    return Err(classify(
                        e,
                        self.cx("delete hash record", Some(path.as_ref())),
                    ));
                }
            }
        }
        Ok(pruned)
    }

    /// Moves every record to the marker directory of `base` (a prefix the snapshots were moved
    /// to), so they stay with their snapshots.
    pub(super) async fn move_hash_records(&self, base: &str) -> Result<(), StoreError> {
        for (revision, from) in self.hash_record_paths().await? {
            let to = Path::from(format!("{base}.{HASHKV}/{revision:020}"));
            self.store
                .copy(&from, &to)
                .await
                .map_err(|e| classify(e, self.cx("archive hash record", Some(from.as_ref()))))?;
            match self.store.delete(&from).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(classify(
                        e,
                        self.cx("archive hash record", Some(from.as_ref())),
                    ));
                }
            }
        }
        Ok(())
    }
}
