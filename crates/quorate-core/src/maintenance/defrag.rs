//! Defragmentation in rounds, one member at a time, so that no write stalls.
//!
//! etcd's defragmentation rewrites a member's whole database and blocks it meanwhile; on the
//! leader that stalls every write of the cluster (etcd-backup-restore #1061: ~40 s). So a round
//! goes like a rolling restart ([`turns`](crate::membership::turns)): followers one at a time in
//! desired order, the leader last after it handed leadership to a follower that is already
//! defragmented; never two at once, never while a member's etcd does not answer with a leader.
//!
//! The leader's agent starts a round when one is due ([`round_due`]): the schedule fired since
//! the last round started, a member's database crossed a threshold ([`DefragPolicy`]), a person
//! asked (the `quorate.io/defragment` annotation, `quorate defrag NAME`), or etcd raised
//! `NOSPACE`. Rounds are numbered; every agent publishes on its lease the newest round it knows
//! and its own last defragmentation ([`DefragRecord`]), so a new leader continues the round its
//! predecessor started (the round lives on every lease, not in one agent's memory) and each
//! member sees from the leases who is through. Only the leader's clock decides *when* a round
//! is due; which member goes next rests on etcd's answers and the members' own records.

use jiff::Timestamp;
use quorate_api::CronSchedule;
use serde::{Deserialize, Serialize};

use crate::lease::MemberLease;
use crate::membership::recovery::EtcdAnswer;
use crate::membership::turns::{Activity, TurnPeer, handover_target, may_take_turn};

/// Member-lease annotation with the member's [`DefragRecord`] (JSON).
pub const DEFRAG_ANNOTATION: &str = "quorate.io/defragmentation";

const MIB: u64 = 1024 * 1024;

/// The thresholds (quorate-api's, from the `Etcd`'s annotations).
pub use quorate_api::defrag::DefragThresholds as DefragPolicy;

/// Why a database of `db_size` bytes with `in_use` bytes in use under `quota` needs a
/// defragmentation now under `policy`, or `None`.
pub fn need(policy: &DefragPolicy, db_size: u64, in_use: u64, quota: u64) -> Option<String> {
    let free = db_size.saturating_sub(in_use);
    if db_size > 0
        && free >= policy.free_bytes
        && free * 100 >= db_size * u64::from(policy.free_percent)
    {
        return Some(format!(
            "{} of its {} are free pages (thresholds: {} % and {})",
            bytes(free),
            bytes(db_size),
            policy.free_percent,
            bytes(policy.free_bytes)
        ));
    }
    // Defragmenting only helps when there is something to reclaim.
    if policy.near_quota_percent > 0
        && quota > 0
        && free > 0
        && db_size * 100 >= quota * u64::from(100 - policy.near_quota_percent.min(100))
    {
        return Some(format!(
            "its {} are within {} % of the {} quota",
            bytes(db_size),
            policy.near_quota_percent,
            bytes(quota)
        ));
    }
    None
}

/// Sizes in MiB with one decimal, as people read them.
fn bytes(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / MIB as f64)
}

/// Why a round runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RoundReason {
    /// `spec.etcd.defragmentationSchedule` fired: every member.
    Schedule,
    /// A person asked: every member.
    OnDemand,
    /// etcd raised `NOSPACE`: every member, after a compaction.
    NoSpace,
    /// A member crossed a [`DefragPolicy`] threshold: only the members that need it.
    Threshold,
}

impl RoundReason {
    /// Whether every member is defragmented in such a round (else only those that need it).
    pub fn every_member(self) -> bool {
        !matches!(self, RoundReason::Threshold)
    }
}

/// One round of defragmentation, as the leader that started it announced it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefragRound {
    /// Increasing number; the newest round any lease names is the current one.
    pub id: u64,
    /// Why it runs.
    pub reason: RoundReason,
    /// When it started, by the clock of the leader that started it (used only to tell when the
    /// schedule fires next).
    pub started_at: Timestamp,
    /// The newest on-demand request known when it started (carried from round to round, so a
    /// request is carried out once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The cluster's revision when it started: a `NOSPACE` alarm that still stands after a
    /// round at the same revision is reported, not answered with another round.
    #[serde(default)]
    pub revision: i64,
}

/// How a member's last defragmentation went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefragOutcome {
    /// The round it belonged to.
    pub round: u64,
    /// When it finished, by this member's clock.
    pub at: Timestamp,
    /// Database size before, in bytes.
    pub size_before: u64,
    /// Database size after, in bytes (equal to before when skipped or failed).
    pub size_after: u64,
    /// How long etcd took, in milliseconds.
    pub millis: u64,
    /// Not needed in a threshold round: the member was left alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// etcd's error, or the timeout, when it failed; the round goes on without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a member publishes about defragmentation on its lease ([`DEFRAG_ANNOTATION`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefragRecord {
    /// The newest round this member knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<DefragRound>,
    /// Its own last defragmentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<DefragOutcome>,
}

impl DefragRecord {
    /// The record a lease carries; `None` when it has none or it does not parse.
    pub fn of_lease(lease: &MemberLease) -> Option<DefragRecord> {
        serde_json::from_str(lease.annotations.get(DEFRAG_ANNOTATION)?).ok()
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a defragmentation record serializes")
    }

    /// Whether this member is through with round `id`.
    pub fn through(&self, id: u64) -> bool {
        self.last.as_ref().is_some_and(|l| l.round >= id)
    }
}

/// The newest round any record names.
pub fn current_round<'a>(
    records: impl IntoIterator<Item = &'a DefragRecord>,
) -> Option<DefragRound> {
    records
        .into_iter()
        .filter_map(|r| r.round.as_ref())
        .max_by_key(|r| r.id)
        .cloned()
}

/// Where the round taken up for one on-demand request stands, as the members' records say:
/// what `quorate defrag` and `kubectl quorate defrag` wait for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestProgress {
    /// No round has taken the request up yet.
    NotStarted,
    /// The round runs: the members through with it, with how it went, and those still to go.
    Running {
        /// Members through with the round.
        through: Vec<(String, DefragOutcome)>,
        /// Members still to go.
        waiting: Vec<String>,
    },
    /// Every member is through.
    Done(Vec<(String, DefragOutcome)>),
}

/// How far the round for `request` has come, from each member's record (a member without a
/// record has not defragmented yet).
pub fn request_progress(records: Vec<(String, DefragRecord)>, request: &str) -> RequestProgress {
    let Some(round) = current_round(records.iter().map(|(_, r)| r))
        .filter(|r| r.request.as_deref() == Some(request))
    else {
        return RequestProgress::NotStarted;
    };
    let mut through = Vec::new();
    let mut waiting = Vec::new();
    for (member, record) in records {
        match record.last.filter(|l| l.round >= round.id) {
            Some(outcome) => through.push((member, outcome)),
            None => waiting.push(member),
        }
    }
    if waiting.is_empty() {
        RequestProgress::Done(through)
    } else {
        RequestProgress::Running { through, waiting }
    }
}

/// One member as a defragmentation round sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefragPeer {
    /// Member name.
    pub name: String,
    /// Its etcd's status answer, `None` when it did not answer.
    pub answer: Option<EtcdAnswer>,
    /// Its database size and the part in use, from the same answer.
    pub sizes: Option<(u64, u64)>,
    /// What its lease says.
    pub record: DefragRecord,
}

/// What the leader knows when it asks whether a round is due.
#[derive(Clone, Debug)]
pub struct RoundInputs<'a> {
    /// `spec.etcd.defragmentationSchedule`.
    pub schedule: &'a CronSchedule,
    /// Thresholds.
    pub policy: DefragPolicy,
    /// `--quota-backend-bytes`.
    pub quota: u64,
    /// The on-demand request the configuration carries (annotation value).
    pub request: Option<&'a str>,
    /// Whether etcd reports a `NOSPACE` alarm.
    pub no_space: bool,
    /// The cluster's revision now.
    pub revision: i64,
    /// When this member became leader (by its clock): the schedule counts from here when no
    /// round ever ran.
    pub leading_since: Timestamp,
    /// Now, by this member's clock.
    pub now: Timestamp,
}

/// Whether round `round` is over: every member etcd lists is through with it.
pub fn round_complete(round: &DefragRound, peers: &[DefragPeer]) -> bool {
    peers.iter().all(|p| p.record.through(round.id))
}

/// For the leader: the round to start now, or `None`. Never while the current round is
/// unfinished. `NOSPACE` first, then a person's request, then the schedule, then thresholds.
pub fn round_due(
    current: Option<&DefragRound>,
    peers: &[DefragPeer],
    inputs: &RoundInputs<'_>,
) -> Option<DefragRound> {
    if current.is_some_and(|c| !round_complete(c, peers)) {
        return None;
    }
    let known_request = current.and_then(|c| c.request.as_deref());
    let asked = inputs.request.is_some_and(|r| Some(r) != known_request);
    let since = current.map_or(inputs.leading_since, |c| c.started_at);
    let scheduled = inputs
        .schedule
        .next_after(since)
        .is_some_and(|run| run <= inputs.now);
    let answered_alarm =
        current.is_some_and(|c| c.reason == RoundReason::NoSpace && c.revision >= inputs.revision);
    let reason = if inputs.no_space && !answered_alarm {
        RoundReason::NoSpace
    } else if asked {
        RoundReason::OnDemand
    } else if scheduled {
        RoundReason::Schedule
    } else if peers
        .iter()
        .any(|p| needs(p, inputs.policy, inputs.quota).is_some())
    {
        RoundReason::Threshold
    } else {
        return None;
    };
    Some(DefragRound {
        id: current.map_or(1, |c| c.id + 1),
        reason,
        started_at: inputs.now,
        request: inputs
            .request
            .map(str::to_string)
            .or_else(|| known_request.map(str::to_string)),
        revision: inputs.revision,
    })
}

/// Whether `peer` needs a defragmentation now. Nearness to the quota counts only when the file
/// grew since the member's last defragmentation: a database whose live data is near the quota
/// would otherwise be defragmented round after round for nothing.
fn needs(peer: &DefragPeer, policy: DefragPolicy, quota: u64) -> Option<String> {
    let (size, in_use) = peer.sizes?;
    let grown = peer
        .record
        .last
        .as_ref()
        .is_none_or(|l| l.skipped || size > l.size_after);
    let policy = if grown {
        policy
    } else {
        DefragPolicy {
            near_quota_percent: 0,
            ..policy
        }
    };
    need(&policy, size, in_use, quota)
}

/// Share of the quota a database may fill after a `NOSPACE` round for the alarm to be disarmed:
/// below it, writes have room again; above it, disarming would only raise the alarm again.
pub const NO_SPACE_DISARM_PERCENT: u64 = 90;

/// What the leader does about a `NOSPACE` alarm once the round it started for it is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoSpaceVerdict {
    /// No alarm, or its round is not over yet.
    Nothing,
    /// Every member's database is back under the quota with margin: disarm.
    Disarm,
    /// The live data alone does not fit: a person must raise the quota or delete data.
    TooLarge(String),
}

/// The verdict on a standing `NOSPACE` alarm after `round` (`peers` with their sizes now).
pub fn no_space_verdict(
    no_space: bool,
    round: Option<&DefragRound>,
    peers: &[DefragPeer],
    quota: u64,
) -> NoSpaceVerdict {
    let Some(round) = round.filter(|r| no_space && r.reason == RoundReason::NoSpace) else {
        return NoSpaceVerdict::Nothing;
    };
    if !round_complete(round, peers) || quota == 0 {
        return NoSpaceVerdict::Nothing;
    }
    let limit = quota / 100 * NO_SPACE_DISARM_PERCENT;
    let over: Vec<String> = peers
        .iter()
        .filter_map(|p| {
            let (size, _) = p.sizes?;
            (size > limit).then(|| format!("{} holds {}", p.name, bytes(size)))
        })
        .collect();
    if peers.iter().any(|p| p.sizes.is_none()) {
        return NoSpaceVerdict::Nothing;
    }
    if over.is_empty() {
        return NoSpaceVerdict::Disarm;
    }
    NoSpaceVerdict::TooLarge(format!(
        "etcd's NOSPACE alarm stands: after compacting and defragmenting every member, {} of \
         the {} quota ({} % allowed to disarm); raise spec.etcd.quota or delete data (a delete \
         is accepted under the alarm; the next round then runs by itself)",
        over.join(", "),
        bytes(quota),
        NO_SPACE_DISARM_PERCENT
    ))
}

/// What member `me` does about the current round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DefragTurn {
    /// Nothing: no round, or this member is through with it.
    Idle,
    /// A threshold round that this member does not need: record it as through, untouched.
    Skip,
    /// Defragment this member's etcd now.
    Defragment,
    /// This member leads: move leadership to this defragmented follower first.
    HandOver {
        /// Its name.
        name: String,
        /// Its member ID.
        id: u64,
    },
    /// Not yet; why.
    Wait(String),
}

const DEFRAGMENT: Activity = Activity {
    doing: "defragmenting",
    done_first: "is defragmented",
};

/// Member `me`'s turn in `round` (`peers`: every member etcd lists, in desired order, `me`
/// included).
pub fn member_turn(
    me: &str,
    round: Option<&DefragRound>,
    peers: &[DefragPeer],
    policy: DefragPolicy,
    quota: u64,
) -> DefragTurn {
    let Some(round) = round else {
        return DefragTurn::Idle;
    };
    let Some(mine) = peers.iter().find(|p| p.name == me) else {
        return DefragTurn::Idle;
    };
    if mine.record.through(round.id) {
        return DefragTurn::Idle;
    }
    if !round.reason.every_member() && needs(mine, policy, quota).is_none() {
        return DefragTurn::Skip;
    }
    let turn_peers: Vec<TurnPeer> = peers
        .iter()
        .map(|p| TurnPeer {
            name: p.name.clone(),
            answer: p.answer,
            done: p.record.through(round.id),
        })
        .collect();
    if let Err(why) = may_take_turn(me, &turn_peers, DEFRAGMENT) {
        return DefragTurn::Wait(why);
    }
    match handover_target(me, &turn_peers) {
        Some((name, id)) => DefragTurn::HandOver { name, id },
        None => DefragTurn::Defragment,
    }
}

/// What the leader adds to a defragmentation check.
#[derive(Clone, Copy, Debug)]
pub struct LeaderView {
    /// When this member became leader (by its clock).
    pub since: Timestamp,
    /// Whether etcd reports a `NOSPACE` alarm.
    pub no_space: bool,
    /// The cluster's revision now.
    pub revision: i64,
    /// Now, by this member's clock.
    pub now: Timestamp,
}

/// What one member observed for its defragmentation check, gathered once by its duty.
#[derive(Clone, Debug)]
pub struct DefragEvidence<'a> {
    /// This member's name.
    pub me: &'a str,
    /// Its own record (the lease it publishes).
    pub mine: &'a DefragRecord,
    /// The records the other members' leases carry.
    pub known: &'a [DefragRecord],
    /// Every member etcd lists, with its answer, sizes and record (in desired order); `None`
    /// while not observed: a follower through with the newest round asks no member anything.
    pub peers: Option<&'a [DefragPeer]>,
    /// Set while this member leads.
    pub leader: Option<LeaderView>,
    /// The schedule (`spec.etcd.defragmentationSchedule`).
    pub schedule: &'a CronSchedule,
    /// Thresholds.
    pub policy: DefragPolicy,
    /// `--quota-backend-bytes`.
    pub quota: u64,
    /// The on-demand request the configuration carries.
    pub request: Option<&'a str>,
}

/// What a member does in its defragmentation check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DefragStep {
    /// A follower through with the newest round any lease names: it follows that round and
    /// does nothing else.
    Follow(Option<DefragRound>),
    /// Ask every member etcd lists (answers, sizes) and decide again.
    ObservePeers,
    /// Act on the current round.
    Act(DefragPlan),
}

/// A member's part in the current round, when it had to look at every member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefragPlan {
    /// The newest round any member names.
    pub current: Option<DefragRound>,
    /// For the leader: the round to start now (a `NOSPACE` round compacts the history first;
    /// when that fails, the round is not started and the member follows `current`, whose turn
    /// is then over: a round is only due once the current one is complete).
    pub start: Option<DefragRound>,
    /// For the leader: what to do about a `NOSPACE` alarm after `current`.
    pub no_space: NoSpaceVerdict,
    /// This member's turn in the round it follows (`start`, or else `current`).
    pub turn: DefragTurn,
}

/// The one defragmentation decision of a member's check: the round it follows, the round the
/// leader starts, the leader's verdict on a `NOSPACE` alarm and this member's turn.
pub fn decide(evidence: &DefragEvidence<'_>) -> DefragStep {
    let e = evidence;
    if e.leader.is_none() {
        let newest = current_round(e.known.iter().chain([e.mine]));
        if newest.as_ref().is_none_or(|r| e.mine.through(r.id)) {
            return DefragStep::Follow(newest);
        }
    }
    let Some(peers) = e.peers else {
        return DefragStep::ObservePeers;
    };
    let current = current_round(peers.iter().map(|p| &p.record));
    let (start, no_space) = match e.leader {
        Some(leader) => {
            let verdict = no_space_verdict(leader.no_space, current.as_ref(), peers, e.quota);
            let inputs = RoundInputs {
                schedule: e.schedule,
                policy: e.policy,
                quota: e.quota,
                request: e.request,
                no_space: leader.no_space,
                revision: leader.revision,
                leading_since: leader.since,
                now: leader.now,
            };
            (round_due(current.as_ref(), peers, &inputs), verdict)
        }
        None => (None, NoSpaceVerdict::Nothing),
    };
    let turn = member_turn(
        e.me,
        start.as_ref().or(current.as_ref()),
        peers,
        e.policy,
        e.quota,
    );
    DefragStep::Act(DefragPlan {
        current,
        start,
        no_space,
        turn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUOTA: u64 = 8 * 1024 * MIB;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// etcd-main-0 leads cluster 0xc1; every database 100 MiB, all in use.
    fn peer(i: u64) -> DefragPeer {
        DefragPeer {
            name: format!("etcd-main-{i}"),
            answer: Some(EtcdAnswer {
                cluster_id: 0xc1,
                member_id: i + 1,
                revision: 10,
                leader_id: 1,
            }),
            sizes: Some((100 * MIB, 100 * MIB)),
            record: DefragRecord::default(),
        }
    }

    fn round(id: u64, reason: RoundReason) -> DefragRound {
        DefragRound {
            id,
            reason,
            started_at: at("2026-11-26T00:00:00Z"),
            request: None,
            revision: 10,
        }
    }

    fn through(mut p: DefragPeer, id: u64) -> DefragPeer {
        p.record.last = Some(DefragOutcome {
            round: id,
            at: at("2026-11-26T00:01:00Z"),
            size_before: 100 * MIB,
            size_after: 50 * MIB,
            millis: 300,
            skipped: false,
            error: None,
        });
        p
    }

    #[test]
    fn a_request_is_done_when_every_member_is_through_the_round_that_took_it_up() {
        let asked = DefragRound {
            request: Some("defrag-1".into()),
            ..round(4, RoundReason::OnDemand)
        };
        let record = |round: Option<DefragRound>, last_round: Option<u64>| DefragRecord {
            round,
            last: last_round.map(|id| through(peer(0), id).record.last.unwrap()),
        };
        let named = |records: Vec<DefragRecord>| -> Vec<(String, DefragRecord)> {
            records
                .into_iter()
                .enumerate()
                .map(|(i, r)| (format!("etcd-main-{i}"), r))
                .collect()
        };
        // An older round, or one for another request, has not taken this one up.
        let older = named(vec![record(Some(round(3, RoundReason::Schedule)), Some(3))]);
        assert_eq!(
            request_progress(older, "defrag-1"),
            RequestProgress::NotStarted
        );
        let other = named(vec![record(Some(asked.clone()), Some(4))]);
        assert_eq!(
            request_progress(other, "defrag-2"),
            RequestProgress::NotStarted
        );
        // Through it: those whose last defragmentation belongs to it (or a later one).
        let running = named(vec![
            record(Some(asked.clone()), Some(4)),
            record(Some(asked.clone()), Some(3)),
            DefragRecord::default(),
        ]);
        match request_progress(running, "defrag-1") {
            RequestProgress::Running { through, waiting } => {
                assert_eq!(through.len(), 1);
                assert_eq!(waiting, ["etcd-main-1", "etcd-main-2"]);
            }
            other => panic!("{other:?}"),
        }
        let done = named(vec![
            record(Some(asked.clone()), Some(4)),
            record(Some(asked), Some(5)),
        ]);
        assert!(matches!(
            request_progress(done, "defrag-1"),
            RequestProgress::Done(through) if through.len() == 2
        ));
    }

    fn turn(me: u64, r: &DefragRound, peers: &[DefragPeer]) -> DefragTurn {
        member_turn(
            &format!("etcd-main-{me}"),
            Some(r),
            peers,
            DefragPolicy::default(),
            QUOTA,
        )
    }

    #[test]
    fn followers_go_one_at_a_time_then_the_leader_after_handing_over() {
        let r = round(1, RoundReason::Schedule);
        let view = [peer(0), peer(1), peer(2)];
        assert_eq!(turn(1, &r, &view), DefragTurn::Defragment);
        assert!(
            matches!(turn(2, &r, &view), DefragTurn::Wait(w) if w.contains("etcd-main-1 is defragmented before etcd-main-2"))
        );
        assert!(matches!(turn(0, &r, &view), DefragTurn::Wait(_)));

        let view = [peer(0), through(peer(1), 1), peer(2)];
        assert_eq!(turn(1, &r, &view), DefragTurn::Idle);
        assert_eq!(turn(2, &r, &view), DefragTurn::Defragment);
        assert!(matches!(turn(0, &r, &view), DefragTurn::Wait(_)));

        let view = [peer(0), through(peer(1), 1), through(peer(2), 1)];
        assert_eq!(
            turn(0, &r, &view),
            DefragTurn::HandOver {
                name: "etcd-main-1".into(),
                id: 2
            }
        );

        // Leadership moved to etcd-main-1: the former leader is now a follower whose turn it is.
        let mut view = [peer(0), through(peer(1), 1), through(peer(2), 1)];
        for p in &mut view {
            p.answer.as_mut().unwrap().leader_id = 2;
        }
        assert_eq!(turn(0, &r, &view), DefragTurn::Defragment);
        assert!(!round_complete(&r, &view));
        view[0] = through(view[0].clone(), 1);
        assert!(round_complete(&r, &view));
    }

    #[test]
    fn nobody_goes_while_a_member_does_not_answer_with_a_leader() {
        let r = round(1, RoundReason::Schedule);
        let mut view = [peer(0), peer(1), peer(2)];
        view[2].answer = None;
        assert!(
            matches!(turn(1, &r, &view), DefragTurn::Wait(w) if w.contains("etcd-main-2 does not answer"))
        );
        view[2] = peer(2);
        view[2].answer.as_mut().unwrap().leader_id = 0;
        assert!(matches!(turn(1, &r, &view), DefragTurn::Wait(_)));
    }

    #[test]
    fn a_lone_member_defragments_itself_without_a_handover() {
        let r = round(1, RoundReason::OnDemand);
        assert_eq!(turn(0, &r, &[peer(0)]), DefragTurn::Defragment);
    }

    #[test]
    fn a_threshold_round_skips_members_that_do_not_need_it() {
        let r = round(3, RoundReason::Threshold);
        let mut view = [peer(0), peer(1), peer(2)];
        view[2].sizes = Some((1000 * MIB, 300 * MIB));
        assert_eq!(turn(1, &r, &view), DefragTurn::Skip);
        assert_eq!(turn(0, &r, &view), DefragTurn::Skip, "the leader too");
        view[1] = through(view[1].clone(), 3);
        assert_eq!(turn(2, &r, &view), DefragTurn::Defragment);
    }

    #[test]
    fn thresholds_need_both_free_share_and_free_bytes_or_nearness_to_the_quota() {
        let p = DefragPolicy::default();
        assert!(
            need(&p, 1000 * MIB, 500 * MIB, QUOTA).is_some(),
            "50 %, 500 MiB"
        );
        assert!(need(&p, 1000 * MIB, 600 * MIB, QUOTA).is_none(), "40 %");
        assert!(
            need(&p, 150 * MIB, 20 * MIB, QUOTA).is_some(),
            "87 %, 130 MiB"
        );
        assert!(
            need(&p, 150 * MIB, 60 * MIB, QUOTA).is_none(),
            "60 %, but 90 MiB"
        );
        let quota = 64 * MIB;
        assert!(
            need(&p, 52 * MIB, 50 * MIB, quota).is_some(),
            "81 % of the quota"
        );
        assert!(
            need(&p, 52 * MIB, 52 * MIB, quota).is_none(),
            "nothing to reclaim"
        );
        assert!(
            need(&p, 50 * MIB, 48 * MIB, quota).is_none(),
            "78 % of the quota"
        );
        let off = DefragPolicy {
            near_quota_percent: 0,
            ..p
        };
        assert!(need(&off, 63 * MIB, 60 * MIB, quota).is_none());
    }

    fn inputs<'a>(schedule: &'a CronSchedule, now: &str) -> RoundInputs<'a> {
        RoundInputs {
            schedule,
            policy: DefragPolicy::default(),
            quota: QUOTA,
            request: None,
            no_space: false,
            revision: 10,
            leading_since: at("2026-11-25T12:00:00Z"),
            now: at(now),
        }
    }

    /// Regression (local test): live data near the quota started one threshold round after
    /// another, each reclaiming a few pages.
    #[test]
    fn nearness_to_the_quota_counts_again_only_once_the_file_grew() {
        let quota = 64 * MIB;
        let mut p = through(peer(0), 1);
        let last = p.record.last.as_mut().unwrap();
        last.size_after = 60 * MIB;
        p.sizes = Some((60 * MIB, 59 * MIB));
        let never = CronSchedule::parse("0 0 31 2 *").unwrap();
        let mut i = inputs(&never, "2026-11-26T10:00:00Z");
        i.quota = quota;
        let current = round(1, RoundReason::Threshold);
        assert_eq!(round_due(Some(&current), &[p.clone()], &i), None);
        p.sizes = Some((61 * MIB, 59 * MIB));
        assert_eq!(
            round_due(Some(&current), &[p], &i).map(|r| r.reason),
            Some(RoundReason::Threshold)
        );
    }

    #[test]
    fn the_schedule_starts_a_round_once_per_firing() {
        let daily = CronSchedule::parse("0 0 * * *").unwrap();
        let view = [peer(0), peer(1)];
        let first = round_due(None, &view, &inputs(&daily, "2026-11-25T23:00:00Z"));
        assert_eq!(first, None, "not fired since the leader started");
        let first = round_due(None, &view, &inputs(&daily, "2026-11-26T00:00:05Z")).unwrap();
        assert_eq!((first.id, first.reason), (1, RoundReason::Schedule));
        assert_eq!(
            round_due(Some(&first), &view, &inputs(&daily, "2026-11-26T00:10:00Z")),
            None,
            "unfinished"
        );
        let done = [through(peer(0), 1), through(peer(1), 1)];
        assert_eq!(
            round_due(Some(&first), &done, &inputs(&daily, "2026-11-26T12:00:00Z")),
            None,
            "already ran for this firing"
        );
        let next = round_due(Some(&first), &done, &inputs(&daily, "2026-11-27T00:00:01Z")).unwrap();
        assert_eq!((next.id, next.reason), (2, RoundReason::Schedule));
    }

    #[test]
    fn a_request_is_carried_out_once_and_remembered_by_later_rounds() {
        let never = CronSchedule::parse("0 0 31 2 *").unwrap();
        let view = [peer(0)];
        let mut i = inputs(&never, "2026-11-26T10:00:00Z");
        i.request = Some("defrag-1");
        let r = round_due(None, &view, &i).unwrap();
        assert_eq!(r.reason, RoundReason::OnDemand);
        assert_eq!(r.request.as_deref(), Some("defrag-1"));
        let done = [through(peer(0), r.id)];
        assert_eq!(round_due(Some(&r), &done, &i), None);
        // A later threshold round keeps the request, so it is not carried out again after it.
        let mut big = done.clone();
        big[0].sizes = Some((1000 * MIB, 100 * MIB));
        let t = round_due(Some(&r), &big, &i).unwrap();
        assert_eq!(t.reason, RoundReason::Threshold);
        assert_eq!(t.request.as_deref(), Some("defrag-1"));
        i.request = Some("defrag-2");
        assert_eq!(
            round_due(Some(&r), &done, &i).map(|r| r.reason),
            Some(RoundReason::OnDemand)
        );
    }

    #[test]
    fn no_space_starts_one_round_not_a_loop() {
        let never = CronSchedule::parse("0 0 31 2 *").unwrap();
        let mut i = inputs(&never, "2026-11-26T10:00:00Z");
        i.no_space = true;
        let r = round_due(None, &[peer(0)], &i).unwrap();
        assert_eq!(r.reason, RoundReason::NoSpace);
        let done = [through(peer(0), r.id)];
        assert_eq!(
            round_due(Some(&r), &done, &i),
            None,
            "the alarm still stands after a full round: it is reported, not retried"
        );
        // Data was deleted meanwhile (a new revision): worth another round.
        i.revision += 1;
        let again = round_due(Some(&r), &done, &i).unwrap();
        assert_eq!((again.id, again.reason), (2, RoundReason::NoSpace));
    }

    #[test]
    fn after_a_no_space_round_the_alarm_is_disarmed_only_with_room_under_the_quota() {
        let quota = 64 * MIB;
        let r = round(2, RoundReason::NoSpace);
        let mut view = [through(peer(0), 2), through(peer(1), 2)];
        view[0].sizes = Some((20 * MIB, 20 * MIB));
        view[1].sizes = Some((21 * MIB, 21 * MIB));
        assert_eq!(
            no_space_verdict(true, Some(&r), &view, quota),
            NoSpaceVerdict::Disarm
        );
        assert_eq!(
            no_space_verdict(false, Some(&r), &view, quota),
            NoSpaceVerdict::Nothing,
            "no alarm"
        );
        view[1].sizes = Some((60 * MIB, 60 * MIB));
        let NoSpaceVerdict::TooLarge(why) = no_space_verdict(true, Some(&r), &view, quota) else {
            panic!("live data over 90 % of the quota");
        };
        assert!(why.contains("etcd-main-1 holds 60.0 MiB"), "{why}");
        assert!(why.contains("spec.etcd.quota"), "{why}");
        let unfinished = [through(peer(0), 2), peer(1)];
        assert_eq!(
            no_space_verdict(true, Some(&r), &unfinished, quota),
            NoSpaceVerdict::Nothing
        );
        let scheduled = round(2, RoundReason::Schedule);
        assert_eq!(
            no_space_verdict(true, Some(&scheduled), &view, quota),
            NoSpaceVerdict::Nothing,
            "only a round started for the alarm answers it"
        );
    }

    #[test]
    fn the_current_round_is_the_newest_any_lease_names() {
        let a = DefragRecord {
            round: Some(round(4, RoundReason::Schedule)),
            last: None,
        };
        let b = DefragRecord {
            round: Some(round(5, RoundReason::OnDemand)),
            last: None,
        };
        assert_eq!(
            current_round([&a, &b, &DefragRecord::default()]).map(|r| r.id),
            Some(5)
        );
        let mut lease = MemberLease::new("etcd-main-0");
        lease
            .annotations
            .insert(DEFRAG_ANNOTATION.into(), b.to_annotation());
        assert_eq!(DefragRecord::of_lease(&lease), Some(b));
    }

    #[test]
    fn one_decision_follows_observes_starts_and_takes_the_turn() {
        let never = CronSchedule::parse("0 0 31 2 *").unwrap();
        let r = round(3, RoundReason::Schedule);
        let done = through(peer(1), 3).record;
        let evidence = |me, mine, known, peers, leader| DefragEvidence {
            me,
            mine,
            known,
            peers,
            leader,
            schedule: &never,
            policy: DefragPolicy::default(),
            quota: QUOTA,
            request: None,
        };
        let named = DefragRecord {
            round: Some(r.clone()),
            last: None,
        };
        let known = [named];
        // A follower through with the newest round asks nobody anything.
        assert_eq!(
            decide(&evidence("etcd-main-1", &done, &known, None, None)),
            DefragStep::Follow(Some(r.clone()))
        );
        // A follower not through with it looks at every member, then takes its turn.
        let fresh = DefragRecord::default();
        assert_eq!(
            decide(&evidence("etcd-main-1", &fresh, &known, None, None)),
            DefragStep::ObservePeers
        );
        let mut view = [peer(0), peer(1), peer(2)];
        view[0].record.round = Some(r.clone());
        let DefragStep::Act(plan) =
            decide(&evidence("etcd-main-1", &fresh, &known, Some(&view), None))
        else {
            panic!("peers observed");
        };
        assert_eq!(plan.current, Some(r));
        assert_eq!((plan.start, plan.turn), (None, DefragTurn::Defragment));
        // The leader under a NOSPACE alarm starts a round and, leading, waits for the others.
        let alarm = LeaderView {
            since: at("2026-11-26T09:00:00Z"),
            no_space: true,
            revision: 42,
            now: at("2026-11-26T10:00:00Z"),
        };
        let idle = [peer(0), peer(1), peer(2)];
        let DefragStep::Act(plan) = decide(&evidence(
            "etcd-main-0",
            &fresh,
            &[],
            Some(&idle),
            Some(alarm),
        )) else {
            panic!("the leader always looks");
        };
        let started = plan.start.expect("a NOSPACE round is due");
        assert_eq!((started.id, started.reason), (1, RoundReason::NoSpace));
        assert!(matches!(plan.turn, DefragTurn::Wait(_)), "{:?}", plan.turn);
        assert_eq!(plan.no_space, NoSpaceVerdict::Nothing);
    }
}
