//! Checks restored data against what etcd itself said about the key space when it was backed
//! up: the backup leader records etcd's `HashKV` at a revision ([`crate::store::HashRecord`]),
//! and a restore to that revision computes the same hash over the database it produced.
//!
//! etcd's `HashKV(R)` is a CRC-32C (Castagnoli) of `key` followed by every MVCC entry (bucket
//! key, then value) of the `key` bucket up to revision R in key order, where an entry at or
//! below the compaction revision C counts only if it is its key's newest revision at R and not
//! a deletion (etcd's `keep` set; etcd 3.4 and 3.5 agree). The result therefore does not depend
//! on how far a compaction physically got, only on C, so a restored database whose own
//! compaction is at or below the recorded C hashes exactly like the source did. This module
//! computes it in two passes over the file: the first finds each key's newest revision at R,
//! the second hashes.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::Path;

use super::bolt::{BoltError, BoltReader};
use super::proto::KeyFacts;

/// What hashing a database file found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComputedHash {
    /// etcd's `HashKV` at the revision, under the compaction given.
    pub hash: u32,
    /// Keys live at the revision. With none, etcd hashes whatever compacted entries are
    /// still on disk, which a restored file cannot reproduce.
    pub live_keys: u64,
    /// The compaction the file has physically finished (`finishedCompactRev`); entries at or
    /// below it that etcd did not keep are gone.
    pub finished_compaction: i64,
}

/// A revision as etcd keys MVCC entries: main revision and the index within it.
type Rev = (i64, i64);

/// Computes etcd's `HashKV(revision)` over `db` as a member with compaction revision
/// `compact_revision` would.
pub fn key_space_hash(
    db: &Path,
    revision: i64,
    compact_revision: i64,
) -> Result<ComputedHash, BoltError> {
    let reader = BoltReader::open(db)?;
    let buckets = reader.buckets()?;
    let bucket = |name: &[u8]| buckets.iter().find(|b| b.name == name);
    let mut finished_compaction = 0;
    if let Some(meta) = bucket(b"meta") {
        reader.for_each(meta, &mut |k, v| {
            if k == b"finishedCompactRev" {
                finished_compaction = entry_revision(v).map_or(0, |r| r.0);
            }
            Ok(())
        })?;
    }
    let Some(keys) = bucket(b"key") else {
        return Ok(ComputedHash {
            hash: crc32c::crc32c(b"key"),
            live_keys: 0,
            finished_compaction,
        });
    };
    // Pass 1: each key's newest entry at `revision`, and whether it deletes the key.
    let mut newest: HashMap<u64, (Rev, bool)> = HashMap::new();
    reader.for_each(keys, &mut |k, v| {
        let rev = entry_revision(k).ok_or_else(|| bad_key(k))?;
        if rev.0 <= revision {
            newest.insert(name_hash(v)?, (rev, is_tombstone(k)));
        }
        Ok(())
    })?;
    let live_keys = newest.values().filter(|(_, tomb)| !tomb).count() as u64;
    // Pass 2: the hash.
    let mut hash = crc32c::crc32c(b"key");
    reader.for_each(keys, &mut |k, v| {
        let rev = entry_revision(k).ok_or_else(|| bad_key(k))?;
        if rev.0 > revision {
            return Ok(());
        }
        if rev.0 <= compact_revision && live_keys > 0 {
            let kept = !is_tombstone(k) && newest.get(&name_hash(v)?) == Some(&(rev, false));
            if !kept {
                return Ok(());
            }
        }
        hash = crc32c::crc32c_append(hash, k);
        hash = crc32c::crc32c_append(hash, v);
        Ok(())
    })?;
    Ok(ComputedHash {
        hash,
        live_keys,
        finished_compaction,
    })
}

/// The revision of an MVCC entry's bucket key (8 bytes main, `_`, 8 bytes sub, `t` for a
/// deletion), or of a `meta` revision value.
fn entry_revision(k: &[u8]) -> Option<Rev> {
    if k.len() < 17 || k[8] != b'_' {
        return None;
    }
    let main = i64::from_be_bytes(k[..8].try_into().ok()?);
    let sub = i64::from_be_bytes(k[9..17].try_into().ok()?);
    Some((main, sub))
}

fn is_tombstone(k: &[u8]) -> bool {
    k.len() == 18 && k[17] == b't'
}

fn bad_key(k: &[u8]) -> String {
    format!("an MVCC entry with a malformed key of {} bytes", k.len())
}

/// A hash of the user key an entry's `mvccpb.KeyValue` names (field 1).
fn name_hash(value: &[u8]) -> Result<u64, String> {
    let facts = KeyFacts::decode_from(value).map_err(|e| e.to_string())?;
    if facts.key.is_empty() {
        return Err("an MVCC entry without a key".to_string());
    }
    let mut h = DefaultHasher::new();
    h.write(&facts.key);
    Ok(h.finish())
}

/// What a restore can say about its result against the hash etcd recorded at backup time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Verification {
    /// etcd's hash at the restored revision, recorded when it was backed up, matches.
    Verified {
        /// The revision.
        revision: i64,
        /// The hash both agree on.
        hash: u32,
    },
    /// The backups hold no hash at the restored revision (written by another tool or an older
    /// quorate, or a target between recorded revisions).
    NotRecorded {
        /// The restored revision.
        revision: i64,
    },
    /// A hash is recorded but this data cannot reproduce it; why.
    NotComparable {
        /// The restored revision.
        revision: i64,
        /// Why.
        why: String,
    },
    /// Verification was turned off.
    #[default]
    Skipped,
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verification::Verified { revision, hash } => write!(
                f,
                "verified: the key space at revision {revision} hashes to {hash:08x}, as etcd \
                 recorded at backup time"
            ),
            Verification::NotRecorded { revision } => write!(
                f,
                "not verified: the backups hold no key-space hash at revision {revision}"
            ),
            Verification::NotComparable { revision, why } => {
                write!(f, "not verified at revision {revision}: {why}")
            }
            Verification::Skipped => write!(f, "not verified: verification was turned off"),
        }
    }
}

/// The restored key space hashes differently from what etcd recorded at backup time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashMismatch {
    /// The revision.
    pub revision: i64,
    /// What etcd recorded.
    pub recorded: u32,
    /// What the restored data hashes to.
    pub restored: u32,
    /// The compaction both are taken under.
    pub compact_revision: i64,
    /// Where the record is stored.
    pub record: String,
}

/// Checks the database `db`, restored up to `revision` (before any revision bump), against
/// `record`: the outcome, or the mismatch that must fail the restore.
pub fn check(
    db: &Path,
    revision: i64,
    record: Option<&crate::store::HashRecord>,
) -> Result<Result<Verification, HashMismatch>, BoltError> {
    let Some(record) = record.filter(|r| r.revision == revision) else {
        return Ok(Ok(Verification::NotRecorded { revision }));
    };
    // etcd answers -1 when it never compacted.
    let compaction = record.compact_revision.max(0);
    let computed = key_space_hash(db, revision, compaction)?;
    let not_comparable = |why: String| Ok(Ok(Verification::NotComparable { revision, why }));
    if computed.finished_compaction > compaction {
        return not_comparable(format!(
            "the restored data is compacted at revision {}, past the compaction the hash was \
             taken under ({compaction})",
            computed.finished_compaction
        ));
    }
    if computed.live_keys == 0 {
        return not_comparable(
            "no key is live there, and etcd then hashes compacted entries a restore does not \
             carry"
                .to_string(),
        );
    }
    if computed.hash == record.hash {
        return Ok(Ok(Verification::Verified {
            revision,
            hash: computed.hash,
        }));
    }
    Ok(Err(HashMismatch {
        revision,
        recorded: record.hash,
        restored: computed.hash,
        compact_revision: compaction,
        record: record.location.clone(),
    }))
}
