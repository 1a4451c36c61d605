//! The etcd version a cluster runs: which minor versions quorate supports, the annotation that
//! chooses one, and which changes between versions are allowed (up any number of minor
//! versions, down to 3.5; both one minor step at a time).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Etcd;
use crate::annotations::ETCD_VERSION;

/// An etcd minor version, e.g. 3.5. Patch versions are the packaged binary's business.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EtcdVersion {
    /// Major version (3).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl EtcdVersion {
    /// etcd 3.4 (Debian bookworm's 3.4.23): what every cluster ran before versions were
    /// chosen, so a cluster without a recorded version runs it.
    pub const V3_4: EtcdVersion = EtcdVersion { major: 3, minor: 4 };
    /// etcd 3.5 (built from its pinned Go module, `tools/etcd/v3.5`): what new clusters ran
    /// before 3.6, and the version etcd upgrades to 3.6 from.
    pub const V3_5: EtcdVersion = EtcdVersion { major: 3, minor: 5 };
    /// etcd 3.6 (built from `tools/etcd/v3.6`): feature gates instead of experimental flags,
    /// no v2 store, the downgrade API.
    pub const V3_6: EtcdVersion = EtcdVersion { major: 3, minor: 6 };
    /// etcd 3.7 (built from `tools/etcd/v3.7`): no `--experimental-*` flag, membership from
    /// the v3 `members` bucket.
    pub const V3_7: EtcdVersion = EtcdVersion { major: 3, minor: 7 };
    /// The versions quorate can run, oldest first.
    pub const SUPPORTED: [EtcdVersion; 4] = [Self::V3_4, Self::V3_5, Self::V3_6, Self::V3_7];
    /// The version of a new cluster that does not choose one: the newest minor etcd has
    /// released long enough to carry many patches (3.7 is young; 3.5 is below 3.6 in support).
    pub const DEFAULT: EtcdVersion = Self::V3_6;
    /// The version of a cluster that ran before quorate recorded versions.
    pub const UNRECORDED: EtcdVersion = Self::V3_4;

    /// Parses `"3.5"` (also `"v3.5"` and a full version such as `"3.5.30"`, whose patch is
    /// ignored).
    pub fn parse(text: &str) -> Result<EtcdVersion, String> {
        let trimmed = text.trim().trim_start_matches('v');
        let mut parts = trimmed.split('.');
        let number = |part: Option<&str>| part.and_then(|p| p.parse::<u32>().ok());
        match (number(parts.next()), number(parts.next())) {
            (Some(major), Some(minor)) => Ok(EtcdVersion { major, minor }),
            _ => Err(format!(
                "{text:?} is not an etcd version; write MAJOR.MINOR, one of {}",
                supported_list()
            )),
        }
    }

    /// Whether this quorate can run it.
    pub fn is_supported(self) -> bool {
        Self::SUPPORTED.contains(&self)
    }

    /// Whether moving a cluster from `self` to `to` is allowed: the same version; any newer
    /// minor version of the same major, reached one minor step at a time ([`Self::steps_to`]);
    /// or an older one down to [`Self::DOWNGRADE_FLOOR`] through etcd's downgrade API, one
    /// minor step at a time too. `Err` says why not and what to do instead.
    pub fn check_change(self, to: EtcdVersion) -> Result<(), VersionChangeRefused> {
        if to == self {
            return Ok(());
        }
        if to.major != self.major {
            return Err(VersionChangeRefused::OtherMajor { from: self, to });
        }
        if to < self && to < Self::DOWNGRADE_FLOOR {
            return Err(VersionChangeRefused::BelowDowngradeFloor { from: self, to });
        }
        Ok(())
    }

    /// The lowest version etcd's downgrade API reaches: 3.5 added it, and 3.4 cannot read
    /// what 3.5 wrote, so etcd refuses a downgrade to anything older.
    pub const DOWNGRADE_FLOOR: EtcdVersion = EtcdVersion { major: 3, minor: 5 };

    /// The versions a change from `self` to `to` passes through, one minor step each, `to`
    /// last; empty when they are the same. etcd moves one minor version at a time in either
    /// direction, so 3.5 → 3.7 is 3.6, 3.7 and 3.7 → 3.5 is 3.6, 3.5. Only meaningful for a
    /// change [`Self::check_change`] allows.
    pub fn steps_to(self, to: EtcdVersion) -> Vec<EtcdVersion> {
        let minor = |minor| EtcdVersion {
            major: self.major,
            minor,
        };
        if to.major != self.major {
            return Vec::new();
        }
        if to > self {
            (self.minor + 1..=to.minor).map(minor).collect()
        } else {
            (to.minor..self.minor).rev().map(minor).collect()
        }
    }

    /// The first step from `self` towards `to` ([`Self::steps_to`]); `None` when there.
    pub fn next_toward(self, to: EtcdVersion) -> Option<EtcdVersion> {
        self.steps_to(to).first().copied()
    }
}

/// Why a change of a cluster's etcd version is refused, and what to do instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionChangeRefused {
    /// A change to another major version: etcd has no path between majors.
    #[error(
        "changing etcd from {from} to {to} is refused: etcd moves between minor versions of one \
         major version only; keep {from}, or restore a backup into a new cluster that runs {to}"
    )]
    OtherMajor {
        /// The version the cluster runs.
        from: EtcdVersion,
        /// The version asked for.
        to: EtcdVersion,
    },
    /// A downgrade below [`EtcdVersion::DOWNGRADE_FLOOR`].
    #[error(
        "downgrading etcd from {from} to {to} is refused: etcd downgrades (etcdctl downgrade) \
         reach 3.5 at the lowest, as etcd {to} cannot read the data a newer version wrote; \
         keep {from} or choose 3.5 or later, or restore a backup into a new cluster that runs {to}"
    )]
    BelowDowngradeFloor {
        /// The version the cluster runs.
        from: EtcdVersion,
        /// The version asked for.
        to: EtcdVersion,
    },
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for EtcdVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EtcdVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        EtcdVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The versions this quorate runs, for messages: `3.4, 3.5, 3.6, 3.7`.
pub fn supported_list() -> String {
    EtcdVersion::SUPPORTED
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the `Etcd` overrides the 3.6 → 3.7 step's snapshot gate
/// (`quorate.io/etcd-3.7-without-snapshot: "true"`): a person's explicit word, never a default.
pub fn without_snapshot(etcd: &Etcd) -> bool {
    etcd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::annotations::ETCD_3_7_WITHOUT_SNAPSHOT))
        .is_some_and(|v| v == "true")
}

/// The version the `Etcd` asks for with `quorate.io/etcd-version`; `Ok(None)` when it does not
/// choose. `Err` names what is wrong with the value.
pub fn requested(etcd: &Etcd) -> Result<Option<EtcdVersion>, String> {
    let Some(text) = etcd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ETCD_VERSION))
    else {
        return Ok(None);
    };
    let version = EtcdVersion::parse(text)?;
    if !version.is_supported() {
        return Err(format!(
            "etcd {version} is not supported; choose one of {}",
            supported_list()
        ));
    }
    Ok(Some(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_or_without_v_and_patch() {
        assert_eq!(EtcdVersion::parse("3.5").unwrap(), EtcdVersion::V3_5);
        assert_eq!(EtcdVersion::parse("v3.4").unwrap(), EtcdVersion::V3_4);
        assert_eq!(EtcdVersion::parse("3.5.30").unwrap(), EtcdVersion::V3_5);
        assert!(
            EtcdVersion::parse("three")
                .unwrap_err()
                .contains("MAJOR.MINOR")
        );
        assert!(EtcdVersion::parse("3").is_err());
    }

    #[test]
    fn upgrades_and_downgrades_to_3_5_are_allowed_one_minor_step_at_a_time() {
        let v = |s| EtcdVersion::parse(s).unwrap();
        assert!(v("3.4").check_change(v("3.4")).is_ok());
        assert!(v("3.4").check_change(v("3.5")).is_ok());
        assert!(v("3.5").check_change(v("3.7")).is_ok(), "chained");
        assert!(v("3.7").check_change(v("3.5")).is_ok(), "downgrade API");
        let down = v("3.5").check_change(v("3.4")).unwrap_err();
        assert_eq!(
            down,
            VersionChangeRefused::BelowDowngradeFloor {
                from: v("3.5"),
                to: v("3.4")
            }
        );
        let text = down.to_string();
        assert!(
            text.contains("downgrading etcd from 3.5 to 3.4 is refused")
                && text.contains("choose 3.5 or later"),
            "{text}"
        );
        assert!(v("3.7").check_change(v("3.4")).is_err());
        let major = v("3.5").check_change(v("4.0")).unwrap_err().to_string();
        assert!(major.contains("one major version"), "{major}");

        assert_eq!(v("3.5").steps_to(v("3.7")), [v("3.6"), v("3.7")]);
        assert_eq!(v("3.7").steps_to(v("3.5")), [v("3.6"), v("3.5")]);
        assert_eq!(v("3.4").steps_to(v("3.5")), [v("3.5")]);
        assert!(v("3.6").steps_to(v("3.6")).is_empty());
        assert_eq!(v("3.7").next_toward(v("3.5")), Some(v("3.6")));
        assert_eq!(v("3.6").next_toward(v("3.6")), None);
    }

    #[test]
    fn every_supported_version_is_accepted_and_others_are_refused_by_name() {
        use crate::annotations::ETCD_VERSION;
        let with = |v: &str| {
            let mut e = Etcd::new("etcd", Default::default());
            e.metadata.annotations = Some([(ETCD_VERSION.to_string(), v.to_string())].into());
            requested(&e)
        };
        for (text, want) in [
            ("3.4", EtcdVersion::V3_4),
            ("3.5", EtcdVersion::V3_5),
            ("3.6", EtcdVersion::V3_6),
            ("3.7", EtcdVersion::V3_7),
        ] {
            assert_eq!(with(text), Ok(Some(want)), "{text}");
        }
        assert_eq!(requested(&Etcd::new("etcd", Default::default())), Ok(None));
        for bad in ["3.3", "3.8", "4.0"] {
            let refused = with(bad).unwrap_err();
            assert!(
                refused.contains(&format!("etcd {bad} is not supported"))
                    && refused.contains("3.4, 3.5, 3.6, 3.7"),
                "{refused}"
            );
        }
        assert!(with("latest").unwrap_err().contains("3.4, 3.5, 3.6, 3.7"));
        assert_eq!(EtcdVersion::DEFAULT, EtcdVersion::V3_6);
    }

    #[test]
    fn serialized_as_major_dot_minor() {
        assert_eq!(
            serde_json::to_string(&EtcdVersion::V3_5).unwrap(),
            "\"3.5\""
        );
        let back: EtcdVersion = serde_json::from_str("\"3.4\"").unwrap();
        assert_eq!(back, EtcdVersion::V3_4);
    }
}
