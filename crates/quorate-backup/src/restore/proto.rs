//! etcd's protobuf messages as its database stores them, encoded and decoded by prost:
//! `mvccpb.KeyValue` (`api/mvccpb/kv.proto`) in the `key` bucket and `leasepb.Lease`
//! (`server/lease/leasepb/lease.proto`) in the `lease` bucket, declared as prost-build
//! generates them (field numbers and types are etcd's, unchanged from 3.4 to 3.7). etcd-client
//! compiles `mvccpb.KeyValue` too but exposes it only behind its `pub-response-field` feature,
//! which would make every response type's fields public across the workspace; `leasepb` is
//! server-internal and not among its protos at all.
//!
//! Like etcd's own marshalling, prost writes fields in field-number order and leaves zero
//! values out, so the restored key space hashes like the source's. [`KeyFacts`] decodes only
//! what the key-space passes need (prost skips the other fields without copying them).

/// `mvccpb.KeyValue`: one MVCC entry's value.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct KeyValue {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The revision of the key's last creation.
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    /// The revision of this modification.
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    /// The key's version (1 at creation).
    #[prost(int64, tag = "4")]
    pub version: i64,
    /// The value.
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
    /// The lease the key is attached to (0: none).
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

/// `leasepb.Lease`: a granted lease as etcd persists it.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Lease {
    /// The lease ID.
    #[prost(int64, tag = "1")]
    pub id: i64,
    /// The granted TTL in seconds.
    #[prost(int64, tag = "2")]
    pub ttl: i64,
    /// The TTL left at the last checkpoint (etcd 3.5+ with checkpointing; 0 otherwise).
    #[prost(int64, tag = "3")]
    pub remaining_ttl: i64,
}

/// The part of an `mvccpb.KeyValue` that says which key an entry belongs to and how far the
/// key has come (the value, often the bulk, is skipped).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct KeyFacts {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The revision of the key's last creation.
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    /// The key's version.
    #[prost(int64, tag = "4")]
    pub version: i64,
}

impl KeyFacts {
    /// Decodes the facts of an encoded `mvccpb.KeyValue`.
    pub fn decode_from(bytes: &[u8]) -> Result<KeyFacts, prost::DecodeError> {
        <KeyFacts as prost::Message>::decode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The hand encoding these types replaced: a varint, field keys, length-delimited bytes.
    mod hand {
        pub fn varint(out: &mut Vec<u8>, mut value: u64) {
            while value >= 0x80 {
                out.push((value as u8) | 0x80);
                value >>= 7;
            }
            out.push(value as u8);
        }
        pub fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
            varint(out, u64::from(field) << 3);
            varint(out, value);
        }
        pub fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
            varint(out, (u64::from(field) << 3) | 2);
            varint(out, bytes.len() as u64);
            out.extend_from_slice(bytes);
        }
        /// `direct.rs`'s former `key_value`.
        pub fn key_value(kv: &super::KeyValue) -> Vec<u8> {
            let mut out = Vec::new();
            bytes_field(&mut out, 1, &kv.key);
            for (field, v) in [
                (2, kv.create_revision),
                (3, kv.mod_revision),
                (4, kv.version),
            ] {
                if v != 0 {
                    varint_field(&mut out, field, v as u64);
                }
            }
            if !kv.value.is_empty() {
                bytes_field(&mut out, 5, &kv.value);
            }
            if kv.lease != 0 {
                varint_field(&mut out, 6, kv.lease as u64);
            }
            out
        }
    }

    fn kv(key: &[u8], c: i64, m: i64, v: i64, value: &[u8], lease: i64) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            create_revision: c,
            mod_revision: m,
            version: v,
            value: value.to_vec(),
            lease,
        }
    }

    #[test]
    fn key_values_encode_as_the_hand_encoding_did() {
        let big = vec![7u8; 300];
        let cases = [
            kv(b"/registry/pods/a", 5, 9, 2, b"v", 0),
            kv(b"k", 1, 1, 1, b"", 0x694d_7d5a_1b2c_3d4e),
            kv(b"k", 0, 0, 0, &big, 0),
            kv(&big, i64::MAX, 1 << 40, 3, b"x", -1),
        ];
        for case in &cases {
            assert_eq!(case.encode_to_vec(), hand::key_value(case), "{case:?}");
        }
        // A tombstone's value: the key alone.
        let tombstone = kv(b"gone", 0, 0, 0, b"", 0);
        let mut expected = Vec::new();
        hand::bytes_field(&mut expected, 1, b"gone");
        assert_eq!(tombstone.encode_to_vec(), expected);
        // Pinned bytes: key "k", create 5, mod 300, version 2, value "v", lease 1.
        assert_eq!(
            kv(b"k", 5, 300, 2, b"v", 1).encode_to_vec(),
            [
                0x0a, 1, b'k', 0x10, 5, 0x18, 0xac, 0x02, 0x20, 2, 0x2a, 1, b'v', 0x30, 1
            ]
        );
    }

    #[test]
    fn leases_encode_as_the_hand_encoding_did() {
        for (id, ttl) in [(1i64, 3600i64), (0x694d_7d5a_1b2c_3d4e, 60), (-5, 1 << 33)] {
            let mut expected = Vec::new();
            hand::varint_field(&mut expected, 1, id as u64);
            hand::varint_field(&mut expected, 2, ttl as u64);
            let lease = Lease {
                id,
                ttl,
                remaining_ttl: 0,
            };
            assert_eq!(lease.encode_to_vec(), expected, "{id} {ttl}");
        }
    }

    #[test]
    fn facts_skip_the_value_and_refuse_damage() {
        let encoded = kv(b"key", 4, 8, 3, &[9u8; 1000], 77).encode_to_vec();
        assert_eq!(
            KeyFacts::decode_from(&encoded).unwrap(),
            KeyFacts {
                key: b"key".to_vec(),
                create_revision: 4,
                version: 3,
            }
        );
        // A length running past the message.
        assert!(KeyFacts::decode_from(&[0x0a, 0x05, 1]).is_err());
        // The key field with a varint's wire type.
        assert!(KeyFacts::decode_from(&[0x08, 0x01]).is_err());
    }
}
