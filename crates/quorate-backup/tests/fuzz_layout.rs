//! Fuzzing snapshot names (`SnapshotName::parse`) and object keys (`classify_key`): arbitrary
//! text and names built from the layout's pieces. Every name is answered (no panic), a refusal
//! quotes the name and says which part is wrong, and `parse(name.file_name()) == name`.

use proptest::prelude::*;
use quorate_api::CompressionPolicy;
use quorate_backup::layout::{
    KeyKind, LayoutError, MAX_NAMED_REVISION, SnapshotKind, SnapshotName, classify_key,
};

fn check_name(text: &str) {
    match SnapshotName::parse(text) {
        Ok(name) => {
            assert!(name.start_revision >= 0 && name.last_revision >= name.start_revision);
            assert!(name.created_unix >= 0);
            assert_eq!(
                SnapshotName::parse(&name.file_name()),
                Ok(name.clone()),
                "{text:?}"
            );
        }
        Err(e) => check_error(text, &e),
    }
}

fn check_error(text: &str, e: &LayoutError) {
    let shown = e.to_string();
    assert!(shown.contains(&format!("{text:?}")), "{text:?}: {shown}");
    if let LayoutError::Number { value, .. } = e {
        let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
        assert!(
            !digits || shown.contains("too large"),
            "{value:?} is a decimal number, yet: {shown}"
        );
    }
}

fn policy() -> impl Strategy<Value = Option<CompressionPolicy>> {
    proptest::option::of(proptest::sample::select(CompressionPolicy::ALL.to_vec()))
}

/// Mostly revisions quorate takes from a name, some beyond its bound.
fn revision() -> impl Strategy<Value = i64> {
    prop_oneof![4 => 0i64..=MAX_NAMED_REVISION, 1 => 0i64..=i64::MAX]
}

fn name() -> impl Strategy<Value = SnapshotName> {
    (
        any::<bool>(),
        revision(),
        revision(),
        0i64..=i64::MAX,
        policy(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(full, a, b, created_unix, compression, is_final, encrypted)| SnapshotName {
                kind: if full {
                    SnapshotKind::Full
                } else {
                    SnapshotKind::Incr
                },
                start_revision: a.min(b),
                last_revision: a.max(b),
                created_unix,
                compression,
                is_final,
                encrypted,
            },
        )
}

fn name_like() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        "[0-9]{1,8}",
        "[0-9]{19,22}",
        Just("9223372036854775807".to_string()),
        Just("9223372036854775808".to_string()),
        Just(String::new()),
        Just("-1".to_string()),
        Just("+1".to_string()),
        Just("١٢".to_string()),
        Just(" 1".to_string()),
    ];
    (
        prop_oneof![
            Just("Full"),
            Just("Incr"),
            Just("full"),
            Just(""),
            Just("Fulll")
        ],
        number.clone(),
        number.clone(),
        number,
        prop_oneof![
            Just(""),
            Just(".gz"),
            Just(".Z"),
            Just(".zlib"),
            Just(".final"),
            Just(".gz.final"),
            Just(".final.gz"),
            Just(".z"),
            Just("."),
            Just(".gz.gz"),
            Just("/chunk-1"),
            Just("-x"),
        ],
    )
        .prop_map(|(k, a, b, c, s)| format!("{k}-{a}-{b}-{c}{s}"))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_names_are_answered_clearly(text in any::<String>()) {
        check_name(&text);
    }

    #[test]
    fn name_like_text_is_answered_clearly(text in name_like()) {
        check_name(&text);
    }

    #[test]
    fn parse_of_file_name_is_identity(name in name()) {
        let parsed = SnapshotName::parse(&name.file_name());
        if name.last_revision > MAX_NAMED_REVISION {
            prop_assert!(
                matches!(parsed, Err(LayoutError::RevisionTooLarge { .. })),
                "{:?}",
                parsed
            );
        } else {
            prop_assert_eq!(parsed, Ok(name));
        }
    }

    #[test]
    fn keys_are_classified_without_panic(
        prefix in prop_oneof![Just(String::new()), Just("/".to_string()), "[a-z/]{0,10}", any::<String>()],
        dir in prop_oneof![Just("v2/".to_string()), Just("v1/Backup-1700000000/".to_string()), Just("v1/Backup-x/".to_string()), "[a-zA-Z0-9/-]{0,12}"],
        file in prop_oneof![name_like(), any::<String>(), name().prop_map(|n| n.file_name())],
    ) {
        let key = format!("{}/{dir}{file}", prefix.trim_matches('/'));
        match classify_key(&prefix, &key) {
            KeyKind::Snapshot(_, n) => {
                prop_assert_eq!(SnapshotName::parse(&n.file_name()), Ok(n.clone()));
                prop_assert!(key.ends_with(&file));
            }
            KeyKind::Malformed(e) => check_error(&file, &e),
            KeyKind::Other => {}
        }
    }
}

/// Found by fuzzing: a revision of twenty digits was called "not a non-negative decimal
/// number" when it is one, only too large for 64 bits.
#[test]
fn snapshot_name_with_a_revision_beyond_i64_says_it_is_too_large() {
    let name = "Full-00000000-99999999999999999999-1700000000.gz";
    let e = SnapshotName::parse(name).unwrap_err();
    assert!(
        matches!(
            &e,
            LayoutError::Number {
                field: "last revision",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("too large"), "{e}");
}
