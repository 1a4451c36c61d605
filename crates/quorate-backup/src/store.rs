//! The snapshot store: where full and delta snapshots live, in etcd-backup-restore's bucket
//! layout, on every provider druid supports: through `object_store` (a local directory, S3 and
//! the S3-compatible ECS, OCS and OSS, GCS, Azure Blob) and OpenStack Swift (`swift.rs`). Snapshots stream through it compressed on the way
//! in and decompressed on the way out; failures come back as a [`StoreError`] that says which
//! of unreachable / access denied / bucket missing / not found / corrupt it is.

mod backend;
mod error;
mod hash_records;
mod swift;
mod upload;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use quorate_api::{StorageProvider, StoreSpec};

pub use error::StoreError;
pub use hash_records::HashRecord;

use crate::compress;
use crate::encryption::{self, EncryptionError, Keyring};
use crate::layout::{KeyKind, SnapshotName};
use error::{Context, classify};

/// S3's smallest allowed part (all parts but the last), and the default part size.
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;
/// Parts uploaded at the same time; with the part being filled, memory stays below
/// `(PARTS_IN_FLIGHT + 2) * part size`.
const PARTS_IN_FLIGHT: usize = 2;
/// How long [`SnapStore::check`] waits for the store to answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// Where a store's data and credentials are found on this machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// Directory under which `Local` containers live (`<local_root>/<container>/<prefix>/v2/…`).
    pub local_root: PathBuf,
    /// The secret directory with the store credentials (one file per key); `None` uses the
    /// provider's ambient credentials (environment, workload identity, instance metadata).
    pub secret_dir: Option<PathBuf>,
    /// The directory of backup encryption keys ([`crate::encryption::Keyring`]); `None`: objects
    /// are written in clear, and encrypted ones cannot be read.
    pub encryption_keys: Option<PathBuf>,
}

/// A snapshot object found in (or just written to) the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSnapshot {
    /// What the name says: kind, revisions, time, compression.
    pub name: SnapshotName,
    /// The object key relative to the bucket (layout v1 or v2).
    pub path: String,
    /// Size of the stored (compressed) object in bytes.
    pub size: u64,
}

impl StoredSnapshot {
    /// The columns of `backups list` (local and `kubectl quorate`), in [`Self::TABLE_HEADER`]'s
    /// order.
    pub fn table_row(&self) -> Vec<String> {
        vec![
            format!(
                "{}{}",
                self.name.kind.as_str(),
                if self.name.is_final { " (final)" } else { "" }
            ),
            self.name.start_revision.to_string(),
            self.name.last_revision.to_string(),
            quorate_api::printer::human_size(self.size),
            jiff::Timestamp::from_second(self.name.created_unix)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            self.path.clone(),
        ]
    }

    /// The header of [`Self::table_row`].
    pub const TABLE_HEADER: [&str; 6] = ["KIND", "START", "LAST", "SIZE", "CREATED", "OBJECT"];

    /// What garbage collection and copy selection (core) need to know about it.
    pub fn info(&self) -> quorate_core::gc::SnapshotInfo {
        use quorate_core::gc::SnapshotKind as Kind;
        quorate_core::gc::SnapshotInfo {
            kind: match self.name.kind {
                crate::layout::SnapshotKind::Full => Kind::Full,
                crate::layout::SnapshotKind::Incr => Kind::Incr,
            },
            start_revision: self.name.start_revision,
            last_revision: self.name.last_revision,
            created: jiff::Timestamp::from_second(self.name.created_unix)
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        }
    }
}

/// A bucket (or directory) holding one cluster's snapshots under a prefix.
#[derive(Clone)]
pub struct SnapStore {
    store: Arc<dyn ObjectStore>,
    provider: Option<StorageProvider>,
    bucket: String,
    prefix: String,
    description: String,
    part_size: usize,
    encryption_keys: Option<PathBuf>,
    plaintext_before: Option<jiff::Timestamp>,
}

impl std::fmt::Debug for SnapStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapStore")
            .field("store", &self.description)
            .field("part_size", &self.part_size)
            .finish()
    }
}

impl SnapStore {
    /// Opens the store `spec.backup.store` describes. Nothing is contacted yet (see
    /// [`SnapStore::check`]); a `Local` directory is created if missing.
    pub fn open(spec: &StoreSpec, opts: &StoreOptions) -> Result<SnapStore, StoreError> {
        let b = backend::open(spec, opts)?;
        Ok(SnapStore {
            store: b.store,
            provider: Some(b.provider),
            bucket: b.bucket,
            prefix: spec.prefix.trim_matches('/').to_string(),
            description: b.description,
            part_size: MIN_PART_SIZE,
            encryption_keys: opts.encryption_keys.clone(),
            plaintext_before: None,
        })
    }

    /// A store over any `object_store` implementation (e.g. `InMemory` in tests).
    pub fn from_object_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        description: &str,
    ) -> SnapStore {
        SnapStore {
            store,
            provider: None,
            bucket: description.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            description: description.to_string(),
            part_size: MIN_PART_SIZE,
            encryption_keys: None,
            plaintext_before: None,
        }
    }

    /// Encrypts what it writes, and decrypts what it reads, with the keys in `dir`.
    pub fn with_encryption_keys(mut self, dir: PathBuf) -> SnapStore {
        self.encryption_keys = Some(dir);
        self
    }

    /// Accepts clear objects whose names say they were written before `before` although keys
    /// are configured: the migration window of a bucket whose encryption was turned on at that
    /// time. Without it a clear object in an encrypting store is refused
    /// ([`EncryptionError::Plaintext`]), so a writer of the bucket cannot slip in its own.
    pub fn accept_plaintext_before(mut self, before: jiff::Timestamp) -> SnapStore {
        self.plaintext_before = Some(before);
        self
    }

    /// Refuses clear `s` when keys are configured, unless the migration window accepts it.
    fn check_encrypted(&self, s: &StoredSnapshot) -> Result<(), StoreError> {
        let Some(dir) = &self.encryption_keys else {
            return Ok(());
        };
        if s.name.encrypted
            || self
                .plaintext_before
                .is_some_and(|before| s.name.created_unix < before.as_second())
        {
            return Ok(());
        }
        Err(StoreError::Encryption(EncryptionError::Plaintext {
            object: s.path.clone(),
            dir: dir.display().to_string(),
            window: match self.plaintext_before {
                Some(before) => format!(
                    "; clear objects are accepted only if written before {before}, this one \
                     says {}",
                    jiff::Timestamp::from_second(s.name.created_unix)
                        .map_or_else(|_| s.name.created_unix.to_string(), |t| t.to_string())
                ),
                None => String::new(),
            },
        }))
    }

    /// The keys, read now (so a rotated Secret counts at once); `None` when not configured.
    fn keyring(&self) -> Result<Option<Keyring>, StoreError> {
        self.encryption_keys
            .as_deref()
            .map(Keyring::load)
            .transpose()
            .map_err(StoreError::from)
    }

    /// Uses parts of `bytes` for multipart uploads (at least [`MIN_PART_SIZE`]).
    pub fn with_part_size(mut self, bytes: usize) -> SnapStore {
        self.part_size = bytes.max(MIN_PART_SIZE);
        self
    }

    /// The store for messages, e.g. `s3://bucket/prefix at http://127.0.0.1:9000`.
    pub fn describe(&self) -> String {
        self.description.clone()
    }

    /// The provider, when opened from a spec.
    pub fn provider(&self) -> Option<StorageProvider> {
        self.provider
    }

    /// The key prefix of this cluster's snapshots.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn cx<'a>(&'a self, op: impl Into<String>, path: Option<&'a str>) -> Context<'a> {
        Context {
            store: &self.description,
            bucket: &self.bucket,
            op: op.into(),
            path,
        }
    }

    fn prefix_path(&self) -> Option<Path> {
        (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()))
    }

    /// Every snapshot under the prefix (layouts v1 and v2), sorted by last revision, full
    /// before delta, then creation time. Objects that are no snapshot (other tools' files,
    /// chunks of uploads in progress) are skipped; names that look like snapshots but do not
    /// parse are skipped with a warning.
    pub async fn list(&self) -> Result<Vec<StoredSnapshot>, StoreError> {
        let prefix = self.prefix_path();
        let prefix_text = prefix.as_ref().map_or("", |p| p.as_ref()).to_string();
        let mut objects = self.store.list(prefix.as_ref());
        let mut found = Vec::new();
        while let Some(meta) = objects.next().await {
            let meta = meta.map_err(|e| classify(e, self.cx("list", None)))?;
            let key = meta.location.as_ref();
            match crate::layout::classify_key(&prefix_text, key) {
                KeyKind::Snapshot(_, name) => found.push(StoredSnapshot {
                    name,
                    path: key.to_string(),
                    size: meta.size,
                }),
                KeyKind::Malformed(e) => {
                    tracing::warn!(store = %self.description, key, error = %e, "skipping an object that looks like a snapshot but is not one");
                }
                KeyKind::Other => {}
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.path.cmp(&b.path)));
        Ok(found)
    }

    /// Uploads a snapshot under `name` (layout v2), compressing `body` as `name.compression`
    /// says, then encrypting it when keys are configured (the stored name then ends in `.enc`;
    /// keys that cannot be read fail the upload: nothing is written in clear). Large snapshots
    /// go up as a multipart upload that is aborted if `body` or the store fails, so a failed
    /// upload leaves nothing behind. The upload succeeds only once the store, asked afterwards,
    /// holds the object ([`StoreError::NotKept`] otherwise).
    pub async fn upload(
        &self,
        name: &SnapshotName,
        body: impl Stream<Item = io::Result<Bytes>> + Send + Unpin,
    ) -> Result<StoredSnapshot, StoreError> {
        let keys = self.keyring()?;
        let mut name = name.clone();
        name.encrypted = keys.is_some();
        let key = name.v2_key(&self.prefix);
        let path = Path::from(key.as_str());
        let packed = compress::compress(name.compression, body);
        let packed = match &keys {
            Some(keys) => encryption::encrypt(keys, &name.file_name(), packed),
            None => packed,
        };
        let started = std::time::Instant::now();
        match upload::upload(
            self.store.as_ref(),
            &path,
            packed,
            self.part_size,
            PARTS_IN_FLIGHT,
        )
        .await
        {
            Ok(done) => {
                self.verify_kept(&key, done.size).await?;
                tracing::debug!(store = %self.description, key, size = done.size, parts = done.parts, elapsed = ?started.elapsed(), "uploaded snapshot");
                Ok(StoredSnapshot {
                    name,
                    path: path.as_ref().to_string(),
                    size: done.size,
                })
            }
            Err(upload::UploadFailure::Source(source)) => Err(StoreError::Source {
                store: self.description.clone(),
                path: key,
                source,
            }),
            Err(upload::UploadFailure::Store(e)) => {
                Err(classify(e, self.cx(format!("upload of {key}"), Some(&key))))
            }
        }
    }

    /// Asks the store for the object just uploaded to `key`: an acknowledged write counts only
    /// once the store positively holds it at the size sent. A store that lost it (answers
    /// "not found", or another size) gives [`StoreError::NotKept`], so no caller continues a
    /// chain over a missing object; other failures of the question are classified as usual.
    async fn verify_kept(&self, key: &str, size: u64) -> Result<(), StoreError> {
        let path = Path::from(key);
        let detail = match self.store.head(&path).await {
            Ok(meta) if meta.size == size => return Ok(()),
            Ok(meta) => format!("it holds {} bytes, {size} were sent", meta.size),
            Err(object_store::Error::NotFound { .. }) => "the object is not found".to_string(),
            Err(e) => return Err(classify(e, self.cx(format!("check of {key}"), Some(key)))),
        };
        tracing::warn!(store = %self.description, key, %detail, "the store lost an acknowledged upload");
        Err(StoreError::NotKept {
            store: self.description.clone(),
            path: key.to_string(),
            detail,
        })
    }

    /// Streams a snapshot's contents, decrypted and decompressed. Errors inside the stream are
    /// `io::Error`s carrying a [`StoreError`] (`Corrupt` for damaged data, `Encryption` for a
    /// missing or wrong key or a tampered object; get it back with
    /// [`StoreError::from_stream_error`]).
    pub async fn download(
        &self,
        s: &StoredSnapshot,
    ) -> Result<BoxStream<'static, io::Result<Bytes>>, StoreError> {
        self.check_encrypted(s)?;
        let mut raw = self.stored_bytes(s).await?;
        if s.name.encrypted {
            raw = encryption::decrypt(self.keyring()?, s.path.clone(), s.name.file_name(), raw);
        }
        let store = self.description.clone();
        let key = s.path.clone();
        let format = s.name.compression.map_or("uncompressed", |c| c.as_str());
        Ok(compress::decompress(s.name.compression, raw)
            .map_err(move |e| {
                if e.get_ref().is_some_and(|inner| inner.is::<StoreError>()) {
                    return e;
                }
                let kind = e.kind();
                if e.get_ref()
                    .is_some_and(|inner| inner.is::<EncryptionError>())
                {
                    let inner = e.into_inner().expect("checked above");
                    let inner = inner.downcast::<EncryptionError>().expect("checked above");
                    return io::Error::new(kind, StoreError::Encryption(*inner));
                }
                io::Error::new(
                    kind,
                    StoreError::Corrupt {
                        store: store.clone(),
                        path: key.clone(),
                        detail: format!("{format} data cannot be decoded: {e}"),
                    },
                )
            })
            .boxed())
    }

    /// [`SnapStore::download`], refused with [`StoreError::Corrupt`] as soon as more than
    /// `limit` decompressed bytes have come: `what` says where the bound comes from.
    pub async fn download_bounded(
        &self,
        s: &StoredSnapshot,
        limit: u64,
        what: &'static str,
    ) -> Result<BoxStream<'static, io::Result<Bytes>>, StoreError> {
        let body = self.download(s).await?;
        let (store, path) = (self.description.clone(), s.path.clone());
        Ok(compress::bounded(body, limit, move |limit| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                StoreError::Corrupt {
                    store: store.clone(),
                    path: path.clone(),
                    detail: format!(
                        "it decompresses to more than {limit} bytes, {what}: a decompression \
                         bomb or not a snapshot; it was not read further"
                    ),
                },
            )
        }))
    }

    /// The stored (still compressed) bytes of `s`, with store errors classified.
    async fn stored_bytes(
        &self,
        s: &StoredSnapshot,
    ) -> Result<BoxStream<'static, io::Result<Bytes>>, StoreError> {
        let path = Path::from(s.path.as_str());
        let got =
            self.store.get(&path).await.map_err(|e| {
                classify(e, self.cx(format!("download of {}", s.path), Some(&s.path)))
            })?;
        let store = self.description.clone();
        let bucket = self.bucket.clone();
        let key = s.path.clone();
        Ok(got
            .into_stream()
            .map_err(move |e| {
                let cx = Context {
                    store: &store,
                    bucket: &bucket,
                    op: format!("download of {key}"),
                    path: Some(&key),
                };
                io::Error::other(classify(e, cx))
            })
            .boxed())
    }

    /// Copies snapshot `s` into `target` under the same name (layout v2), byte for byte: the
    /// stored (compressed) object is streamed from one store to the other, neither decoded
    /// nor held in memory whole. An encrypted object stays encrypted with its key; a clear one
    /// is encrypted on the way when `target` encrypts.
    pub async fn copy_to(
        &self,
        s: &StoredSnapshot,
        target: &SnapStore,
    ) -> Result<StoredSnapshot, StoreError> {
        let mut raw = self.stored_bytes(s).await?;
        let mut name = s.name.clone();
        if !name.encrypted
            && let Some(keys) = target.keyring()?
        {
            name.encrypted = true;
            raw = encryption::encrypt(&keys, &name.file_name(), raw);
        }
        let target_key = name.v2_key(&target.prefix);
        let target_path = Path::from(target_key.as_str());
        match upload::upload(
            target.store.as_ref(),
            &target_path,
            raw,
            target.part_size,
            PARTS_IN_FLIGHT,
        )
        .await
        {
            Ok(done) => {
                target.verify_kept(&target_key, done.size).await?;
                Ok(StoredSnapshot {
                    name,
                    path: target_key,
                    size: done.size,
                })
            }
            Err(upload::UploadFailure::Source(source)) => Err(StoreError::Source {
                store: self.description.clone(),
                path: s.path.clone(),
                source,
            }),
            Err(upload::UploadFailure::Store(e)) => Err(classify(
                e,
                target.cx(format!("upload of {target_key}"), Some(&target_key)),
            )),
        }
    }

    /// Deletes a snapshot. Deleting one that is already gone succeeds.
    pub async fn delete(&self, s: &StoredSnapshot) -> Result<(), StoreError> {
        self.delete_object(&Path::from(s.path.as_str())).await
    }

    /// Deletes the object at `path`; one that is already gone counts as deleted.
    async fn delete_object(&self, path: &Path) -> Result<(), StoreError> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(classify(
                e,
                self.cx(format!("delete of {path}"), Some(path.as_ref())),
            )),
        }
    }

    /// Whether the store can be used: reachable, the bucket exists, the credentials are
    /// accepted (by listing the prefix). Gives up after a bounded time.
    pub async fn check(&self) -> Result<(), StoreError> {
        if self.provider == Some(StorageProvider::Local) {
            let root = std::path::Path::new(&self.bucket);
            if !root.is_dir() {
                return Err(StoreError::BucketMissing {
                    store: self.description.clone(),
                    bucket: self.bucket.clone(),
                    detail: "the directory does not exist".to_string(),
                });
            }
        }
        let prefix = self.prefix_path();
        match tokio::time::timeout(
            CHECK_TIMEOUT,
            self.store.list_with_delimiter(prefix.as_ref()),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(classify(e, self.cx("list", None))),
            Err(_) => Err(StoreError::Unreachable {
                store: self.description.clone(),
                op: "list".to_string(),
                detail: format!("no answer within {}s", CHECK_TIMEOUT.as_secs()),
            }),
        }
    }
    /// Key of marker `name` beside the prefix (`<prefix>.<name>`), rather than in it, so
    /// etcd-backup-restore never lists it: `owner` names the cluster incarnation that writes
    /// under this prefix, `chain` the etcd cluster whose history the snapshots hold, `hashkv/…`
    /// etcd's key-space hashes ([`HashRecord`]).
    fn marker_path(&self, name: &str) -> Path {
        Path::from(format!(
            "{}.{name}",
            if self.prefix.is_empty() {
                "quorate"
            } else {
                &self.prefix
            }
        ))
    }

    /// The text of marker `name`, if it exists.
    pub async fn marker(&self, name: &str) -> Result<Option<String>, StoreError> {
        let path = self.marker_path(name);
        match self.store.get(&path).await {
            Ok(result) => {
                let bytes = result
                    .bytes()
                    .await
                    .map_err(|e| classify(e, self.cx("read marker", Some(path.as_ref()))))?;
                Ok(Some(String::from_utf8_lossy(&bytes).trim().to_string()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(classify(e, self.cx("read marker", Some(path.as_ref())))),
        }
    }

    /// Writes marker `name`, replacing it.
    pub async fn put_marker(&self, name: &str, text: &str) -> Result<(), StoreError> {
        let path = self.marker_path(name);
        self.store
            .put(&path, object_store::PutPayload::from(text.to_string()))
            .await
            .map(|_| ())
            .map_err(|e| classify(e, self.cx("write marker", Some(path.as_ref()))))
    }

    /// Writes marker `name` only if it does not exist yet; returns the text it holds afterwards
    /// (`text` when this call created it, another writer's otherwise). Where the store has no
    /// conditional create, it writes and reads back, which catches all but a simultaneous race.
    pub async fn create_marker(&self, name: &str, text: &str) -> Result<String, StoreError> {
        let path = self.marker_path(name);
        let options = object_store::PutOptions::from(object_store::PutMode::Create);
        match self
            .store
            .put_opts(
                &path,
                object_store::PutPayload::from(text.to_string()),
                options,
            )
            .await
        {
            Ok(_) => Ok(text.to_string()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                Ok(self.marker(name).await?.unwrap_or_default())
            }
            Err(object_store::Error::NotImplemented { .. }) => {
                if let Some(existing) = self.marker(name).await? {
                    return Ok(existing);
                }
                self.put_marker(name, text).await?;
                Ok(self.marker(name).await?.unwrap_or_default())
            }
            Err(e) => Err(classify(e, self.cx("create marker", Some(path.as_ref())))),
        }
    }

    /// The cluster identity that claimed this prefix, if any.
    pub async fn owner(&self) -> Result<Option<String>, StoreError> {
        self.marker("owner").await
    }

    /// Claims this prefix for cluster identity `owner` when nobody has; returns the owner
    /// afterwards (`owner` if this claim won).
    pub async fn claim_unclaimed(&self, owner: &str) -> Result<String, StoreError> {
        self.create_marker("owner", owner).await
    }

    /// Claims this prefix for cluster identity `owner`, replacing any claim (adoption).
    pub async fn claim(&self, owner: &str) -> Result<(), StoreError> {
        self.put_marker("owner", owner).await
    }

    /// Moves every snapshot under the prefix to `superseded-<suffix>-<name>/` beside it (kept,
    /// not deleted), and the hash records with them, so a new chain can start in the prefix;
    /// returns how many snapshots were moved. The archive's name must not start with the
    /// prefix: etcd-backup-restore lists an S3, GCS or Azure prefix as a plain key prefix and
    /// takes every `v2/` key under it for a snapshot of the chain.
    pub async fn archive(&self, suffix: &str) -> Result<usize, StoreError> {
        let listed = self.list().await?;
        let base = if self.prefix.is_empty() {
            "quorate".to_string()
        } else {
            self.prefix.clone()
        };
        let archive = match base.rsplit_once('/') {
            Some((parent, name)) => format!("{parent}/superseded-{suffix}-{name}"),
            None => format!("superseded-{suffix}-{base}"),
        };
        for snapshot in &listed {
            let from = Path::from(snapshot.path.as_str());
            let rest = snapshot
                .path
                .strip_prefix(&base)
                .unwrap_or(&snapshot.path)
                .trim_start_matches('/');
            let to = Path::from(format!("{archive}/{rest}"));
            self.store
                .copy(&from, &to)
                .await
                .map_err(|e| classify(e, self.cx("archive", Some(snapshot.path.as_str()))))?;
            self.delete(snapshot).await?;
        }
        self.move_hash_records(&archive).await?;
        Ok(listed.len())
    }
}
