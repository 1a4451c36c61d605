//! The etcd version a cluster runs: which minor versions quorate supports, the annotation that
//! chooses one, and which changes between versions are allowed (one minor step up; never down).

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

    /// Whether moving a cluster from `self` to `to` is allowed: the same version, or one minor
    /// version up (etcd supports nothing else). `Err` says why not and what to do instead.
    pub fn check_change(self, to: EtcdVersion) -> Result<(), String> {
        if to == self {
            return Ok(());
        }
        if to < self {
            return Err(format!(
                "downgrading etcd from {self} to {to} is refused: etcd cannot run data a newer \
                 version wrote (\"cluster cannot be downgraded\"); keep {self}, or restore a \
                 backup into a new cluster that runs {to}"
            ));
        }
        if to.major != self.major || to.minor != self.minor + 1 {
            let next = EtcdVersion {
                major: self.major,
                minor: self.minor + 1,
            };
            return Err(format!(
                "upgrading etcd from {self} to {to} skips a version: etcd upgrades one minor \
                 version at a time; upgrade to {next} first"
            ));
        }
        Ok(())
    }
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
    fn only_one_minor_step_up_is_allowed() {
        let v = |s| EtcdVersion::parse(s).unwrap();
        assert!(v("3.4").check_change(v("3.4")).is_ok());
        assert!(v("3.4").check_change(v("3.5")).is_ok());
        let down = v("3.5").check_change(v("3.4")).unwrap_err();
        assert!(
            down.contains("downgrading etcd from 3.5 to 3.4 is refused"),
            "{down}"
        );
        let skip = v("3.4").check_change(v("3.6")).unwrap_err();
        assert!(
            skip.contains("skips a version") && skip.contains("to 3.5 first"),
            "{skip}"
        );
        assert!(v("3.5").check_change(v("4.0")).is_err());
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
