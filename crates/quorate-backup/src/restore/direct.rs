//! Applies replayed revisions by writing etcd's database file directly ([`super::bolt`]): the
//! full snapshot's buckets are copied into a new file and the `key` bucket is continued with one
//! MVCC entry per replayed event, exactly as etcd's own apply writes them (key: the revision
//! and the event's index within it, `t` appended for a deletion; value: the `mvccpb.KeyValue`
//! with the event's create revision, mod revision, version, value and lease). `etcdctl
//! snapshot restore` then turns the file into the member's data directory.
//!
//! Why: any replay through etcd, over its API or from its log, is held to etcd's apply loop
//! (about 10,000 single-key revisions/s for etcd 3.4 on two cores, measured; etcd-backup-restore
//! replays through an embedded etcd at about 8,900 events/s). Writing the file is bound by
//! decoding the deltas and the disk. `docs/benchmarks/backup.md` has the figures.
//!
//! Every event is checked against the key space before it is written, which is stronger than
//! watching etcd's revision: a PUT must continue its key (version 1 and created at its own
//! revision for a new key, else the same create revision and the next version) and a DELETE
//! must remove a key that exists. The key space is held as a hash of each live key with its
//! create revision and version (about 40 bytes a key), built while the snapshot's `key` bucket
//! is copied. A lease a PUT names that the snapshot does not hold is granted with the TTL the
//! delta recorded, as etcd would have granted it.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::path::{Path, PathBuf};

use prost::Message;
use sha2::{Digest, Sha256};

use super::apply::{Applier, Landed, Landing, Pending, ReplayError};
use super::bolt::{BoltError, BoltReader, BoltWriter, BucketBuilder, BucketRef, KeyValueVisitor};
use super::finish::verify_file;
use super::proto::{KeyValue, Lease};
use super::{RestoreError, RestoreOptions, tools};
use crate::delta::EVENT_DELETE;

/// What a live key looks like: its create revision and version.
type KeyFacts = (i64, i64);

/// Writes the restored database file, revision by revision.
#[derive(Debug)]
pub struct DirectApplier {
    out: PathBuf,
    writer: BoltWriter,
    keys: BucketBuilder,
    leases: BTreeMap<[u8; 8], Vec<u8>>,
    lease_sequence: u64,
    meta: BTreeMap<Vec<u8>, Vec<u8>>,
    meta_sequence: u64,
    live: HashMap<u64, KeyFacts>,
    head: i64,
    default_lease_ttl: i64,
    bump: Option<u64>,
}

impl DirectApplier {
    /// Checks the full snapshot's integrity hash (unless `skip_hash_check`), copies its
    /// buckets into `out` and reads its key space and head revision.
    pub fn start(
        full: &Path,
        full_name: &str,
        out: &Path,
        skip_hash_check: bool,
        default_lease_ttl: i64,
        bump: Option<u64>,
    ) -> Result<DirectApplier, ReplayError> {
        let err = |operation, e: String| ReplayError::Etcd {
            operation,
            object: full_name.to_string(),
            revision: 0,
            message: e,
        };
        if !skip_hash_check {
            check_snapshot_hash(full).map_err(|e| err("checking the full snapshot", e))?;
        }
        let bolt = |e: BoltError| err("reading the full snapshot", e.to_string());
        let reader = BoltReader::open(full).map_err(bolt)?;
        let mut writer = BoltWriter::create(out, reader.page_size()).map_err(bolt)?;
        let mut keys = None;
        let mut leases = BTreeMap::new();
        let mut lease_sequence = 0;
        let mut meta = BTreeMap::new();
        let mut meta_sequence = 0;
        let mut live = HashMap::new();
        let mut head = 0;
        for bucket in reader.buckets().map_err(bolt)? {
            match bucket.name.as_slice() {
                b"key" => {
                    let builder = copy_bucket(&reader, &mut writer, &bucket, &mut |k, v| {
                        head = head.max(main_revision(k));
                        track(&mut live, k, v)
                    })
                    .map_err(bolt)?;
                    keys = Some(builder);
                }
                b"lease" => {
                    lease_sequence = bucket.sequence;
                    reader
                        .for_each(&bucket, &mut |k, v| {
                            let id: [u8; 8] = k
                                .try_into()
                                .map_err(|_| format!("lease key of {} bytes", k.len()))?;
                            leases.insert(id, v.to_vec());
                            Ok(())
                        })
                        .map_err(bolt)?;
                }
                b"meta" => {
                    // Written at the end: a revision bump marks the new head compacted here.
                    meta_sequence = bucket.sequence;
                    reader
                        .for_each(&bucket, &mut |k, v| {
                            if k == b"finishedCompactRev" && v.len() >= 8 {
                                head = head.max(main_revision(v));
                            }
                            meta.insert(k.to_vec(), v.to_vec());
                            Ok(())
                        })
                        .map_err(bolt)?;
                }
                _ => {
                    copy_bucket(&reader, &mut writer, &bucket, &mut |_, _| Ok(()))
                        .and_then(|builder| builder.finish(&mut writer))
                        .map_err(bolt)?;
                }
            }
        }
        let keys = keys.ok_or_else(|| {
            err(
                "reading the full snapshot",
                "it has no `key` bucket: not an etcd v3 database".to_string(),
            )
        })?;
        Ok(DirectApplier {
            out: out.to_path_buf(),
            writer,
            keys,
            leases,
            lease_sequence,
            meta,
            meta_sequence,
            live,
            head: head.max(1),
            default_lease_ttl,
            bump,
        })
    }

    /// Writes one source revision's events; returns the leases granted for them.
    fn write(&mut self, pending: &Pending) -> Result<u64, ReplayError> {
        let revision = pending.revision;
        let mut granted = 0;
        for (sub, event) in pending.events.iter().enumerate() {
            let kv = event.etcd_event.kv.as_ref().expect("validated");
            let diverged = |problem: String| ReplayError::Diverged {
                object: pending.object.clone(),
                revision,
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                problem,
            };
            let hash = key_hash(&kv.key);
            let mut key = revision_key(revision, sub as i64);
            let value = if event.etcd_event.kind == EVENT_DELETE {
                if self.live.remove(&hash).is_none() {
                    return Err(diverged("it is deleted but does not exist".to_string()));
                }
                key.push(b't');
                KeyValue {
                    key: kv.key.clone(),
                    ..KeyValue::default()
                }
            } else {
                let expected = match self.live.get(&hash) {
                    None => (revision, 1),
                    Some(&(created, version)) => (created, version + 1),
                };
                if (kv.create_revision, kv.version) != expected {
                    return Err(diverged(format!(
                        "the event says created at revision {} with version {}, the restored \
                         data expects created at {} with version {}",
                        kv.create_revision, kv.version, expected.0, expected.1
                    )));
                }
                self.live.insert(hash, expected);
                if kv.lease != 0 {
                    let id = kv.lease.to_be_bytes();
                    if !self.leases.contains_key(&id) {
                        let ttl = event
                            .lease_ttl
                            .filter(|t| *t > 0)
                            .unwrap_or(self.default_lease_ttl);
                        let lease = Lease {
                            id: kv.lease,
                            ttl,
                            remaining_ttl: 0,
                        };
                        self.leases.insert(id, lease.encode_to_vec());
                        granted += 1;
                    }
                }
                KeyValue {
                    key: kv.key.clone(),
                    create_revision: expected.0,
                    mod_revision: revision,
                    version: expected.1,
                    value: kv.value.clone(),
                    lease: kv.lease,
                }
            }
            .encode_to_vec();
            self.keys
                .put(&mut self.writer, &key, &value)
                .map_err(|e| diverged(e.to_string()))?;
        }
        self.head = revision;
        Ok(granted)
    }

    /// Writes the `key`, `lease` and `meta` buckets and the file's root (after the revision
    /// bump, when asked for: an empty entry at the raised revision, which `scheduledCompactRev`
    /// marks compacted, as etcdutl writes them); returns the file and its head revision.
    fn complete(mut self) -> Result<(PathBuf, i64), ReplayError> {
        let (out, replayed) = (self.out.display().to_string(), self.head);
        let err = |e: BoltError| ReplayError::Etcd {
            operation: "writing the restored database",
            object: out.clone(),
            revision: replayed,
            message: e.to_string(),
        };
        let mut writer = self.writer;
        if let Some(amount) = self.bump.filter(|a| *a > 0) {
            self.head += amount as i64;
            self.keys
                .put(&mut writer, &revision_key(self.head, 0), &[])
                .map_err(err)?;
            self.meta
                .insert(b"scheduledCompactRev".to_vec(), revision_key(self.head, 0));
        }
        self.keys.finish(&mut writer).map_err(err)?;
        let mut meta = writer.bucket(b"meta", self.meta_sequence);
        for (k, v) in &self.meta {
            meta.put(&mut writer, k, v).map_err(err)?;
        }
        meta.finish(&mut writer).map_err(err)?;
        let mut leases = writer.bucket(b"lease", self.lease_sequence);
        for (id, value) in &self.leases {
            leases.put(&mut writer, id, value).map_err(err)?;
        }
        leases.finish(&mut writer).map_err(err)?;
        writer.finish(1).map_err(err)?;
        Ok((self.out, self.head))
    }
}

/// Copies every entry of `bucket` into a new bucket of `writer`, showing each to `see` first;
/// returns the new bucket, still open for more keys.
fn copy_bucket(
    reader: &BoltReader,
    writer: &mut BoltWriter,
    bucket: &BucketRef,
    see: &mut KeyValueVisitor<'_>,
) -> Result<BucketBuilder, BoltError> {
    let mut builder = writer.bucket(&bucket.name, bucket.sequence);
    let mut write_err = None;
    reader
        .for_each(bucket, &mut |k, v| {
            see(k, v)?;
            builder.put(writer, k, v).map_err(|e| {
                let text = e.to_string();
                write_err = Some(e);
                text
            })
        })
        .map_err(|e| write_err.take().unwrap_or(e))?;
    Ok(builder)
}

/// etcd's key for an MVCC entry: the main revision, `_`, the index within the revision (both
/// big-endian).
fn revision_key(main: i64, sub: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(18);
    key.extend_from_slice(&main.to_be_bytes());
    key.push(b'_');
    key.extend_from_slice(&sub.to_be_bytes());
    key
}

fn main_revision(key: &[u8]) -> i64 {
    key.get(..8)
        .map_or(0, |b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
}

fn key_hash(key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(key);
    h.finish()
}

/// Follows one MVCC entry of the snapshot into the live key set.
fn track(live: &mut HashMap<u64, KeyFacts>, key: &[u8], value: &[u8]) -> Result<(), String> {
    let facts = super::proto::KeyFacts::decode_from(value).map_err(|e| e.to_string())?;
    let hash = key_hash(&facts.key);
    if key.len() == 18 && key[17] == b't' {
        live.remove(&hash);
    } else {
        live.insert(hash, (facts.create_revision, facts.version));
    }
    Ok(())
}

/// A snapshot from etcd ends in the SHA-256 of what precedes it (its size is then 32 more than
/// a multiple of 512); a copied database file has none, and is refused unless the caller skips
/// the check, as `etcdctl snapshot restore` does.
fn check_snapshot_hash(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let size = file
        .metadata()
        .map_err(|e| format!("stat {}: {e}", path.display()))?
        .len();
    if size % 512 != 32 {
        return Err(format!(
            "{} has no integrity hash (a database file copied from a data directory?); restore \
             it with the hash check skipped",
            path.display()
        ));
    }
    let mut hasher = Sha256::new();
    let mut left = size - 32;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = (left as usize).min(buf.len());
        file.read_exact(&mut buf[..n])
            .map_err(|e| format!("read {}: {e}", path.display()))?;
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    let mut trailer = [0u8; 32];
    file.read_exact(&mut trailer)
        .map_err(|e| format!("read {}: {e}", path.display()))?;
    if hasher.finalize().as_slice() != trailer {
        return Err(format!(
            "{}: the integrity hash does not match its content; the snapshot is damaged",
            path.display()
        ));
    }
    Ok(())
}

impl DirectApplier {
    /// [`DirectApplier::start`] off the async threads (reading and copying the whole snapshot
    /// is blocking file work), writing `work/replayed.db`. The snapshot's integrity hash is
    /// not checked again: the pipeline checked it as the file reached the disk.
    pub async fn open(
        options: &RestoreOptions,
        db: &Path,
        full_name: &str,
        work: &Path,
    ) -> Result<DirectApplier, ReplayError> {
        let (db, name, out) = (
            db.to_path_buf(),
            full_name.to_string(),
            work.join("replayed.db"),
        );
        // The pipeline verified the integrity hash as the snapshot reached the disk (fetch).
        let (skip, ttl, bump) = (true, options.default_lease_ttl, options.revision_bump);
        tokio::task::spawn_blocking(move || DirectApplier::start(&db, &name, &out, skip, ttl, bump))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

impl Applier for DirectApplier {
    fn head(&self) -> i64 {
        self.head
    }

    async fn apply(&mut self, pending: &Pending) -> Result<u64, ReplayError> {
        self.write(pending)
    }

    /// Completes the file, checks it against the recorded hash (before `snapshot restore`
    /// compacts a bumped revision), and builds the data directory from it.
    async fn finish(self, landing: &Landing<'_>, replayed: i64) -> Result<Landed, RestoreError> {
        let (db, restored_revision) = self.complete()?;
        let verification = verify_file(db.clone(), replayed, landing.options).await?;
        // The file carries no integrity hash; it was checked as it was written.
        tools::snapshot_restore(
            landing.tools,
            &db,
            landing.label,
            landing.member,
            landing.part,
            true,
        )
        .await?;
        Ok(Landed {
            restored_revision,
            verification,
        })
    }
}
