//! A corrupted backup object, for real: the newest delta snapshot in the cluster's bucket is
//! read through quorate's own store client, one byte of its content flipped, and written back
//! under the same name (validly compressed, so only the content is wrong); healing writes the
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

/// Corrupts the newest delta snapshot of the `Etcd` in `manifest`.
pub async fn corrupt_newest_delta(
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
    let newest = store
        .list()
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|s| s.name.kind == SnapshotKind::Incr)
        .max_by_key(|s| s.name.last_revision)
        .ok_or("no delta snapshot in the bucket yet")?;
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
