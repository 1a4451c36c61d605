//! What each member's agent publishes about its data directory, on its member lease. This is
//! the evidence the other members decide on: a member restores the cluster from the bucket only
//! when every other member said it has no data, never because the others were silent.

use crate::lease::MemberLease;
use serde::{Deserialize, Serialize};

/// Member-lease annotation holding the member's [`DataState`] as JSON.
pub const DATA_STATE_ANNOTATION: &str = "quorate.io/data-state";

/// Member-lease annotation with why the member's agent waits (empty or absent: it does not),
/// so status and events can say what is missing.
pub const WAITING_ANNOTATION: &str = "quorate.io/waiting";

/// What a member's data directory holds, as its agent last saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "data", rename_all = "camelCase")]
pub enum DataState {
    /// No member data: the directory is missing or empty, or held data etcd cannot use (which
    /// was moved aside, never deleted).
    #[serde(rename = "none")]
    Empty,
    /// Member data, with what etcd reported about it when it last ran on it.
    #[serde(rename = "present", rename_all = "camelCase")]
    Present {
        /// The cluster the data belongs to, once etcd ran on it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cluster_id: Option<u64>,
        /// The member the data belongs to, once etcd ran on it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        member_id: Option<u64>,
        /// The newest revision etcd reported on it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<i64>,
    },
    /// The directory cannot be inspected (permissions, I/O errors): nothing may be concluded.
    #[serde(rename = "unknown")]
    Unknown {
        /// What went wrong.
        reason: String,
    },
}

impl DataState {
    /// The JSON form for the lease annotation.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a data state serializes")
    }

    /// The data state a lease carries; `None` when the member never published one (an agent of
    /// an older version, or one that has not started yet), which is not evidence of anything.
    pub fn of_lease(lease: &MemberLease) -> Option<DataState> {
        let text = lease.annotations.get(DATA_STATE_ANNOTATION)?;
        Some(
            serde_json::from_str(text).unwrap_or_else(|e| DataState::Unknown {
                reason: format!("unreadable {DATA_STATE_ANNOTATION} annotation: {e}"),
            }),
        )
    }

    /// Short description for wait reasons and status.
    pub fn describe(&self) -> String {
        match self {
            DataState::Empty => "has no data".into(),
            DataState::Present {
                cluster_id,
                revision,
                ..
            } => {
                let mut s = "has data".to_string();
                if let Some(c) = cluster_id {
                    s.push_str(&format!(" of cluster {c:x}"));
                }
                if let Some(r) = revision {
                    s.push_str(&format!(" up to revision {r}"));
                }
                s
            }
            DataState::Unknown { reason } => format!("cannot tell its data ({reason})"),
        }
    }
}

/// What one other member published, as a decision sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerData {
    /// Member name.
    pub name: String,
    /// Its published data state; `None` if it never published one.
    pub state: Option<DataState>,
}

impl PeerData {
    /// Whether the member published that it is about to have data and its etcd has not reported
    /// a cluster yet: it is bootstrapping or joining now. Its etcd, once started, accepts
    /// connections but answers nothing before its cluster has formed, so asking it for the
    /// member list only waits out the client's bound.
    pub fn is_starting(&self) -> bool {
        matches!(
            self.state,
            Some(DataState::Present {
                cluster_id: None,
                ..
            })
        )
    }

    /// The published states of every desired member other than `me`, in desired order.
    pub fn from_leases(
        cluster: &crate::cluster_config::ClusterConfig,
        me: &str,
        leases: &[MemberLease],
    ) -> Vec<PeerData> {
        cluster
            .members
            .iter()
            .filter(|m| m.name != me)
            .map(|m| PeerData {
                name: m.name.clone(),
                state: leases
                    .iter()
                    .find(|l| l.name == m.lease_name)
                    .and_then(DataState::of_lease),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_peer_about_to_have_data_without_a_cluster_is_starting() {
        let peer = |state| PeerData {
            name: "m".into(),
            state,
        };
        let present = |cluster_id| DataState::Present {
            cluster_id,
            member_id: None,
            revision: None,
        };
        assert!(peer(Some(present(None))).is_starting());
        assert!(!peer(Some(present(Some(7)))).is_starting());
        assert!(!peer(Some(DataState::Empty)).is_starting());
        assert!(!peer(None).is_starting());
    }

    #[test]
    fn round_trips_through_the_annotation() {
        for state in [
            DataState::Empty,
            DataState::Present {
                cluster_id: Some(0xabc),
                member_id: Some(7),
                revision: Some(42),
            },
            DataState::Unknown {
                reason: "permission denied".into(),
            },
        ] {
            let mut lease = MemberLease::new("etcd-main-0");
            lease
                .annotations
                .insert(DATA_STATE_ANNOTATION.into(), state.to_annotation());
            assert_eq!(DataState::of_lease(&lease), Some(state));
        }
        assert_eq!(
            DataState::Empty.to_annotation(),
            r#"{"data":"none"}"#,
            "the annotation is readable by people"
        );
    }

    #[test]
    fn a_missing_annotation_is_no_evidence_and_a_garbled_one_is_unknown() {
        let mut lease = MemberLease::new("etcd-main-0");
        assert_eq!(DataState::of_lease(&lease), None);
        lease
            .annotations
            .insert(DATA_STATE_ANNOTATION.into(), "{".into());
        assert!(matches!(
            DataState::of_lease(&lease),
            Some(DataState::Unknown { .. })
        ));
    }
}
