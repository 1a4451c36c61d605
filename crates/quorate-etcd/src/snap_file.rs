//! A member's newest raft snapshot file (`<data-dir>/member/snap/<term>-<index>.snap`) and the
//! cluster version recorded in it: etcd's own evidence that the member snapshotted after the
//! cluster reached a version. etcd 3.7 replays the write-ahead log from the newest snapshot and
//! cannot parse the v2 requests 3.5 wrote, so a chained upgrade's 3.6 → 3.7 step waits until
//! every member's newest snapshot records cluster version 3.6 (core `etcd_version`).
//!
//! The file is etcd's `snappb.Snapshot` (a CRC-32C and the data), whose data is a
//! `raftpb.Snapshot` (data and metadata: index, term), whose data is the membership in etcd's
//! v2 store JSON, with the cluster version at `/0/version` (3.5 and 3.6 write it so).

use std::path::{Path, PathBuf};

/// A snapshot file larger than this is not read: its membership JSON is a few kilobytes; a
/// 3.4 member's file holds its whole v2 store, which says nothing quorate needs.
const MAX_SNAP_FILE: u64 = 64 * 1024 * 1024;

/// What the newest snapshot file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapFile {
    /// The file read.
    pub path: PathBuf,
    /// The raft index it was taken at.
    pub index: u64,
    /// The cluster version recorded in it (`/0/version`, e.g. `3.6.0`); `None` when it records
    /// none (a cluster that had not decided one yet).
    pub cluster_version: Option<String>,
}

/// Why a snapshot file could not be read: nothing may be concluded from it.
#[derive(Debug, thiserror::Error)]
pub enum SnapFileError {
    /// The directory or file cannot be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a snapshot etcd would load.
    #[error("{path} is not a raft snapshot etcd would load: {reason}")]
    Invalid {
        /// The path.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Clone, PartialEq, prost::Message)]
struct SnapEnvelope {
    #[prost(uint32, tag = "1")]
    crc: u32,
    #[prost(bytes = "vec", tag = "2")]
    data: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RaftSnapshot {
    #[prost(bytes = "vec", tag = "1")]
    data: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    metadata: Option<RaftSnapshotMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RaftSnapshotMetadata {
    #[prost(uint64, tag = "2")]
    index: u64,
    #[prost(uint64, tag = "3")]
    term: u64,
}

/// The `<term>-<index>` of an etcd snapshot file name (16 hex digits each), as etcd orders them.
fn term_index(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".snap")?;
    let (term, index) = stem.split_once('-')?;
    if term.len() != 16 || index.len() != 16 {
        return None;
    }
    Some((
        u64::from_str_radix(term, 16).ok()?,
        u64::from_str_radix(index, 16).ok()?,
    ))
}

/// The newest snapshot file of the member whose data directory is `data_dir` (the one etcd
/// loads first: highest term, then index), read and checked; `Ok(None)` when the member has
/// taken no snapshot (no such file, or no `member/snap` directory yet).
pub fn newest(data_dir: &Path) -> Result<Option<SnapFile>, SnapFileError> {
    let dir = data_dir.join("member").join("snap");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SnapFileError::Io {
                path: dir.display().to_string(),
                source,
            });
        }
    };
    let newest = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            term_index(&name).map(|key| (key, e.path()))
        })
        .max_by_key(|(key, _)| *key);
    newest.map(|(_, path)| read(&path)).transpose()
}

/// Reads and checks one snapshot file.
pub fn read(path: &Path) -> Result<SnapFile, SnapFileError> {
    let shown = path.display().to_string();
    let io = |source| SnapFileError::Io {
        path: shown.clone(),
        source,
    };
    let invalid = |reason: String| SnapFileError::Invalid {
        path: shown.clone(),
        reason,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_SNAP_FILE {
        return Err(invalid(format!(
            "{size} bytes, more than the {MAX_SNAP_FILE} read"
        )));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let envelope = <SnapEnvelope as prost::Message>::decode(bytes.as_slice())
        .map_err(|e| invalid(format!("its framing does not decode: {e}")))?;
    let crc = crc32c::crc32c(&envelope.data);
    if crc != envelope.crc {
        return Err(invalid(format!(
            "checksum {crc:#010x} where the file records {:#010x}",
            envelope.crc
        )));
    }
    let snapshot = <RaftSnapshot as prost::Message>::decode(envelope.data.as_slice())
        .map_err(|e| invalid(format!("its raft snapshot does not decode: {e}")))?;
    let index = snapshot.metadata.map(|m| m.index).unwrap_or_default();
    let store: serde_json::Value = serde_json::from_slice(&snapshot.data)
        .map_err(|e| invalid(format!("its membership is not etcd's store JSON: {e}")))?;
    let cluster_version = store
        .pointer("/Root/Children/0/Children/version/Value")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Ok(SnapFile {
        path: path.to_path_buf(),
        index,
        cluster_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_snap(dir: &Path, name: &str, index: u64, store: &str, corrupt: bool) {
        use prost::Message;
        let raft = RaftSnapshot {
            data: store.as_bytes().to_vec(),
            metadata: Some(RaftSnapshotMetadata { index, term: 2 }),
        }
        .encode_to_vec();
        let crc = crc32c::crc32c(&raft) ^ u32::from(corrupt);
        let file = SnapEnvelope { crc, data: raft }.encode_to_vec();
        let snap = dir.join("member").join("snap");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join(name), file).unwrap();
    }

    fn store(version: &str) -> String {
        format!(
            r#"{{"Root":{{"Path":"/","Children":{{"0":{{"Path":"/0","Children":{{"version":{{"Path":"/0/version","Value":"{version}"}}}}}}}}}}}}"#
        )
    }

    #[test]
    fn no_snapshot_directory_or_file_is_no_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest(dir.path()).unwrap(), None);
        std::fs::create_dir_all(dir.path().join("member/snap")).unwrap();
        std::fs::write(dir.path().join("member/snap/db"), b"not a snapshot").unwrap();
        assert_eq!(newest(dir.path()).unwrap(), None);
    }

    #[test]
    fn the_newest_file_by_term_then_index_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write_snap(
            dir.path(),
            "0000000000000002-0000000000000009.snap",
            9,
            &store("3.5.0"),
            false,
        );
        write_snap(
            dir.path(),
            "0000000000000002-0000000000000010.snap",
            16,
            &store("3.6.0"),
            false,
        );
        let newest = newest(dir.path()).unwrap().unwrap();
        assert_eq!(newest.index, 16);
        assert_eq!(newest.cluster_version.as_deref(), Some("3.6.0"));
    }

    #[test]
    fn a_damaged_file_is_an_error_not_a_version() {
        let dir = tempfile::tempdir().unwrap();
        write_snap(
            dir.path(),
            "0000000000000002-0000000000000010.snap",
            16,
            &store("3.6.0"),
            true,
        );
        let err = newest(dir.path()).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        write_snap(
            dir.path(),
            "0000000000000003-0000000000000010.snap",
            16,
            "{not json",
            false,
        );
        let err = newest(dir.path()).unwrap_err().to_string();
        assert!(err.contains("store JSON"), "{err}");
    }
}
