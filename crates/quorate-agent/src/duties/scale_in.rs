//! Scale-in as the leader carries it out: while this member leads, the members etcd lists but
//! the configuration no longer wants leave one at a time, through the membership executor
//! (core's `scale_in::leader_step` picks the step). A leaving member is removed from etcd's
//! membership before its process stops: its agent sees the removal and ends for good.

use super::Tick;
use crate::executor::Executor;
use crate::state::SharedState;
use quorate_coord::Coordination;
use quorate_core::membership::planner::Step;
use quorate_core::membership::published::PublishedMembership;
use quorate_core::membership::scale_in::leader_step;
use quorate_etcd::MemberClient;

/// As the leader (in the raft term of the tick's status answer), publishes etcd's member list and takes the steps that
/// move leaving members out of the cluster, or says (in the member's message, which its lease
/// publishes) why the scale-in waits. After a removal the next step is decided at once, on a
/// fresh member list and fresh health, instead of a poll interval later; after a leadership
/// move this member no longer leads and stops.
pub async fn remove_leaving_members<C: Coordination>(
    me: &str,
    client: &MemberClient,
    tick: &Tick<'_, C>,
    state: &SharedState,
) {
    let term = tick.status.raft_term;
    let Some(latest) = tick.seen.latest().await else {
        return;
    };
    let executor = Executor::new(latest, me).with_metrics(state.metrics());
    let desired = executor.desired();
    let waiting = loop {
        let Ok(list) = client.member_list_of_cluster().await else {
            return;
        };
        state.update(|s| s.membership = Some(PublishedMembership::new(&list, term)));
        // A hibernation stops every member as it is; nobody is removed.
        let nothing_leaves = latest.hibernation_request.is_some()
            || list
                .members
                .iter()
                .all(|m| desired.iter().any(|d| d.name == m.name));
        let step = if nothing_leaves {
            None
        } else {
            leader_step(&executor.observe(&list).await, &desired)
        };
        match step {
            None => break None,
            Some(Step::Wait { reason }) => break Some(format!("scale-in waits: {reason}")),
            Some(step) => match executor.apply(&step).await {
                Ok(_) => {
                    tracing::info!(member = %me, %step, "scale-in step done");
                    if !matches!(step, Step::Remove { .. }) {
                        break None;
                    }
                }
                Err(wait) => break Some(format!("scale-in waits: {}", String::from(wait))),
            },
        }
    };
    state.update(|s| match waiting {
        Some(why) => {
            s.message = why;
            s.message_is_scale_wait = true;
        }
        None if s.message_is_scale_wait => {
            s.message.clear();
            s.message_is_scale_wait = false;
        }
        None => {}
    });
}
