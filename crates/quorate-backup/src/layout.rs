//! Names of snapshot objects in etcd-backup-restore's bucket layout, so quorate and
//! etcd-backup-restore can read each other's buckets.
//!
//! Layout v2 (written and read): `<prefix>/v2/<Kind>-<start %08d>-<last %08d>-<unix><suffix>[.final]`,
//! e.g. `etcd-main/v2/Full-00000000-11680572-1727038676.gz`. Kind is `Full` or `Incr`; the suffix
//! names the compression (`.gz`, `.Z`, `.zlib`, none); `.enc` follows it on an object quorate
//! encrypted ([`crate::encryption`]; etcd-backup-restore cannot read those); `.final` marks a
//! last full snapshot.
//!
//! Layout v1 (read only): `<prefix>/v1/Backup-<unix>/<snapshot name>`, the same names grouped in
//! one directory per full snapshot.

use std::cmp::Ordering;
use std::fmt;

use quorate_api::CompressionPolicy;

use crate::encryption::ENCRYPTED_SUFFIX;
use thiserror::Error;

/// Directory of layout v2 under the store prefix.
pub const V2_DIR: &str = "v2";
/// Directory of layout v1 under the store prefix.
pub const V1_DIR: &str = "v1";
/// Prefix of a v1 backup directory (`Backup-<unix>`).
const V1_BACKUP_DIR_PREFIX: &str = "Backup-";
/// Suffix marking a final full snapshot.
pub const FINAL_SUFFIX: &str = ".final";

/// Whether a snapshot holds the whole database or the events since the previous one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SnapshotKind {
    /// A copy of the whole database (`Full-…`). Sorts before a delta with the same last revision.
    Full,
    /// The watch events of a revision range (`Incr-…`).
    Incr,
}

impl SnapshotKind {
    /// The name's first token, as etcd-backup-restore writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotKind::Full => "Full",
            SnapshotKind::Incr => "Incr",
        }
    }
}

impl fmt::Display for SnapshotKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot as its object name describes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotName {
    /// Full or delta.
    pub kind: SnapshotKind,
    /// First revision covered (0 for full snapshots).
    pub start_revision: i64,
    /// Last revision covered.
    pub last_revision: i64,
    /// Creation time, Unix seconds.
    pub created_unix: i64,
    /// How the object is compressed; `None` when stored as is.
    pub compression: Option<CompressionPolicy>,
    /// A final full snapshot (taken before the cluster is handed over or deleted).
    pub is_final: bool,
    /// Encrypted by quorate (`.enc`): only quorate, with the key, reads it.
    pub encrypted: bool,
}

/// A name that is not a snapshot name of etcd-backup-restore's layout.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// Not `<Kind>-<start>-<last>-<unix>[suffix]`.
    #[error(
        "{name:?} is not a snapshot name: expected <Full|Incr>-<startRevision>-<lastRevision>-<unixSeconds>[.gz|.Z|.zlib][.enc][.final]"
    )]
    Shape {
        /// The offending name.
        name: String,
    },
    /// The kind token is neither `Full` nor `Incr`.
    #[error("{name:?}: unknown snapshot kind {kind:?} (expected Full or Incr)")]
    Kind {
        /// The offending name.
        name: String,
        /// The kind token found.
        kind: String,
    },
    /// A revision or timestamp is not a non-negative decimal number, or too large for one.
    #[error(
        "{name:?}: {field} {value:?} is not a non-negative decimal number, or is too large (above 9223372036854775807)"
    )]
    Number {
        /// The offending name.
        name: String,
        /// Which part (`start revision`, `last revision`, `creation time`).
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// A revision no etcd reaches: arithmetic on it (the next revision, a restore's bump) could
    /// overflow, so the name is refused.
    #[error(
        "{name:?}: {field} {value} is beyond the largest revision quorate accepts from a name \
         ({MAX_NAMED_REVISION}); no etcd writes it, so the object was not written by a backup \
         and is ignored"
    )]
    RevisionTooLarge {
        /// The offending name.
        name: String,
        /// `start revision` or `last revision`.
        field: &'static str,
        /// The revision found.
        value: i64,
    },
    /// The start revision is after the last revision.
    #[error("{name:?}: start revision {start} is after last revision {last}")]
    Range {
        /// The offending name.
        name: String,
        /// Start revision.
        start: i64,
        /// Last revision.
        last: i64,
    },
    /// A suffix that is no compression etcd-backup-restore writes.
    #[error("{name:?}: unknown suffix {suffix:?} (expected .gz, .Z, .zlib, .enc and/or .final)")]
    Suffix {
        /// The offending name.
        name: String,
        /// The suffix found.
        suffix: String,
    },
}

impl SnapshotName {
    /// A full snapshot of the database up to `last_revision`.
    pub fn full(
        last_revision: i64,
        created_unix: i64,
        compression: Option<CompressionPolicy>,
    ) -> SnapshotName {
        SnapshotName {
            kind: SnapshotKind::Full,
            start_revision: 0,
            last_revision,
            created_unix,
            compression,
            is_final: false,
            encrypted: false,
        }
    }

    /// A delta snapshot of the events in `start_revision..=last_revision`.
    pub fn incr(
        start_revision: i64,
        last_revision: i64,
        created_unix: i64,
        compression: Option<CompressionPolicy>,
    ) -> SnapshotName {
        SnapshotName {
            kind: SnapshotKind::Incr,
            start_revision,
            last_revision,
            created_unix,
            compression,
            is_final: false,
            encrypted: false,
        }
    }

    /// The object's file name, e.g. `Full-00000000-00000042-1700000000.gz`.
    pub fn file_name(&self) -> String {
        let suffix = self.compression.map_or("", |c| c.file_suffix());
        let enc = if self.encrypted { ENCRYPTED_SUFFIX } else { "" };
        let fin = if self.is_final { FINAL_SUFFIX } else { "" };
        format!(
            "{}-{:08}-{:08}-{}{suffix}{enc}{fin}",
            self.kind, self.start_revision, self.last_revision, self.created_unix
        )
    }

    /// Parses a file name (no directories) written by etcd-backup-restore or quorate.
    pub fn parse(file_name: &str) -> Result<SnapshotName, LayoutError> {
        let shape = || LayoutError::Shape {
            name: file_name.to_string(),
        };
        let tokens: Vec<&str> = file_name.split('-').collect();
        let [kind, start, last, rest] = tokens[..] else {
            return Err(shape());
        };
        let kind = match kind {
            "Full" => SnapshotKind::Full,
            "Incr" => SnapshotKind::Incr,
            other => {
                return Err(LayoutError::Kind {
                    name: file_name.to_string(),
                    kind: other.to_string(),
                });
            }
        };
        let number = |field: &'static str, value: &str| {
            parse_decimal(value).ok_or_else(|| LayoutError::Number {
                name: file_name.to_string(),
                field,
                value: value.to_string(),
            })
        };
        let revision = |field: &'static str, value: &str| {
            let n = number(field, value)?;
            if n > MAX_NAMED_REVISION {
                return Err(LayoutError::RevisionTooLarge {
                    name: file_name.to_string(),
                    field,
                    value: n,
                });
            }
            Ok(n)
        };
        let start_revision = revision("start revision", start)?;
        let last_revision = revision("last revision", last)?;
        if start_revision > last_revision {
            return Err(LayoutError::Range {
                name: file_name.to_string(),
                start: start_revision,
                last: last_revision,
            });
        }
        let (time, suffixes) = match rest.find('.') {
            Some(dot) => rest.split_at(dot),
            None => (rest, ""),
        };
        let created_unix = number("creation time", time)?;
        let (suffixes, is_final) = match suffixes.strip_suffix(FINAL_SUFFIX) {
            Some(before) => (before, true),
            None => (suffixes, false),
        };
        let (suffixes, encrypted) = match suffixes.strip_suffix(ENCRYPTED_SUFFIX) {
            Some(before) => (before, true),
            None => (suffixes, false),
        };
        let compression = match suffixes {
            "" => None,
            s => Some(
                CompressionPolicy::ALL
                    .iter()
                    .copied()
                    .find(|c| c.file_suffix() == s)
                    .ok_or_else(|| LayoutError::Suffix {
                        name: file_name.to_string(),
                        suffix: s.to_string(),
                    })?,
            ),
        };
        Ok(SnapshotName {
            kind,
            start_revision,
            last_revision,
            created_unix,
            compression,
            is_final,
            encrypted,
        })
    }

    /// The key of this snapshot in layout v2 under `prefix`: `<prefix>/v2/<file name>`.
    pub fn v2_key(&self, prefix: &str) -> String {
        join_key(&[prefix, V2_DIR, &self.file_name()])
    }

    /// The order snapshots are listed and applied in: by last revision, then full before delta,
    /// then by creation time (the remaining fields only make the order total).
    pub fn sort_key(&self) -> (i64, SnapshotKind, i64, i64, bool, bool, Option<usize>) {
        (
            self.last_revision,
            self.kind,
            self.created_unix,
            self.start_revision,
            self.is_final,
            self.encrypted,
            self.compression.map(|c| {
                CompressionPolicy::ALL
                    .iter()
                    .position(|p| *p == c)
                    .unwrap_or(0)
            }),
        )
    }
}

impl Ord for SnapshotName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.sort_key().cmp(&other.sort_key())
    }
}

impl PartialOrd for SnapshotName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SnapshotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file_name())
    }
}

/// Which of etcd-backup-restore's layouts an object key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayoutVersion {
    /// `<prefix>/v1/Backup-<unix>/<name>` (read only).
    V1 {
        /// The `<unix>` of the `Backup-<unix>` directory.
        backup_unix: i64,
    },
    /// `<prefix>/v2/<name>`.
    V2,
}

/// What an object key under the store prefix is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// A snapshot of layout v1 or v2.
    Snapshot(LayoutVersion, SnapshotName),
    /// Something that is not a snapshot: another tool's object, a chunk of an upload in
    /// progress (`<snapshot name>/<chunk>`), a stray file. Listing skips it.
    Other,
    /// Where a snapshot would be, a name that looks like one but does not parse. Listing skips it
    /// and says so.
    Malformed(LayoutError),
}

/// Classifies `key` (an object key relative to the bucket) against the store `prefix`.
pub fn classify_key(prefix: &str, key: &str) -> KeyKind {
    let prefix = prefix.trim_matches('/');
    let rest = if prefix.is_empty() {
        Some(key)
    } else {
        key.strip_prefix(prefix).and_then(|r| r.strip_prefix('/'))
    };
    let Some(rest) = rest else {
        return KeyKind::Other;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let (version, name) = match parts[..] {
        [V2_DIR, name] => (LayoutVersion::V2, name),
        [V1_DIR, dir, name] => match dir
            .strip_prefix(V1_BACKUP_DIR_PREFIX)
            .and_then(parse_decimal)
        {
            Some(backup_unix) => (LayoutVersion::V1 { backup_unix }, name),
            None => return KeyKind::Other,
        },
        _ => return KeyKind::Other,
    };
    if !looks_like_snapshot(name) {
        return KeyKind::Other;
    }
    match SnapshotName::parse(name) {
        Ok(n) => KeyKind::Snapshot(version, n),
        Err(e) => KeyKind::Malformed(e),
    }
}

/// Whether a file name claims to be a snapshot (starts with a kind token).
fn looks_like_snapshot(name: &str) -> bool {
    name.starts_with("Full-") || name.starts_with("Incr-")
}

/// Joins key segments with `/`, dropping empty ones and stray slashes at their ends.
pub fn join_key(segments: &[&str]) -> String {
    segments
        .iter()
        .map(|s| s.trim_matches('/'))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

/// The largest revision taken from an object's name (2⁶⁰, about 10¹⁸: a million revisions a
/// second for 36,000 years). Anything above is hostile or damaged; the bound leaves room for
/// `revision + 1` and a restore's revision bump without overflow.
pub const MAX_NAMED_REVISION: i64 = 1 << 60;

/// A non-negative decimal number of plain ASCII digits (no sign, no spaces).
fn parse_decimal(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_like_etcd_backup_restore() {
        let n = SnapshotName::full(11680572, 1727038676, Some(CompressionPolicy::Gzip));
        assert_eq!(n.file_name(), "Full-00000000-11680572-1727038676.gz");
        assert_eq!(
            n.v2_key("etcd-main"),
            "etcd-main/v2/Full-00000000-11680572-1727038676.gz"
        );
        let d = SnapshotName::incr(11680573, 11680600, 1727038700, None);
        assert_eq!(d.file_name(), "Incr-11680573-11680600-1727038700");
        let mut f = SnapshotName::full(5, 9, Some(CompressionPolicy::Lzw));
        f.is_final = true;
        assert_eq!(f.file_name(), "Full-00000000-00000005-9.Z.final");
        // Revisions wider than eight digits are written in full.
        let big = SnapshotName::incr(123456789, 1234567890, 1, Some(CompressionPolicy::Zlib));
        assert_eq!(big.file_name(), "Incr-123456789-1234567890-1.zlib");
    }

    #[test]
    fn a_name_with_a_revision_no_etcd_reaches_is_refused() {
        let e = SnapshotName::parse("Incr-00000001-9223372036854775807-1700000000.gz").unwrap_err();
        assert!(
            matches!(
                e,
                LayoutError::RevisionTooLarge {
                    field: "last revision",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("beyond the largest revision"), "{e}");
        let at_bound = format!("Full-00000000-{MAX_NAMED_REVISION}-1700000000.gz");
        assert!(SnapshotName::parse(&at_bound).is_ok());
        assert!(matches!(
            classify_key(
                "p",
                "p/v2/Incr-9223372036854775807-9223372036854775807-5.gz"
            ),
            KeyKind::Malformed(LayoutError::RevisionTooLarge { .. })
        ));
    }

    #[test]
    fn parses_names_written_by_etcd_backup_restore() {
        let n = SnapshotName::parse("Full-00000000-11680572-1727038676.gz").unwrap();
        assert_eq!(
            n,
            SnapshotName::full(11680572, 1727038676, Some(CompressionPolicy::Gzip))
        );
        let n = SnapshotName::parse("Incr-00000010-00000020-1700000000.zlib.final").unwrap();
        assert_eq!(n.kind, SnapshotKind::Incr);
        assert_eq!((n.start_revision, n.last_revision), (10, 20));
        assert_eq!(n.compression, Some(CompressionPolicy::Zlib));
        assert!(n.is_final);
        let n = SnapshotName::parse("Full-00000000-00000001-5.final").unwrap();
        assert_eq!(n.compression, None);
        assert!(n.is_final);
    }

    #[test]
    fn rejects_what_is_not_a_snapshot_name() {
        for bad in [
            "",
            "Full",
            "Full-1-2",
            "Full-1-2-3-4",
            "Chunk-00000000-00000001-5",
            "Full-00000005-00000001-5",
            "Full-0000000a-00000001-5",
            "Full--1-00000001-5",
            "Full-00000000-00000001-",
            "Full-00000000-00000001-5.bz2",
            "Full-00000000-00000001-5.gz.gz",
            "Full-00000000-00000001-5.final.gz",
            "Full-+0000000-00000001-5",
        ] {
            assert!(SnapshotName::parse(bad).is_err(), "{bad:?} parsed");
        }
        let e = SnapshotName::parse("Full-00000000-00000001-5.bz2").unwrap_err();
        assert!(e.to_string().contains(".bz2"), "{e}");
    }

    #[test]
    fn classifies_keys_of_both_layouts() {
        let p = "etcd-main";
        match classify_key(p, "etcd-main/v2/Incr-00000001-00000002-3.gz") {
            KeyKind::Snapshot(LayoutVersion::V2, n) => assert_eq!(n.last_revision, 2),
            other => panic!("{other:?}"),
        }
        match classify_key(
            p,
            "etcd-main/v1/Backup-1600000000/Full-00000000-00000009-1600000000",
        ) {
            KeyKind::Snapshot(LayoutVersion::V1 { backup_unix }, n) => {
                assert_eq!(backup_unix, 1600000000);
                assert_eq!(n.kind, SnapshotKind::Full);
            }
            other => panic!("{other:?}"),
        }
        // Prefix with slashes, nested prefix.
        assert!(matches!(
            classify_key("/a/b/", "a/b/v2/Full-00000000-00000001-5"),
            KeyKind::Snapshot(LayoutVersion::V2, _)
        ));
        // Chunks of an upload in progress, foreign objects, other prefixes.
        for other in [
            "etcd-main/v2/Full-00000000-00000009-1600000000.gz/0000000001",
            "etcd-main/v2/README",
            "etcd-main/v3/Full-00000000-00000009-1600000000",
            "etcd-main-2/v2/Full-00000000-00000009-1600000000",
            "etcd-main/Full-00000000-00000009-1600000000",
            "etcd-main/v1/Backup-x/Full-00000000-00000009-1600000000",
            "other/v2/Full-00000000-00000009-1600000000",
        ] {
            assert_eq!(classify_key(p, other), KeyKind::Other, "{other}");
        }
        assert!(matches!(
            classify_key(p, "etcd-main/v2/Full-00000000-00000009-16x"),
            KeyKind::Malformed(LayoutError::Number { .. })
        ));
    }

    #[test]
    fn sorts_by_last_revision_then_full_first_then_creation() {
        let mut names = [
            SnapshotName::incr(11, 20, 300, None),
            SnapshotName::full(20, 200, None),
            SnapshotName::incr(1, 10, 100, None),
            SnapshotName::full(10, 150, None),
            SnapshotName::full(10, 90, None),
        ];
        names.sort();
        let order: Vec<String> = names.iter().map(|n| n.file_name()).collect();
        assert_eq!(
            order,
            [
                "Full-00000000-00000010-90",
                "Full-00000000-00000010-150",
                "Incr-00000001-00000010-100",
                "Full-00000000-00000020-200",
                "Incr-00000011-00000020-300",
            ]
        );
    }

    fn any_name() -> impl Strategy<Value = SnapshotName> {
        (
            prop_oneof![Just(SnapshotKind::Full), Just(SnapshotKind::Incr)],
            0i64..=MAX_NAMED_REVISION,
            0i64..=MAX_NAMED_REVISION,
            0i64..i64::MAX,
            prop_oneof![
                Just(None),
                Just(Some(CompressionPolicy::Gzip)),
                Just(Some(CompressionPolicy::Lzw)),
                Just(Some(CompressionPolicy::Zlib)),
            ],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(kind, a, b, created_unix, compression, is_final, encrypted)| {
                    let (start_revision, last_revision) = match kind {
                        SnapshotKind::Full => (0, a.max(b)),
                        SnapshotKind::Incr => (a.min(b), a.max(b)),
                    };
                    SnapshotName {
                        kind,
                        start_revision,
                        last_revision,
                        created_unix,
                        compression,
                        is_final,
                        encrypted,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(name in any_name()) {
            prop_assert_eq!(SnapshotName::parse(&name.file_name()).unwrap(), name.clone());
            let key = name.v2_key("some/prefix");
            prop_assert_eq!(
                classify_key("some/prefix", &key),
                KeyKind::Snapshot(LayoutVersion::V2, name)
            );
        }

        #[test]
        fn order_is_total_and_consistent_with_eq(a in any_name(), b in any_name()) {
            prop_assert_eq!(a.cmp(&b) == Ordering::Equal, a == b);
            prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
        }
    }
}
