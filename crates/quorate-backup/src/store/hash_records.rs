//! etcd's hash of the key space, recorded beside the snapshots so a restore can prove it
//! reproduced the data it was taken from ([`crate::restore::verify`]).
//!
//! Format: one small JSON object per revision at `<prefix>.hashkv/<revision, 20 digits>`
//! (`{"revision":…,"compactRevision":…,"hash":…,"member":…,"recordedAt":…}`), beside the
//! prefix like the `owner` and `chain` markers, so etcd-backup-restore never takes them for
//! snapshots and the bucket stays readable by it. Records go with the snapshots: garbage
//! collection drops those older than the oldest full snapshot kept, and a new chain moves them
//! aside with the snapshots.

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

impl HashRecord {
    /// What `member`'s etcd answered, recorded at `recorded_at`.
    pub fn new(answer: quorate_etcd::KeySpaceHash, member: &str, recorded_at: String) -> Self {
        HashRecord {
            revision: answer.revision,
            compact_revision: answer.compact_revision,
            hash: answer.hash,
            member: member.to_string(),
            recorded_at,
            location: String::new(),
        }
    }
}

impl SnapStore {
    /// The marker a record of `revision` is stored as.
    fn hash_record_marker(revision: i64) -> String {
        format!("{HASHKV}/{revision:020}")
    }

    /// Stores `record`, replacing one for the same revision.
    pub async fn put_hash_record(&self, record: &HashRecord) -> Result<(), StoreError> {
        let text = serde_json::to_string(record).expect("a hash record serializes");
        self.put_marker(&Self::hash_record_marker(record.revision), &text)
            .await
    }

    /// The record for `revision`, if the backups hold one. A record that does not parse is
    /// an error: it was written to be read.
    pub async fn hash_record(&self, revision: i64) -> Result<Option<HashRecord>, StoreError> {
        let name = Self::hash_record_marker(revision);
        let Some(text) = self.marker(&name).await? else {
            return Ok(None);
        };
        let location = self.marker_path(&name).to_string();
        let mut record: HashRecord =
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                store: self.description.clone(),
                path: location.clone(),
                detail: format!("not a hash record: {e}"),
            })?;
        record.location = location;
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
            self.delete_object(&path).await?;
            pruned += 1;
        }
        Ok(pruned)
    }

    /// Moves every record to the marker directory of `base` (a prefix the snapshots were moved
    /// to), so they stay with their snapshots.
    pub(super) async fn move_hash_records(&self, base: &str) -> Result<(), StoreError> {
        for (revision, from) in self.hash_record_paths().await? {
            let to = Path::from(format!("{base}.{}", Self::hash_record_marker(revision)));
            self.store
                .copy(&from, &to)
                .await
                .map_err(|e| classify(e, self.cx("archive hash record", Some(from.as_ref()))))?;
            self.delete_object(&from).await?;
        }
        Ok(())
    }
}
