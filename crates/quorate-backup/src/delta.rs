//! The delta snapshot format of etcd-backup-restore: a JSON array of watch events, each wrapped
//! with the time it was seen, followed by the SHA-256 of that JSON (32 raw bytes) so a damaged
//! object is detected before anything is applied.
//!
//! The JSON of an event is what Go's `encoding/json` makes of etcd's `mvccpb.Event`: numeric
//! `type` (0 = PUT, 1 = DELETE), snake_case revision fields, base64 keys and values, every zero
//! value left out. quorate adds `leaseTTL` (the lease's granted TTL when the event was captured)
//! beside `etcdEvent`; etcd-backup-restore ignores fields it does not know.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// Size of the checksum that ends every delta snapshot.
pub const CHECKSUM_LEN: usize = 32;

/// One captured watch event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaEvent {
    /// The etcd event.
    #[serde(rename = "etcdEvent")]
    pub etcd_event: EtcdEvent,
    /// When the event was captured (RFC 3339).
    pub time: String,
    /// TTL in seconds the event's lease was granted with, when the key carries a lease.
    #[serde(rename = "leaseTTL", default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl: Option<i64>,
}

/// `mvccpb.Event` as Go serializes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdEvent {
    /// 0 = PUT, 1 = DELETE.
    #[serde(rename = "type", default, skip_serializing_if = "is_zero_i32")]
    pub kind: i32,
    /// The key-value after the event (for a DELETE: key and mod revision only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KeyValue>,
    /// The key-value before the event, when the watch asked for it.
    #[serde(rename = "prev_kv", default, skip_serializing_if = "Option::is_none")]
    pub prev_kv: Option<KeyValue>,
}

/// Event type PUT.
pub const EVENT_PUT: i32 = 0;
/// Event type DELETE.
pub const EVENT_DELETE: i32 = 1;

impl EtcdEvent {
    /// Whether this is a DELETE.
    pub fn is_delete(&self) -> bool {
        self.kind == EVENT_DELETE
    }

    /// The revision the event happened at.
    pub fn mod_revision(&self) -> i64 {
        self.kv.as_ref().map_or(0, |kv| kv.mod_revision)
    }
}

/// `mvccpb.KeyValue` as Go serializes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key.
    #[serde(default, with = "base64_bytes", skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<u8>,
    /// Revision of the key's creation.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub create_revision: i64,
    /// Revision of the last change.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub mod_revision: i64,
    /// Number of changes since creation.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub version: i64,
    /// The value.
    #[serde(default, with = "base64_bytes", skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<u8>,
    /// Lease ID, 0 for none.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub lease: i64,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

mod base64_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = Option::<String>::deserialize(d)?.unwrap_or_default();
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// A delta snapshot that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DeltaError {
    /// Shorter than its checksum.
    #[error(
        "delta snapshot {name} is {len} bytes, shorter than its 32-byte checksum; the object is truncated"
    )]
    Truncated {
        /// The object.
        name: String,
        /// Its size.
        len: usize,
    },
    /// The checksum does not match the content.
    #[error("delta snapshot {name} is corrupt: its SHA-256 checksum does not match its content")]
    ChecksumMismatch {
        /// The object.
        name: String,
    },
    /// The content is not the expected JSON.
    #[error("delta snapshot {name} is not a valid event list: {message}")]
    Malformed {
        /// The object.
        name: String,
        /// The parse error.
        message: String,
    },
}

/// Encodes events into the bytes of a delta snapshot (JSON + SHA-256).
pub fn encode(events: &[DeltaEvent]) -> Vec<u8> {
    let mut data = serde_json::to_vec(events).expect("delta events always serialize");
    let checksum = Sha256::digest(&data);
    data.extend_from_slice(&checksum);
    data
}

/// Decodes the bytes of delta snapshot `name`, verifying its checksum first.
pub fn decode(name: &str, data: &[u8]) -> Result<Vec<DeltaEvent>, DeltaError> {
    if data.len() < CHECKSUM_LEN {
        return Err(DeltaError::Truncated {
            name: name.to_string(),
            len: data.len(),
        });
    }
    let (json, checksum) = data.split_at(data.len() - CHECKSUM_LEN);
    if Sha256::digest(json).as_slice() != checksum {
        return Err(DeltaError::ChecksumMismatch {
            name: name.to_string(),
        });
    }
    serde_json::from_slice(json).map_err(|e| DeltaError::Malformed {
        name: name.to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str, rev: i64, lease: i64) -> DeltaEvent {
        DeltaEvent {
            etcd_event: EtcdEvent {
                kind: EVENT_PUT,
                kv: Some(KeyValue {
                    key: key.as_bytes().to_vec(),
                    create_revision: rev,
                    mod_revision: rev,
                    version: 1,
                    value: value.as_bytes().to_vec(),
                    lease,
                }),
                prev_kv: None,
            },
            time: "2026-11-22T05:00:00.123456789Z".into(),
            lease_ttl: (lease != 0).then_some(30),
        }
    }

    #[test]
    fn json_matches_what_go_writes_for_mvccpb_events() {
        let delete = DeltaEvent {
            etcd_event: EtcdEvent {
                kind: EVENT_DELETE,
                kv: Some(KeyValue {
                    key: b"a".to_vec(),
                    mod_revision: 9,
                    ..Default::default()
                }),
                prev_kv: None,
            },
            time: "2026-11-22T05:00:00Z".into(),
            lease_ttl: None,
        };
        let json = serde_json::to_string(&[put("a", "b", 8, 0), delete]).unwrap();
        assert_eq!(
            json,
            r#"[{"etcdEvent":{"kv":{"key":"YQ==","create_revision":8,"mod_revision":8,"version":1,"value":"Yg=="}},"time":"2026-11-22T05:00:00.123456789Z"},{"etcdEvent":{"type":1,"kv":{"key":"YQ==","mod_revision":9}},"time":"2026-11-22T05:00:00Z"}]"#
        );
    }

    #[test]
    fn reads_events_written_by_etcd_backup_restore() {
        // As Go writes a PUT with a lease, including fields quorate does not use.
        let json = br#"[{"etcdEvent":{"kv":{"key":"Zm9v","create_revision":5,"mod_revision":7,"version":3,"value":"YmFy","lease":7587862}},"time":"2024-01-02T03:04:05.000000006Z"}]"#;
        let mut data = json.to_vec();
        data.extend_from_slice(&Sha256::digest(json));
        let events = decode("Incr-00000006-00000007-1704164645.gz", &data).unwrap();
        let kv = events[0].etcd_event.kv.as_ref().unwrap();
        assert_eq!(
            (kv.key.as_slice(), kv.value.as_slice()),
            (&b"foo"[..], &b"bar"[..])
        );
        assert_eq!(
            (kv.create_revision, kv.mod_revision, kv.version, kv.lease),
            (5, 7, 3, 7587862)
        );
        assert_eq!(events[0].lease_ttl, None);
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let events = vec![put("k1", "v1", 10, 0), put("k2", "v2", 11, 0x1234)];
        let data = encode(&events);
        assert_eq!(decode("d", &data).unwrap(), events);

        let mut flipped = data.clone();
        flipped[5] ^= 0x01;
        assert_eq!(
            decode("d", &flipped),
            Err(DeltaError::ChecksumMismatch { name: "d".into() })
        );
        assert_eq!(
            decode("d", &data[..10]),
            Err(DeltaError::Truncated {
                name: "d".into(),
                len: 10
            })
        );
    }
}
