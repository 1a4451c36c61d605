//! A corrupted backup object, for real: the newest object a restore reads (the newest delta
//! after the newest full snapshot, or that full snapshot when no delta follows it) is read
//! through quorate's own store client, one byte of its content flipped, and written back under
//! the same name (validly compressed, so only the content is wrong); healing writes the
//! original back.

use futures::{StreamExt, TryStreamExt};
use quorate_backup::layout::SnapshotKind;
use quorate_backup::store::{SnapStore, StoreOptions, StoredSnapshot};

/// A corrupted object and what it held.
pub struct Corrupted {
    store: SnapStore,
    /// The object.
    pub snapshot: StoredSnapshot,
    original: Vec<u8>,
}

/// Corrupts the newest object a restore of the `Etcd` in `manifest` reads. (The newest delta
/// alone is not enough: a full snapshot taken after it, e.g. by a new backup leader, means a
/// restore never reads it, and the soak once reported such a restore as an anomaly.)
pub async fn corrupt_newest_restored(
    manifest: &str,
    options: &StoreOptions,
) -> Result<Corrupted, String> {
    let etcd = quorate_api::manifest::parse_etcd_manifest(manifest, "chaos manifest")
        .map_err(|e| e.to_string())?;
    let spec = etcd
        .spec
        .backup
        .store
        .as_ref()
        .ok_or("the manifest has no backup store")?;
    let store = SnapStore::open(spec, options).map_err(|e| e.to_string())?;
    let listed = store.list().await.map_err(|e| e.to_string())?;
    let full = listed
        .iter()
        .filter(|s| s.name.kind == SnapshotKind::Full)
        .max_by_key(|s| s.name.last_revision)
        .ok_or("no full snapshot in the bucket yet")?;
    let newest = listed
        .iter()
        .filter(|s| {
            s.name.kind == SnapshotKind::Incr && s.name.last_revision > full.name.last_revision
        })
        .max_by_key(|s| s.name.last_revision)
        .unwrap_or(full)
        .clone();
    let original = read(&store, &newest).await?;
    let mut damaged = original.clone();
    if damaged.is_empty() {
        return Err(format!("{} is empty", newest.path));
    }
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x20;
    write(&store, &newest, damaged).await?;
    Ok(Corrupted {
        store,
        snapshot: newest,
        original,
    })
}

impl Corrupted {
    /// Whether a restore that started from the full snapshot at `full_revision` never read
    /// this object: a full snapshot taken between the corruption and the restore's own listing
    /// (the schedule's, or a new backup leader's) reaches past it.
    pub fn superseded_by(&self, full_revision: i64) -> bool {
        let name = &self.snapshot.name;
        match name.kind {
            SnapshotKind::Full => full_revision > name.last_revision,
            _ => full_revision >= name.last_revision,
        }
    }

    /// Puts the original content back.
    pub async fn heal(self) -> Result<(), String> {
        write(&self.store, &self.snapshot, self.original).await
    }
}

async fn read(store: &SnapStore, s: &StoredSnapshot) -> Result<Vec<u8>, String> {
    let chunks: Vec<bytes::Bytes> = store
        .download(s)
        .await
        .map_err(|e| e.to_string())?
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(chunks.concat())
}

async fn write(store: &SnapStore, s: &StoredSnapshot, content: Vec<u8>) -> Result<(), String> {
    let body = futures::stream::iter([Ok(bytes::Bytes::from(content))]).boxed();
    store
        .upload(&s.name, body)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}
