//! Whose turn it is to join: the membership planner names one member at a time, so members
//! added by a scale-out join in ordinal order instead of racing for etcd's single learner slot.

use quorate_core::cluster_config::ClusterConfig;
use quorate_core::join::{JoinDecision, may_join};
use quorate_core::member_start::ListedMember;
use quorate_core::planner::{DesiredMember, ObservedMember};

/// `None` when `me` may add itself as a learner now; otherwise why it must wait.
pub fn not_my_turn(cluster: &ClusterConfig, me: &str, listed: &[ListedMember]) -> Option<String> {
    let observed: Vec<ObservedMember> = listed
        .iter()
        .map(|m| ObservedMember {
            id: m.id,
            name: m.name.clone(),
            peer_urls: m.peer_urls.clone(),
            is_learner: m.is_learner,
            // etcd judges health itself and refuses a learner add without a healthy quorum
            // ("unhealthy cluster"); here the planner only orders the joins.
            healthy: !m.name.is_empty(),
            is_leader: false,
        })
        .collect();
    let desired: Vec<DesiredMember> = cluster
        .members
        .iter()
        .map(|m| DesiredMember {
            name: m.name.clone(),
            peer_urls: vec![m.peer_url.clone()],
        })
        .collect();
    match may_join(&observed, &desired, me) {
        JoinDecision::AddSelfAsLearner { .. } => None,
        JoinDecision::Wait { step } => Some(format!("not {me}'s turn to join yet; first: {step}")),
        other => Some(format!(
            "{me} cannot add itself as a learner now ({other:?})"
        )),
    }
}
