//! Taking turns at something that briefly takes one member out of service: a restart onto a
//! new configuration (`rollout`) or a defragmentation (`maintenance::defrag`). Followers go
//! one at a time in desired order, the leader last, after it handed leadership to a follower
//! that already had its turn; and nobody goes while another member's etcd does not answer in
//! the same cluster with a leader. Judged from etcd's answers only: a crashed peer's lease
//! still looks fresh for a while, its etcd does not answer.

use super::recovery::EtcdAnswer;

/// One member as a turn sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnPeer {
    /// Member name.
    pub name: String,
    /// Its etcd's status answer, `None` when it did not answer.
    pub answer: Option<EtcdAnswer>,
    /// Whether it already had its turn.
    pub done: bool,
}

/// What is taking turns, for the reasons a member waits.
#[derive(Clone, Copy, Debug)]
pub struct Activity {
    /// What `me` would do, as a gerund: "restarting", "defragmenting".
    pub doing: &'static str,
    /// What a peer before `me` must have done, after its name: "restarts with the new
    /// configuration", "is defragmented".
    pub done_first: &'static str,
}

fn is_leader(peer: &TurnPeer) -> bool {
    peer.answer.is_some_and(|a| a.leader_id == a.member_id)
}

/// Whether member `me` may take its turn now (`peers`: every member etcd lists, in desired
/// order, `me` included): every other member answers in `me`'s cluster with a leader, and the
/// followers before `me` (desired order, the leader last) had their turn. `Err` says what it
/// waits for.
pub fn may_take_turn(me: &str, peers: &[TurnPeer], activity: Activity) -> Result<(), String> {
    let Activity { doing, done_first } = activity;
    let mine = peers
        .iter()
        .find(|m| m.name == me)
        .and_then(|m| m.answer)
        .ok_or_else(|| format!("{me}'s own etcd does not answer; {doing} waits until it does"))?;
    let mut order: Vec<&TurnPeer> = peers.iter().collect();
    order.sort_by_key(|m| is_leader(m));
    let mut before_me = true;
    for peer in order {
        let name = &peer.name;
        if name == me {
            before_me = false;
            continue;
        }
        match peer.answer {
            Some(a) if a.cluster_id == mine.cluster_id && a.leader_id != 0 => {}
            Some(a) if a.cluster_id != mine.cluster_id => {
                return Err(format!(
                    "{name} answers for cluster {:x}, not {:x}; {doing} {me} is left alone \
                     until every member is in one cluster",
                    a.cluster_id, mine.cluster_id
                ));
            }
            _ => {
                return Err(format!(
                    "{name} does not answer with a leader; {doing} {me} now could lose quorum"
                ));
            }
        }
        if before_me && !peer.done {
            return Err(format!("{name} {done_first} before {me}"));
        }
    }
    Ok(())
}

/// When `me` leads and its turn came, the follower leadership moves to first: the first (in
/// desired order) that had its turn and answers in the same cluster following `me`, so the new
/// leader is a healthy member that is already through and no election waits for a timeout.
/// `None` when `me` does not lead or no such follower exists (a one-member cluster).
pub fn handover_target(me: &str, peers: &[TurnPeer]) -> Option<(String, u64)> {
    let mine = peers.iter().find(|m| m.name == me)?.answer?;
    if mine.leader_id != mine.member_id {
        return None;
    }
    peers
        .iter()
        .filter(|m| m.name != me && m.done)
        .find_map(|m| {
            let a = m.answer?;
            (a.cluster_id == mine.cluster_id && a.leader_id == mine.member_id)
                .then(|| (m.name.clone(), a.member_id))
        })
}
