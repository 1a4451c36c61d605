//! Plain data returned by the adapter, independent of etcd-client's response types so the
//! planner and status code can use (and construct) them freely.

use std::fmt;

/// Formats a member or cluster ID the way etcd and etcdctl print it (lower-case hex).
pub fn format_id(id: u64) -> String {
    format!("{id:x}")
}

/// Parses an ID printed by [`format_id`] or etcdctl.
pub fn parse_id(text: &str) -> Option<u64> {
    u64::from_str_radix(text.trim(), 16).ok()
}

pub use quorate_core::membership::{Member, MemberList};

fn member(m: &etcd_client::Member) -> Member {
    Member {
        id: m.id(),
        name: m.name().to_string(),
        peer_urls: m.peer_urls().to_vec(),
        client_urls: m.client_urls().to_vec(),
        is_learner: m.is_learner(),
    }
}

pub(crate) fn members(list: &[etcd_client::Member]) -> Vec<Member> {
    list.iter().map(member).collect()
}

/// etcd's CRC-32C of its key space at a revision (`HashKV`): every MVCC entry up to the
/// revision, those at or below the compaction only if still live there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpaceHash {
    /// The revision hashed.
    pub revision: i64,
    /// The member's compaction revision when it hashed.
    pub compact_revision: i64,
    /// The hash.
    pub hash: u32,
}

/// One member's own view of itself and the cluster (`etcdctl endpoint status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// The endpoint that answered.
    pub endpoint: String,
    /// ID of the answering member.
    pub member_id: u64,
    /// Cluster ID.
    pub cluster_id: u64,
    /// ID of the leader this member follows; 0 when it knows none.
    pub leader_id: u64,
    /// Current raft term.
    pub raft_term: u64,
    /// Last raft log index.
    pub raft_index: u64,
    /// Last applied raft index.
    pub raft_applied_index: u64,
    /// Current key-value store revision.
    pub revision: i64,
    /// Size of the backend database file in bytes.
    pub db_size: i64,
    /// Bytes of the database actually in use (the rest is reclaimable by defragment).
    pub db_size_in_use: i64,
    /// True when the member is a learner.
    pub is_learner: bool,
    /// etcd server version, e.g. `3.4.23`.
    pub version: String,
    /// Errors the member reports about itself (e.g. active alarms).
    pub errors: Vec<String>,
    /// The version of its data (`storageVersion`, etcd 3.6+; empty before).
    pub storage_version: String,
    /// The target of the downgrade etcd has enabled (`downgradeInfo`, etcd 3.6+); `None`
    /// when none is.
    pub downgrade_target: Option<String>,
}

impl MemberStatus {
    /// True when this member is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader_id != 0 && self.leader_id == self.member_id
    }

    /// True when the member knows a leader.
    pub fn has_leader(&self) -> bool {
        self.leader_id != 0
    }
}

/// The kind of an etcd alarm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlarmKind {
    /// The backend quota is exhausted; etcd refuses writes.
    NoSpace,
    /// A data inconsistency was detected between members.
    Corrupt,
}

impl fmt::Display for AlarmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        })
    }
}

impl AlarmKind {
    pub(crate) fn to_client(self) -> etcd_client::AlarmType {
        match self {
            AlarmKind::NoSpace => etcd_client::AlarmType::Nospace,
            AlarmKind::Corrupt => etcd_client::AlarmType::Corrupt,
        }
    }

    pub(crate) fn from_client(t: etcd_client::AlarmType) -> Option<AlarmKind> {
        match t {
            etcd_client::AlarmType::Nospace => Some(AlarmKind::NoSpace),
            etcd_client::AlarmType::Corrupt => Some(AlarmKind::Corrupt),
            etcd_client::AlarmType::None => None,
        }
    }
}

/// An active alarm raised by (or for) a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Alarm {
    /// The member the alarm belongs to.
    pub member_id: u64,
    /// What is wrong.
    pub kind: AlarmKind,
}

impl fmt::Display for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on member {}", self.kind, format_id(self.member_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_as_hex() {
        let id = 0x8e9e_05c5_2164_694d;
        assert_eq!(format_id(id), "8e9e05c52164694d");
        assert_eq!(parse_id("8e9e05c52164694d"), Some(id));
        assert_eq!(parse_id("not hex"), None);
    }

    #[test]
    fn leader_flags() {
        let mut status = MemberStatus {
            endpoint: "http://127.0.0.1:1".into(),
            member_id: 7,
            cluster_id: 1,
            leader_id: 0,
            raft_term: 2,
            raft_index: 5,
            raft_applied_index: 5,
            revision: 1,
            db_size: 1,
            db_size_in_use: 1,
            is_learner: false,
            version: "3.4.23".into(),
            errors: vec![],
            storage_version: String::new(),
            downgrade_target: None,
        };
        assert!(!status.has_leader() && !status.is_leader());
        status.leader_id = 7;
        assert!(status.is_leader());
        status.leader_id = 8;
        assert!(status.has_leader() && !status.is_leader());
    }
}

/// A call of etcd's downgrade API ([`crate::MemberClient::downgrade`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DowngradeCall {
    /// `downgrade validate MAJOR.MINOR`: whether etcd would downgrade to it.
    Validate(String),
    /// `downgrade enable MAJOR.MINOR`: etcd moves the cluster version (and each member's
    /// storage version) down, and accepts members of that version.
    Enable(String),
    /// `downgrade cancel`: etcd stops the enabled downgrade.
    Cancel,
}
