//! Fuzzing delta snapshot objects (`delta::decode`): arbitrary bytes, valid objects damaged
//! (truncated, bits flipped), and arbitrary JSON under a valid checksum so the parser itself is
//! reached. Every object is answered (no panic); a refusal names the object and says what is
//! wrong; `decode(encode(events)) == events` for any events.

use proptest::prelude::*;
use quorate_backup::delta::{DeltaError, DeltaEvent, EtcdEvent, KeyValue, decode, encode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const NAME: &str = "Incr-00000001-00000009-1700000000.gz";

fn check(data: &[u8]) -> Option<Vec<DeltaEvent>> {
    match decode(NAME, data) {
        Ok(events) => Some(events),
        Err(e) => {
            let shown = e.to_string();
            assert!(
                shown.contains(NAME),
                "the error does not name the object: {shown}"
            );
            if let DeltaError::Malformed { message, .. } = &e {
                assert!(!message.trim().is_empty(), "{shown}");
            }
            None
        }
    }
}

fn with_checksum(json: &[u8]) -> Vec<u8> {
    let mut data = json.to_vec();
    data.extend_from_slice(&Sha256::digest(json));
    data
}

fn key_value() -> impl Strategy<Value = KeyValue> {
    let n = prop_oneof![
        Just(0i64),
        any::<i64>(),
        1i64..1000,
        Just(i64::MIN),
        Just(i64::MAX)
    ];
    (
        proptest::collection::vec(any::<u8>(), 0..24),
        n.clone(),
        n.clone(),
        n.clone(),
        proptest::collection::vec(any::<u8>(), 0..64),
        n,
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

fn event() -> impl Strategy<Value = DeltaEvent> {
    (
        prop_oneof![Just(0i32), Just(1i32), any::<i32>()],
        proptest::option::of(key_value()),
        proptest::option::of(key_value()),
        any::<String>(),
        proptest::option::of(any::<i64>()),
    )
        .prop_map(|(kind, kv, prev_kv, time, lease_ttl)| DeltaEvent {
            etcd_event: EtcdEvent { kind, kv, prev_kv },
            time,
            lease_ttl,
        })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        Just(json!(1e300)),
        Just(json!(-1.5)),
        any::<String>().prop_map(Value::String),
        Just(json!("Zm9v")),
        Just(json!("!!!not base64")),
        Just(json!("Zm9v=")),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("etcdEvent".to_string()),
                    Just("time".to_string()),
                    Just("leaseTTL".to_string()),
                    Just("type".to_string()),
                    Just("kv".to_string()),
                    Just("prev_kv".to_string()),
                    Just("key".to_string()),
                    Just("value".to_string()),
                    Just("mod_revision".to_string()),
                    Just("lease".to_string()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 500,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_are_refused_clearly(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        check(&data);
    }

    #[test]
    fn arbitrary_bytes_under_a_valid_checksum_are_answered_clearly(json in proptest::collection::vec(any::<u8>(), 0..200)) {
        check(&with_checksum(&json));
    }

    #[test]
    fn arbitrary_json_under_a_valid_checksum_is_answered_clearly(value in json_value(), wrap in any::<bool>()) {
        let value = if wrap { json!([value]) } else { value };
        check(&with_checksum(&serde_json::to_vec(&value).unwrap()));
    }

    #[test]
    fn decode_of_encode_is_identity(events in proptest::collection::vec(event(), 0..6)) {
        let data = encode(&events);
        prop_assert_eq!(decode(NAME, &data), Ok(events));
    }

    #[test]
    fn damaged_objects_are_refused(events in proptest::collection::vec(event(), 1..4), at in any::<usize>(), bit in 0u8..8, cut in any::<usize>()) {
        let data = encode(&events);
        let mut flipped = data.clone();
        let i = at % flipped.len();
        flipped[i] ^= 1 << bit;
        prop_assert!(check(&flipped).is_none(), "a flipped bit went unnoticed");
        let cut = cut % data.len();
        prop_assert!(check(&data[..cut]).is_none(), "a truncated object was read");
    }
}

#[test]
fn deeply_nested_json_is_refused_not_a_stack_overflow() {
    for depth in [200, 100_000] {
        let json = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(check(&with_checksum(json.as_bytes())).is_none());
        let json = format!("[{}{}]", "{\"etcdEvent\":".repeat(depth), "}".repeat(depth));
        assert!(check(&with_checksum(json.as_bytes())).is_none());
    }
}
