//! etcd's write-ahead log, read and appended to by the replay.
//!
//! The fast replay writes each source revision as a committed raft entry at the end of the
//! temporary member's WAL; etcd applies committed entries from its WAL when it starts, through
//! its own apply code (so revisions, versions and leases come out exactly as through its API),
//! without a network round trip or an fsync per revision.
//!
//! The format (the same in etcd 3.4 and 3.5; `server/storage/wal` in etcd's source): files
//! `<seq>-<index>.wal` read in name order, each a sequence of frames. A frame is a little-endian
//! `u64` length (low 56 bits: record size; when the top bit is set, bits 56..59 say how many
//! zero bytes pad the record to 8 bytes) followed by the record, a `walpb.Record { type = 1,
//! crc = 2, data = 3 }`. A zero length marks the preallocated rest of a file. Every record but a
//! `crc` record carries the CRC-32C of all record data so far (running across files); a `crc`
//! record (first in each file) carries the running CRC at that point.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::proto::{self, Reader};

/// Record type: etcd's metadata (node and cluster ID).
const METADATA: i64 = 1;
/// Record type: a raft log entry.
const ENTRY: i64 = 2;
/// Record type: raft's hard state (term, vote, commit).
const STATE: i64 = 3;
/// Record type: the running CRC at the start of a file.
const CRC: i64 = 4;
/// Record type: a raft snapshot marker.
const SNAPSHOT: i64 = 5;
/// etcd refuses records larger than this (`maxWALEntrySizeLimit`).
pub const MAX_RECORD_BYTES: usize = 10 * 1024 * 1024;

/// The WAL could not be read or extended.
#[derive(Debug, Error)]
pub enum WalError {
    /// File trouble.
    #[error("WAL {path}: {what}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// What was being done.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The content is not what etcd writes.
    #[error("WAL file {path} at byte {offset}: {problem}")]
    Corrupt {
        /// The file.
        path: String,
        /// Where.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
}

/// Raft's hard state as the WAL last recorded it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    /// The current term.
    pub term: u64,
    /// Who this member voted for in that term.
    pub vote: u64,
    /// The highest committed log index.
    pub commit: u64,
}

/// Where the WAL ends: what an appender needs to continue it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalEnd {
    /// The last WAL file.
    pub file: PathBuf,
    /// Byte offset of the first frame not written yet in that file.
    pub offset: u64,
    /// The running CRC after the last record.
    pub crc: u32,
    /// Index and term of the last entry (or snapshot marker).
    pub last_index: u64,
    /// Term of the last entry.
    pub last_term: u64,
    /// The last hard state.
    pub hard_state: HardState,
}

/// Reads every WAL file in `wal_dir` and returns where the log ends.
pub fn read_end(wal_dir: &Path) -> Result<WalEnd, WalError> {
    let io = |path: &Path, what| {
        let path = path.display().to_string();
        move |source| WalError::Io { path, what, source }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(wal_dir)
        .map_err(io(wal_dir, "list"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    let Some(last) = files.last().cloned() else {
        return Err(WalError::Corrupt {
            path: wal_dir.display().to_string(),
            offset: 0,
            problem: "no .wal file".to_string(),
        });
    };
    let mut end = WalEnd {
        file: last,
        offset: 0,
        crc: 0,
        last_index: 0,
        last_term: 0,
        hard_state: HardState::default(),
    };
    for path in &files {
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io(path, "read"))?;
        end.offset = scan(path, &bytes, &mut end)?;
    }
    Ok(end)
}

/// Walks one file's frames, updating `end`; returns the offset after its last frame.
fn scan(path: &Path, bytes: &[u8], end: &mut WalEnd) -> Result<u64, WalError> {
    let corrupt = |offset: usize, problem: String| WalError::Corrupt {
        path: path.display().to_string(),
        offset: offset as u64,
        problem,
    };
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let field = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if field == 0 {
            break;
        }
        let size = (field & !(0xff << 56)) as usize;
        let pad = if field >> 63 == 1 {
            ((field >> 56) & 0x7) as usize
        } else {
            0
        };
        let start = at + 8;
        if size > MAX_RECORD_BYTES || start + size + pad > bytes.len() {
            return Err(corrupt(
                at,
                format!("a frame of {size} bytes runs past the file"),
            ));
        }
        let record = decode_record(&bytes[start..start + size])
            .map_err(|e| corrupt(at, format!("undecodable record: {e}")))?;
        if record.kind == CRC {
            end.crc = record.crc;
        } else {
            end.crc = crc32c::crc32c_append(end.crc, record.data);
            if record.crc != end.crc {
                return Err(corrupt(
                    at,
                    format!(
                        "CRC mismatch (record says {:08x}, data gives {:08x})",
                        record.crc, end.crc
                    ),
                ));
            }
        }
        match record.kind {
            ENTRY => {
                let (index, term) = decode_entry_position(record.data)
                    .map_err(|e| corrupt(at, format!("undecodable entry: {e}")))?;
                end.last_index = index;
                end.last_term = term;
            }
            STATE => {
                end.hard_state = decode_hard_state(record.data)
                    .map_err(|e| corrupt(at, format!("undecodable hard state: {e}")))?;
            }
            SNAPSHOT => {
                let (index, term) = decode_snapshot(record.data)
                    .map_err(|e| corrupt(at, format!("undecodable snapshot marker: {e}")))?;
                if index > end.last_index {
                    end.last_index = index;
                    end.last_term = term;
                }
            }
            METADATA | CRC => {}
            other => return Err(corrupt(at, format!("unknown record type {other}"))),
        }
        at = start + size + pad;
    }
    Ok(at as u64)
}

struct Record<'a> {
    kind: i64,
    crc: u32,
    data: &'a [u8],
}

fn decode_record(bytes: &[u8]) -> Result<Record<'_>, String> {
    let mut record = Record {
        kind: 0,
        crc: 0,
        data: &[],
    };
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.next_field()? {
        match field {
            1 => record.kind = value.varint()? as i64,
            2 => record.crc = value.varint()? as u32,
            3 => record.data = value.bytes()?,
            _ => {}
        }
    }
    Ok(record)
}

/// `raftpb.Entry { Term = 2, Index = 3, Type = 1, Data = 4 }`: index and term.
fn decode_entry_position(bytes: &[u8]) -> Result<(u64, u64), String> {
    let (mut index, mut term) = (0, 0);
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.next_field()? {
        match field {
            2 => term = value.varint()?,
            3 => index = value.varint()?,
            _ => {}
        }
    }
    Ok((index, term))
}

/// `raftpb.HardState { term = 1, vote = 2, commit = 3 }`.
fn decode_hard_state(bytes: &[u8]) -> Result<HardState, String> {
    let mut state = HardState::default();
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.next_field()? {
        match field {
            1 => state.term = value.varint()?,
            2 => state.vote = value.varint()?,
            3 => state.commit = value.varint()?,
            _ => {}
        }
    }
    Ok(state)
}

/// `walpb.Snapshot { index = 1, term = 2 }`.
fn decode_snapshot(bytes: &[u8]) -> Result<(u64, u64), String> {
    let (mut index, mut term) = (0, 0);
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.next_field()? {
        match field {
            1 => index = value.varint()?,
            2 => term = value.varint()?,
            _ => {}
        }
    }
    Ok((index, term))
}

/// Appends committed entries to the end of a WAL (etcd must not be running on it).
pub struct WalAppender {
    path: PathBuf,
    out: BufWriter<File>,
    crc: u32,
    term: u64,
    hard_state: HardState,
    next_index: u64,
    bytes_written: u64,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for WalAppender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalAppender")
            .field("path", &self.path)
            .field("next_index", &self.next_index)
            .finish()
    }
}

impl WalAppender {
    /// Continues the WAL that ends at `end`. New entries get the last entry's term, which
    /// keeps the log's terms non-decreasing.
    pub fn open(end: &WalEnd) -> Result<WalAppender, WalError> {
        let io = |what| {
            let path = end.file.display().to_string();
            move |source| WalError::Io { path, what, source }
        };
        let mut file = OpenOptions::new()
            .write(true)
            .open(&end.file)
            .map_err(io("open for append"))?;
        file.seek(SeekFrom::Start(end.offset))
            .map_err(io("seek to the end of the log"))?;
        Ok(WalAppender {
            path: end.file.clone(),
            out: BufWriter::with_capacity(1 << 20, file),
            crc: end.crc,
            term: end.last_term.max(1),
            hard_state: end.hard_state,
            next_index: end.last_index + 1,
            bytes_written: 0,
            scratch: Vec::new(),
        })
    }

    /// The index the next entry gets.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Bytes appended so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Appends a normal entry carrying `data` (an `InternalRaftRequest`); returns its index.
    pub fn append_entry(&mut self, data: &[u8]) -> Result<u64, WalError> {
        let index = self.next_index;
        let mut entry = Vec::with_capacity(data.len() + 24);
        proto::put_varint_field(&mut entry, 1, 0); // Type: EntryNormal
        proto::put_varint_field(&mut entry, 2, self.term);
        proto::put_varint_field(&mut entry, 3, index);
        proto::put_bytes_field(&mut entry, 4, data);
        self.write_record(ENTRY, &entry)?;
        self.next_index += 1;
        Ok(index)
    }

    /// Records every appended entry as committed, flushes and syncs the file.
    pub fn commit(mut self) -> Result<u64, WalError> {
        let last = self.next_index - 1;
        let state = HardState {
            term: self.hard_state.term.max(self.term),
            vote: self.hard_state.vote,
            commit: last.max(self.hard_state.commit),
        };
        let mut bytes = Vec::new();
        proto::put_varint_field(&mut bytes, 1, state.term);
        proto::put_varint_field(&mut bytes, 2, state.vote);
        proto::put_varint_field(&mut bytes, 3, state.commit);
        self.write_record(STATE, &bytes)?;
        let path = self.path.display().to_string();
        let file = self.out.into_inner().map_err(|e| WalError::Io {
            path: path.clone(),
            what: "flush",
            source: e.into_error(),
        })?;
        file.sync_all().map_err(|source| WalError::Io {
            path,
            what: "sync",
            source,
        })?;
        Ok(last)
    }

    fn write_record(&mut self, kind: i64, data: &[u8]) -> Result<(), WalError> {
        self.crc = crc32c::crc32c_append(self.crc, data);
        self.scratch.clear();
        proto::put_varint_field(&mut self.scratch, 1, kind as u64);
        proto::put_varint_field(&mut self.scratch, 2, u64::from(self.crc));
        proto::put_bytes_field(&mut self.scratch, 3, data);
        let size = self.scratch.len();
        if size > MAX_RECORD_BYTES {
            return Err(WalError::Corrupt {
                path: self.path.display().to_string(),
                offset: 0,
                problem: format!(
                    "a record of {size} bytes is over etcd's limit of {MAX_RECORD_BYTES}"
                ),
            });
        }
        let pad = (8 - size % 8) % 8;
        let mut field = size as u64;
        if pad != 0 {
            field |= (0x80 | pad as u64) << 56;
        }
        let path = &self.path;
        let io = |source| WalError::Io {
            path: path.display().to_string(),
            what: "append",
            source,
        };
        self.out.write_all(&field.to_le_bytes()).map_err(io)?;
        self.out.write_all(&self.scratch).map_err(io)?;
        self.out.write_all(&[0u8; 8][..pad]).map_err(io)?;
        self.bytes_written += (8 + size + pad) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_records_read_back_with_a_continuous_crc() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("0000000000000000-0000000000000000.wal");
        // An empty WAL as etcd starts one: a crc record with 0, then preallocated zeros.
        let mut start = Vec::new();
        let mut rec = Vec::new();
        proto::put_varint_field(&mut rec, 1, CRC as u64);
        proto::put_varint_field(&mut rec, 2, 0);
        let pad = (8 - rec.len() % 8) % 8;
        start.extend_from_slice(&((rec.len() as u64) | ((0x80 | pad as u64) << 56)).to_le_bytes());
        start.extend_from_slice(&rec);
        start.extend(std::iter::repeat_n(0, pad + 4096));
        std::fs::write(&file, &start).unwrap();

        let end = read_end(dir.path()).unwrap();
        assert_eq!((end.last_index, end.offset), (0, 16));
        let mut wal = WalAppender::open(&end).unwrap();
        assert_eq!(wal.append_entry(b"first").unwrap(), 1);
        assert_eq!(wal.append_entry(&[7; 13]).unwrap(), 2);
        assert_eq!(wal.commit().unwrap(), 2);

        let end = read_end(dir.path()).unwrap();
        assert_eq!(end.last_index, 2);
        assert_eq!(end.last_term, 1);
        assert_eq!(end.hard_state.commit, 2);
        // A second round continues the chain.
        let mut wal = WalAppender::open(&end).unwrap();
        assert_eq!(wal.append_entry(b"third").unwrap(), 3);
        wal.commit().unwrap();
        assert_eq!(read_end(dir.path()).unwrap().hard_state.commit, 3);

        // A flipped byte in a record's data is a CRC mismatch naming the file and offset.
        let mut bytes = std::fs::read(&file).unwrap();
        let at = bytes.windows(5).position(|w| w == b"first").unwrap();
        bytes[at] = b'F';
        std::fs::write(&file, &bytes).unwrap();
        let err = read_end(dir.path()).unwrap_err().to_string();
        assert!(err.contains("CRC mismatch"), "{err}");
        assert!(err.contains(".wal at byte 16"), "{err}");
    }
}
