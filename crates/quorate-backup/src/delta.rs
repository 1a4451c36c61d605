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

/// The fields of a key-value, wherever it is held: capture encodes an `etcd_client::KeyValue`
/// straight from the watch response, without copying it into a [`KeyValue`] first.
pub(crate) trait KeyValueFields {
    fn key(&self) -> &[u8];
    fn create_revision(&self) -> i64;
    fn mod_revision(&self) -> i64;
    fn version(&self) -> i64;
    fn value(&self) -> &[u8];
    fn lease(&self) -> i64;
}

impl KeyValueFields for KeyValue {
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn create_revision(&self) -> i64 {
        self.create_revision
    }
    fn mod_revision(&self) -> i64 {
        self.mod_revision
    }
    fn version(&self) -> i64 {
        self.version
    }
    fn value(&self) -> &[u8] {
        &self.value
    }
    fn lease(&self) -> i64 {
        self.lease
    }
}

/// An event time as a JSON string, rendered once for all the events stamped with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JsonTime(Vec<u8>);

impl JsonTime {
    pub(crate) fn new(time: &str) -> JsonTime {
        // What serde_json escapes; a time stamp as quorate writes it has none of these.
        if time.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
            return JsonTime(serde_json::to_vec(time).expect("a string always serializes"));
        }
        let mut json = Vec::with_capacity(time.len() + 2);
        json.push(b'"');
        json.extend_from_slice(time.as_bytes());
        json.push(b'"');
        JsonTime(json)
    }
}

/// Appends the JSON of one event to `out`: byte for byte what serde_json makes of the
/// [`DeltaEvent`] with these fields, so a batch built from it equals [`encode`]'s output.
pub(crate) fn write_event_json<K: KeyValueFields + ?Sized>(
    out: &mut Vec<u8>,
    kind: i32,
    kv: Option<&K>,
    prev_kv: Option<&K>,
    time: &JsonTime,
    lease_ttl: Option<i64>,
) {
    // Room for everything but the numbers' digits beyond a few, so the base64 text lands in
    // reserved space.
    let kv_room = |kv: Option<&K>| {
        kv.map_or(0, |kv| {
            110 + base64_len(kv.key().len()) + base64_len(kv.value().len())
        })
    };
    out.reserve(64 + time.0.len() + kv_room(kv) + kv_room(prev_kv));
    out.extend_from_slice(b"{\"etcdEvent\":{");
    let mut first = true;
    if kind != 0 {
        field(out, &mut first, b"\"type\":");
        write_i64(out, i64::from(kind));
    }
    if let Some(kv) = kv {
        field(out, &mut first, b"\"kv\":");
        write_key_value(out, kv);
    }
    if let Some(kv) = prev_kv {
        field(out, &mut first, b"\"prev_kv\":");
        write_key_value(out, kv);
    }
    out.extend_from_slice(b"},\"time\":");
    out.extend_from_slice(&time.0);
    if let Some(ttl) = lease_ttl {
        out.extend_from_slice(b",\"leaseTTL\":");
        write_i64(out, ttl);
    }
    out.push(b'}');
}

/// `mvccpb.KeyValue` as serde_json writes [`KeyValue`]: zero values left out.
fn write_key_value<K: KeyValueFields + ?Sized>(out: &mut Vec<u8>, kv: &K) {
    out.push(b'{');
    let mut first = true;
    if !kv.key().is_empty() {
        field(out, &mut first, b"\"key\":");
        write_base64(out, kv.key());
    }
    for (name, n) in [
        (&b"\"create_revision\":"[..], kv.create_revision()),
        (b"\"mod_revision\":", kv.mod_revision()),
        (b"\"version\":", kv.version()),
    ] {
        if n != 0 {
            field(out, &mut first, name);
            write_i64(out, n);
        }
    }
    if !kv.value().is_empty() {
        field(out, &mut first, b"\"value\":");
        write_base64(out, kv.value());
    }
    if kv.lease() != 0 {
        field(out, &mut first, b"\"lease\":");
        write_i64(out, kv.lease());
    }
    out.push(b'}');
}

/// Writes `name` (`"name":`), preceded by a comma unless it is the object's first field.
fn field(out: &mut Vec<u8>, first: &mut bool, name: &[u8]) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    out.extend_from_slice(name);
}

fn write_i64(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// A JSON string holding `bytes` in standard base64 (which never needs escaping), written
/// straight into `out` (SIMD where the CPU has it: the same text as [`STANDARD`], faster).
fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    base64_simd::STANDARD.encode_append(bytes, out);
    out.push(b'"');
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
    parse(name, json)
}

/// Checks the bytes of delta snapshot `name` as they stream (with
/// [`crate::trailer::TrailingSha256`]): the verdict once the last byte was seen.
pub fn check_streamed(
    name: &str,
    hashed: crate::trailer::TrailingSha256,
) -> Result<(), DeltaError> {
    if hashed.len() < CHECKSUM_LEN as u64 {
        return Err(DeltaError::Truncated {
            name: name.to_string(),
            len: usize::try_from(hashed.len()).unwrap_or(usize::MAX),
        });
    }
    if !hashed.matches() {
        return Err(DeltaError::ChecksumMismatch {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Decodes the bytes of delta snapshot `name` whose checksum [`check_streamed`] already
/// verified as they arrived (so they are not hashed a second time).
pub fn decode_checked(name: &str, data: &[u8]) -> Result<Vec<DeltaEvent>, DeltaError> {
    let json = data
        .len()
        .checked_sub(CHECKSUM_LEN)
        .map(|end| &data[..end])
        .ok_or_else(|| DeltaError::Truncated {
            name: name.to_string(),
            len: data.len(),
        })?;
    parse(name, json)
}

/// The event list of a checked delta's JSON.
fn parse(name: &str, json: &[u8]) -> Result<Vec<DeltaEvent>, DeltaError> {
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

    mod fast_encoding {
        use super::*;
        use proptest::prelude::*;

        fn key_value() -> impl Strategy<Value = KeyValue> {
            let revision = prop_oneof![Just(0i64), any::<i64>(), 1i64..100_000];
            (
                proptest::collection::vec(any::<u8>(), 0..40),
                revision.clone(),
                revision.clone(),
                revision.clone(),
                proptest::collection::vec(any::<u8>(), 0..300),
                revision,
            )
                .prop_map(
                    |(key, create_revision, mod_revision, version, value, lease)| KeyValue {
                        key,
                        create_revision,
                        mod_revision,
                        version,
                        value,
                        lease,
                    },
                )
        }

        fn delta_event() -> impl Strategy<Value = DeltaEvent> {
            (
                prop_oneof![Just(EVENT_PUT), Just(EVENT_DELETE), any::<i32>()],
                proptest::option::of(key_value()),
                proptest::option::of(key_value()),
                prop_oneof![
                    Just("2026-11-22T05:00:00.123456789Z".to_string()),
                    any::<String>(),
                    "[\"\\\\\u{0}-\u{1f}\u{7f}\u{2028}a-z]{0,12}",
                ],
                proptest::option::of(any::<i64>()),
            )
                .prop_map(|(kind, kv, prev_kv, time, lease_ttl)| DeltaEvent {
                    etcd_event: EtcdEvent { kind, kv, prev_kv },
                    time,
                    lease_ttl,
                })
        }

        fn fast_json(event: &DeltaEvent) -> Vec<u8> {
            let mut out = Vec::new();
            write_event_json(
                &mut out,
                event.etcd_event.kind,
                event.etcd_event.kv.as_ref(),
                event.etcd_event.prev_kv.as_ref(),
                &JsonTime::new(&event.time),
                event.lease_ttl,
            );
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn an_event_is_written_as_serde_json_writes_it(event in delta_event()) {
                prop_assert_eq!(
                    String::from_utf8(fast_json(&event)).unwrap(),
                    serde_json::to_string(&event).unwrap()
                );
            }

            #[test]
            fn events_joined_make_what_encode_makes(
                events in proptest::collection::vec(delta_event(), 0..8),
            ) {
                let mut data = vec![b'['];
                for (i, event) in events.iter().enumerate() {
                    if i > 0 {
                        data.push(b',');
                    }
                    data.extend_from_slice(&fast_json(event));
                }
                data.push(b']');
                let checksum = Sha256::digest(&data);
                data.extend_from_slice(&checksum);
                prop_assert_eq!(&data, &encode(&events));
                prop_assert_eq!(decode("d", &data).unwrap(), events);
            }
        }

        #[test]
        fn empty_and_extreme_fields() {
            let kv = KeyValue {
                create_revision: i64::MIN,
                version: i64::MAX,
                lease: -1,
                ..Default::default()
            };
            for event in [
                DeltaEvent {
                    etcd_event: EtcdEvent::default(),
                    time: String::new(),
                    lease_ttl: Some(0),
                },
                DeltaEvent {
                    etcd_event: EtcdEvent {
                        kind: i32::MIN,
                        kv: Some(KeyValue::default()),
                        prev_kv: Some(kv),
                    },
                    time: "\"\\\n".into(),
                    lease_ttl: Some(i64::MIN),
                },
            ] {
                assert_eq!(fast_json(&event), serde_json::to_vec(&event).unwrap());
            }
        }
    }
}
