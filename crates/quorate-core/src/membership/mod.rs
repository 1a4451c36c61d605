//! Everything about who is a member of an etcd cluster and how that changes: how a member's
//! etcd starts (`start`), whose turn it is to join (`join`), the one next safe membership step
//! (`planner`), taking turns at leaving service (`turns`), rolling restarts (`rollout`), what each member publishes about its data
//! (`data_state`) and recovery after a majority lost its data (`recovery`).
//!
//! Every decision here is pure and rests on positive evidence: etcd's own view (member list,
//! status), what each member's agent published about its data, and what the bucket records.
//! Silence is never evidence; when the evidence is missing the decision is to wait, with a
//! reason that names what is missing and what overrides it. The agent's membership executor
//! carries the steps out for every caller (scale-out, scale-in, recovery, rollout).

pub mod adopt;
pub mod data_state;
pub mod join;
pub mod planner;
pub mod published;
pub mod readiness;
pub mod recovery;
pub mod rollout;
pub mod scale_in;
pub mod start;
pub mod start_action;
pub mod turns;

/// One entry of etcd's member list: the one type for it from the etcd adapter through every
/// decision here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Member {
    /// etcd member ID.
    pub id: u64,
    /// `--name`; empty while the member was added but its etcd has never started.
    pub name: String,
    /// Advertised peer URLs; how a never-started member is recognised.
    pub peer_urls: Vec<String>,
    /// Advertised client URLs; empty until the member has started.
    pub client_urls: Vec<String>,
    /// A non-voting learner.
    pub is_learner: bool,
}

impl Member {
    /// A member list entry without client URLs (what tests and decisions usually need).
    pub fn new(id: u64, name: &str, peer_urls: Vec<String>, is_learner: bool) -> Self {
        Member {
            id,
            name: name.to_string(),
            peer_urls,
            client_urls: Vec::new(),
            is_learner,
        }
    }

    /// False for a member that was added but has never started (etcd lists it without a name).
    pub fn is_started(&self) -> bool {
        !self.name.is_empty()
    }

    /// Whether this member's etcd ever served: it published its client URLs. A bootstrap
    /// member that has not started yet is listed with its name but without client URLs.
    pub fn has_served(&self) -> bool {
        !self.client_urls.is_empty()
    }
}

/// etcd's member list as one member answered it, with the cluster that member belongs to: a
/// list is only evidence about the cluster it came from (a fork answers with another ID).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberList {
    /// The cluster ID in the answer's header.
    pub cluster_id: u64,
    /// The members.
    pub members: Vec<Member>,
}
