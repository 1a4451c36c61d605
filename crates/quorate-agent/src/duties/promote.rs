//! The promote duty: a learner promotes itself when the planner names it (core `may_join`),
//! judged on the tick's observation of every member; the planner lets learners in one at a
//! time and only once the cluster is healthy.

use super::Tick;
use crate::executor::Executor;
use crate::state::SharedState;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::membership::join::{JoinDecision, may_join};
use quorate_core::membership::planner::{DesiredMember, Step};

/// Promotes this member while it is a learner, when it is its turn; otherwise says (in the
/// debug log) what comes first. Does nothing without a membership observation (no other
/// member answered).
pub async fn run<C: Coordination>(
    cluster: &ClusterConfig,
    me: &str,
    tick: &Tick<'_, C>,
    state: &SharedState,
) {
    if !tick.status.is_learner {
        return;
    }
    let Some(observed) = &tick.membership else {
        return;
    };
    match may_join(observed, &DesiredMember::of_cluster(cluster), me) {
        JoinDecision::PromoteSelf { id } => {
            let step = Step::Promote {
                id,
                name: me.to_string(),
            };
            let executor = Executor::new(cluster, me).with_metrics(state.metrics());
            match executor.apply(&step).await {
                Ok(_) => tracing::info!(member = %me, "promoted from learner to voting member"),
                Err(w) => tracing::debug!(member = %me, reason = %w, "promotion not possible yet"),
            }
        }
        other => tracing::debug!(member = %me, ?other, "not promoting yet"),
    }
}
