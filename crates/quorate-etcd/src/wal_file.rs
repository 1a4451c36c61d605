//! Whether a member's write-ahead log holds anything beyond the header etcd writes when it
//! creates the log.
//!
//! etcd creates the log (a CRC record, the member/cluster metadata and an empty snapshot
//! marker) before its raft loop persists the first entries, the initial membership. When etcd
//! stops in between — a port it binds after creating its data, such as the metrics port, is
//! taken — the log holds only that header: etcd starts on it as a member of no configuration,
//! never elects a leader, and never will. Such a log holds no entry and no vote, so the
//! directory holds no data; it is the one case where a log is evidence that nothing was ever
//! written.
//!
//! The log is etcd's `wal` format: frames of a little-endian 64-bit length (low 56 bits: record
//! size; top bit set: the low 3 bits of the top byte are padding) and a `walpb.Record`; a zero
//! length ends the log (the file is preallocated with zeros).

use std::io::Read;
use std::path::Path;

/// How much of the log is read: the header is about a hundred bytes; a log with more in it is
/// recognised at its fourth record.
const READ_LIMIT: u64 = 64 * 1024;

/// `walpb.Record` types etcd writes when it creates the log.
const METADATA_RECORD: i64 = 1;
const CRC_RECORD: i64 = 4;
const SNAPSHOT_RECORD: i64 = 5;

#[derive(Clone, PartialEq, prost::Message)]
struct Record {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(bytes = "vec", tag = "3")]
    data: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SnapshotMarker {
    #[prost(uint64, tag = "1")]
    index: u64,
    #[prost(uint64, tag = "2")]
    term: u64,
}

/// True when the log in `wal_dir` (`<data-dir>/member/wal`) is exactly one file holding
/// nothing but the header etcd writes when it creates it: no raft entry, no vote, no snapshot.
/// Anything else — entries, a second file, a record this reader does not know, a frame it
/// cannot decode — is `false`: only a positive reading counts.
pub fn header_only(wal_dir: &Path) -> std::io::Result<bool> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(wal_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "wal") {
            files.push(path);
        }
    }
    let [file] = files.as_slice() else {
        return Ok(false);
    };
    let mut head = Vec::new();
    std::fs::File::open(file)?
        .take(READ_LIMIT)
        .read_to_end(&mut head)?;
    Ok(records_are_header_only(&head))
}

/// Whether `log` (the start of a log file) ends, at a zero frame or at its end, after nothing
/// but creation records.
fn records_are_header_only(log: &[u8]) -> bool {
    let mut rest = log;
    let mut records = 0;
    loop {
        let Some((frame, after)) = rest.split_first_chunk::<8>() else {
            // The file ends at a frame boundary: the log ends (etcd reads it so too).
            return rest.is_empty() && records > 0;
        };
        let length = u64::from_le_bytes(*frame);
        if length == 0 {
            return records > 0;
        }
        let size = (length & 0x00ff_ffff_ffff_ffff) as usize;
        let padding = if length >> 63 == 1 {
            ((length >> 56) & 0x7) as usize
        } else {
            0
        };
        let Some(body) = after.get(..size) else {
            return false;
        };
        let Ok(record) = <Record as prost::Message>::decode(body) else {
            return false;
        };
        let creation = match record.r#type {
            CRC_RECORD | METADATA_RECORD => true,
            SNAPSHOT_RECORD => <SnapshotMarker as prost::Message>::decode(record.data.as_slice())
                .is_ok_and(|s| s.index == 0 && s.term == 0),
            _ => false,
        };
        if !creation {
            return false;
        }
        records += 1;
        let Some(next) = after.get(size + padding..) else {
            return false;
        };
        rest = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The first 80 bytes of the log etcd 3.6.16 left when its metrics port was taken right
    /// after it created its data (the rest of the 64 MB file is zeros).
    const ETCD_HEADER_ONLY: [u8; 80] = [
        0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x84, 0x08, 0x04, 0x10, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x1f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x08, 0x01, 0x10, 0xc2, 0xec, 0xae,
        0xea, 0x0f, 0x1a, 0x15, 0x08, 0x81, 0xfc, 0xf0, 0x9b, 0x8d, 0x95, 0xaa, 0x8d, 0x15, 0x10,
        0xda, 0xf8, 0x87, 0xeb, 0xf9, 0xd5, 0xa8, 0xad, 0xac, 0x01, 0x00, 0x0e, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x82, 0x08, 0x05, 0x10, 0x8f, 0xd9, 0xd4, 0xa7, 0x04, 0x1a, 0x04, 0x08,
        0x00, 0x10, 0x00, 0x00, 0x00,
    ];

    fn frame(r#type: i64, data: Vec<u8>) -> Vec<u8> {
        let body = Record { r#type, data }.encode_to_vec();
        let padding = (8 - body.len() % 8) % 8;
        let mut length = body.len() as u64;
        if padding > 0 {
            length |= (0x80 | padding as u64) << 56;
        }
        let mut out = length.to_le_bytes().to_vec();
        out.extend(body);
        out.extend(vec![0; padding]);
        out
    }

    fn with_zeros(mut log: Vec<u8>) -> Vec<u8> {
        log.extend([0; 64]);
        log
    }

    #[test]
    fn the_log_etcd_leaves_when_it_stops_before_its_first_entries_is_header_only() {
        assert!(records_are_header_only(&with_zeros(
            ETCD_HEADER_ONLY.to_vec()
        )));
        assert!(records_are_header_only(&ETCD_HEADER_ONLY));
    }

    #[test]
    fn an_entry_a_vote_a_snapshot_or_damage_is_not_header_only() {
        let header = ETCD_HEADER_ONLY[..80 - 24].to_vec();
        let marker = |index, term| SnapshotMarker { index, term }.encode_to_vec();
        for (what, tail) in [
            ("an entry", frame(2, vec![0x08, 0x01])),
            ("a hard state", frame(3, vec![0x08, 0x02])),
            ("a snapshot at index 5", frame(5, marker(5, 2))),
            ("an unknown record", frame(9, vec![])),
            (
                "a frame longer than the file",
                vec![0xff, 0, 0, 0, 0, 0, 0, 0, 1],
            ),
            (
                "bytes that are no record",
                vec![3, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff],
            ),
        ] {
            let mut log = header.clone();
            log.extend(tail);
            assert!(!records_are_header_only(&with_zeros(log)), "{what}");
        }
        assert!(!records_are_header_only(&[]), "an empty file");
        assert!(!records_are_header_only(&[0; 16]), "only zeros");
    }

    #[test]
    fn a_second_log_file_is_not_header_only() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str| {
            std::fs::write(dir.path().join(name), with_zeros(ETCD_HEADER_ONLY.to_vec())).unwrap()
        };
        write("0000000000000000-0000000000000000.wal");
        write("0.tmp");
        assert!(header_only(dir.path()).unwrap());
        write("0000000000000001-0000000000000010.wal");
        assert!(!header_only(dir.path()).unwrap());
    }
}
