//! Member and snapshot leases as the agents write them and the controller reads them: the same
//! `holderIdentity` formats and annotation etcd-backup-restore uses, so druid-era leases parse.
//!
//! A lease is kept independent of Kubernetes here (the local runtime stores it as a JSON file;
//! the operator maps it to a `coordination.k8s.io/v1` Lease).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use quorate_api::status::EtcdRole;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Annotation on a member lease telling whether the member's peer URL already uses TLS; the
/// controller waits for it before rolling further after enabling peer TLS.
pub const TLS_ENABLED_ANNOTATION: &str = "member.etcd.gardener.cloud/tls-enabled";

/// The lease one member's agent renews; its health and identity are read from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberLease {
    /// Lease name, equal to the member name (`<etcd>-<i>`).
    pub name: String,
    /// `<memberIDhex>:<clusterIDhex>:<Leader|Member>` (or the older `<memberIDhex>:<role>`);
    /// absent until the member first renews.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// Last renewal; absent while the member is still bootstrapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<Timestamp>,
    /// Lease annotations, e.g. [`TLS_ENABLED_ANNOTATION`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl MemberLease {
    /// A lease nobody holds yet, as the controller creates it.
    pub fn new(name: impl Into<String>) -> Self {
        MemberLease {
            name: name.into(),
            ..MemberLease::default()
        }
    }

    /// The parsed holder identity; `None` while nobody holds the lease.
    pub fn holder(&self) -> Option<Result<HolderIdentity, HolderIdentityError>> {
        self.holder_identity.as_deref().map(str::parse)
    }

    /// The `tls-enabled` annotation: `None` when absent or not a boolean.
    pub fn tls_enabled(&self) -> Option<bool> {
        match self.annotations.get(TLS_ENABLED_ANNOTATION)?.as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    /// Sets the `tls-enabled` annotation to `"true"` or `"false"`.
    pub fn set_tls_enabled(&mut self, enabled: bool) {
        self.annotations
            .insert(TLS_ENABLED_ANNOTATION.to_string(), enabled.to_string());
    }

    /// Records one renewal by the member's agent.
    pub fn renew(&mut self, holder: &HolderIdentity, tls_enabled: bool, now: Timestamp) {
        self.holder_identity = Some(holder.to_string());
        self.renew_time = Some(now);
        self.set_tls_enabled(tls_enabled);
    }
}

/// Who holds a member lease: the etcd member, its cluster and its raft role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderIdentity {
    /// etcd member ID.
    pub member_id: u64,
    /// etcd cluster ID; absent in the old two-part form.
    pub cluster_id: Option<u64>,
    /// `Leader` or `Member`.
    pub role: EtcdRole,
}

/// Why a `holderIdentity` could not be read.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum HolderIdentityError {
    /// Not `<memberID>:<role>` or `<memberID>:<clusterID>:<role>`.
    #[error(
        "lease holder identity {0:?} is neither <memberID>:<clusterID>:<role> nor \
         <memberID>:<role>"
    )]
    Shape(String),
    /// An ID is not a hexadecimal 64-bit number.
    #[error("lease holder identity {value:?} has a {what} that is not a hexadecimal number")]
    Id {
        /// The whole identity.
        value: String,
        /// `member ID` or `cluster ID`.
        what: &'static str,
    },
    /// The role is neither `Leader` nor `Member`.
    #[error("lease holder identity {0:?} has a role other than Leader or Member")]
    Role(String),
}

/// The text of a role as it appears in lease holder identities and member status.
pub fn role_str(role: EtcdRole) -> &'static str {
    match role {
        EtcdRole::Leader => "Leader",
        EtcdRole::Member => "Member",
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

impl FromStr for HolderIdentity {
    type Err = HolderIdentityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let (member, cluster, role) = match parts.as_slice() {
            [m, r] => (*m, None, *r),
            [m, c, r] => (*m, Some(*c), *r),
            _ => return Err(HolderIdentityError::Shape(s.to_string())),
        };
        let id_err = |what| HolderIdentityError::Id {
            value: s.to_string(),
            what,
        };
        let member_id = parse_hex(member).ok_or_else(|| id_err("member ID"))?;
        let cluster_id = match cluster {
            Some(c) => Some(parse_hex(c).ok_or_else(|| id_err("cluster ID"))?),
            None => None,
        };
        let role = match role {
            "Leader" => EtcdRole::Leader,
            "Member" => EtcdRole::Member,
            _ => return Err(HolderIdentityError::Role(s.to_string())),
        };
        Ok(HolderIdentity {
            member_id,
            cluster_id,
            role,
        })
    }
}

impl fmt::Display for HolderIdentity {
    /// Lower-case hex without padding, as etcd-backup-restore writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cluster_id {
            Some(c) => write!(f, "{:x}:{:x}:{}", self.member_id, c, role_str(self.role)),
            None => write!(f, "{:x}:{}", self.member_id, role_str(self.role)),
        }
    }
}

/// The lease recording the newest full or delta snapshot: its holder identity is the etcd
/// revision the snapshot reaches, in decimal. `BackupReady` is judged from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotLease {
    /// `<etcd>-full-snap` or `<etcd>-delta-snap`.
    pub name: String,
    /// Revision of the newest snapshot, in decimal; absent before the first snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// When the newest snapshot was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<Timestamp>,
    /// Lease annotations, e.g. [`BACKUP_ERROR_ANNOTATION`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Snapshot-lease annotation set by the backup leader while snapshots cannot be written (the
/// store is unreachable, refuses the credentials, ...): its value says why, and `BackupReady`
/// turns False with it. Removed once a snapshot succeeds again.
pub const BACKUP_ERROR_ANNOTATION: &str = "quorate.io/backup-error";

impl SnapshotLease {
    /// A lease with no snapshot recorded yet.
    pub fn new(name: impl Into<String>) -> Self {
        SnapshotLease {
            name: name.into(),
            ..SnapshotLease::default()
        }
    }

    /// The recorded revision; `None` before the first snapshot.
    pub fn revision(&self) -> Option<Result<i64, std::num::ParseIntError>> {
        self.holder_identity.as_deref().map(str::parse)
    }

    /// Records a snapshot reaching `revision`, taken at `now`.
    pub fn record(&mut self, revision: i64, now: Timestamp) {
        self.holder_identity = Some(revision.to_string());
        self.renew_time = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_three_part_form() {
        let h: HolderIdentity = "8e9e05c52164694d:cdf818194e3a8c32:Leader".parse().unwrap();
        assert_eq!(
            h,
            HolderIdentity {
                member_id: 0x8e9e05c52164694d,
                cluster_id: Some(0xcdf818194e3a8c32),
                role: EtcdRole::Leader
            }
        );
    }

    #[test]
    fn parses_the_old_two_part_form() {
        let h: HolderIdentity = "1a2b:Member".parse().unwrap();
        assert_eq!(h.member_id, 0x1a2b);
        assert_eq!(h.cluster_id, None);
        assert_eq!(h.role, EtcdRole::Member);
    }

    #[test]
    fn accepts_upper_case_hex_but_writes_lower_case() {
        let h: HolderIdentity = "ABC:DEF:Member".parse().unwrap();
        assert_eq!(h.to_string(), "abc:def:Member");
    }

    #[test]
    fn formats_without_padding() {
        let h = HolderIdentity {
            member_id: 0xa,
            cluster_id: Some(0xff),
            role: EtcdRole::Member,
        };
        assert_eq!(h.to_string(), "a:ff:Member");
        let old = HolderIdentity {
            cluster_id: None,
            ..h
        };
        assert_eq!(old.to_string(), "a:Member");
    }

    #[test]
    fn format_then_parse_is_identity() {
        for h in [
            HolderIdentity {
                member_id: u64::MAX,
                cluster_id: Some(0),
                role: EtcdRole::Leader,
            },
            HolderIdentity {
                member_id: 1,
                cluster_id: None,
                role: EtcdRole::Member,
            },
        ] {
            assert_eq!(h.to_string().parse::<HolderIdentity>(), Ok(h));
        }
    }

    #[test]
    fn rejects_malformed_identities_with_a_reason() {
        let cases = [
            ("", "neither"),
            ("abc", "neither"),
            ("a:b:c:Leader", "neither"),
            ("xyz:Leader", "member ID"),
            (":Leader", "member ID"),
            ("+a:Leader", "member ID"),
            ("11112222333344445:Leader", "member ID"),
            ("a:zz:Leader", "cluster ID"),
            ("a:b:leader", "role other than"),
            ("a:Follower", "role other than"),
        ];
        for (input, expected) in cases {
            let err = input.parse::<HolderIdentity>().unwrap_err().to_string();
            assert!(err.contains(expected), "{input:?}: {err}");
        }
    }

    #[test]
    fn tls_annotation_round_trips_and_ignores_garbage() {
        let mut lease = MemberLease::new("etcd-0");
        assert_eq!(lease.tls_enabled(), None);
        lease.set_tls_enabled(true);
        assert_eq!(lease.annotations[TLS_ENABLED_ANNOTATION], "true");
        assert_eq!(lease.tls_enabled(), Some(true));
        lease.set_tls_enabled(false);
        assert_eq!(lease.tls_enabled(), Some(false));
        lease
            .annotations
            .insert(TLS_ENABLED_ANNOTATION.into(), "yes".into());
        assert_eq!(lease.tls_enabled(), None);
    }

    #[test]
    fn renew_sets_holder_time_and_annotation() {
        let mut lease = MemberLease::new("etcd-1");
        assert!(lease.holder().is_none());
        let h = HolderIdentity {
            member_id: 0x10,
            cluster_id: Some(0x20),
            role: EtcdRole::Leader,
        };
        lease.renew(&h, true, ts("2024-01-01T00:00:00Z"));
        assert_eq!(lease.holder_identity.as_deref(), Some("10:20:Leader"));
        assert_eq!(lease.holder(), Some(Ok(h)));
        assert_eq!(lease.renew_time, Some(ts("2024-01-01T00:00:00Z")));
        assert_eq!(lease.tls_enabled(), Some(true));
    }

    #[test]
    fn member_lease_json_uses_kubernetes_field_names() {
        let mut lease = MemberLease::new("etcd-1");
        lease.renew(
            &"1:2:Member".parse().unwrap(),
            false,
            ts("2024-05-06T07:08:09Z"),
        );
        let json = serde_json::to_value(&lease).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "etcd-1",
                "holderIdentity": "1:2:Member",
                "renewTime": "2024-05-06T07:08:09Z",
                "annotations": {"member.etcd.gardener.cloud/tls-enabled": "false"}
            })
        );
        let back: MemberLease = serde_json::from_value(json).unwrap();
        assert_eq!(back, lease);
        let bare: MemberLease = serde_json::from_str(r#"{"name":"etcd-2"}"#).unwrap();
        assert_eq!(bare, MemberLease::new("etcd-2"));
        assert_eq!(
            serde_json::to_string(&bare).unwrap(),
            r#"{"name":"etcd-2"}"#
        );
    }

    #[test]
    fn snapshot_lease_holds_a_decimal_revision() {
        let mut lease = SnapshotLease::new("etcd-full-snap");
        assert!(lease.revision().is_none());
        lease.record(12345, ts("2024-01-01T00:00:00Z"));
        assert_eq!(lease.holder_identity.as_deref(), Some("12345"));
        assert_eq!(lease.revision(), Some(Ok(12345)));
        lease.holder_identity = Some("abc".into());
        assert!(matches!(lease.revision(), Some(Err(_))));
        let json = serde_json::to_string(&SnapshotLease::new("x")).unwrap();
        assert_eq!(json, r#"{"name":"x"}"#);
    }
}
