//! What the member is right now, for dashboards and alerts: up, leader, learner, the cluster's
//! size, etcd's alarms, its database against the quota, whether it still has to restart onto
//! the latest configuration or is leaving the cluster, and how its lease renewals go.
//!
//! The state-derived gauges are set from the agent's state at each scrape
//! ([`MemberGauges::observe`]); the others where the agent learns them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use quorate_core::cluster_config::ClusterConfig;

use crate::state::MemberState;

/// `alarm` of an etcd alarm gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlarmLabel {
    /// etcd's alarm name, e.g. `NOSPACE`.
    pub alarm: String,
}

/// `result` of a lease renewal: `success` or `failure`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `success` or `failure`.
    pub result: String,
}

/// The member's gauges and its lease renewal counter.
#[derive(Clone, Debug, Default)]
pub struct MemberGauges {
    up: Gauge,
    leader: Gauge,
    learner: Gauge,
    cluster_size: Gauge,
    alarm: Family<AlarmLabel, Gauge>,
    db_size: Gauge,
    db_size_in_use: Gauge,
    quota: Gauge,
    rollout_pending: Gauge,
    leaving: Gauge,
    renewals: Family<ResultLabel, Counter>,
}

fn bit(on: bool) -> i64 {
    i64::from(on)
}

impl MemberGauges {
    /// Registers every gauge in `registry`.
    pub fn register(registry: &mut Registry) -> MemberGauges {
        let g = MemberGauges::default();
        let gauges: [(&str, &str, &Gauge); 9] = [
            (
                "quorate_member_up",
                "1 while this member's etcd answers and serves with a leader",
                &g.up,
            ),
            (
                "quorate_member_is_leader",
                "1 while this member's etcd is the leader",
                &g.leader,
            ),
            (
                "etcdbr_is_learner",
                "1 while this member is a learner (not yet a voting member)",
                &g.learner,
            ),
            (
                "etcdbr_cluster_size",
                "The number of members the cluster is configured to have",
                &g.cluster_size,
            ),
            (
                "quorate_etcd_db_size_bytes",
                "This member's database file size, as etcd last reported it",
                &g.db_size,
            ),
            (
                "quorate_etcd_db_size_in_use_bytes",
                "The part of this member's database holding data, as etcd last reported it",
                &g.db_size_in_use,
            ),
            (
                "quorate_etcd_quota_backend_bytes",
                "The database quota (spec.etcd.quota) etcd raises NOSPACE at",
                &g.quota,
            ),
            (
                "quorate_config_rollout_pending",
                "1 while this member's etcd runs an older configuration than the latest (it waits for or takes its restart turn)",
                &g.rollout_pending,
            ),
            (
                "quorate_member_leaving",
                "1 while a scale-in removes this member",
                &g.leaving,
            ),
        ];
        for (name, help, gauge) in gauges {
            registry.register(name, help, gauge.clone());
        }
        registry.register(
            "quorate_etcd_alarm_active",
            "1 while etcd raises the alarm (NOSPACE: the database reached its quota)",
            g.alarm.clone(),
        );
        registry.register(
            "quorate_lease_renewals",
            "Renewals of this member's lease, by result",
            g.renewals.clone(),
        );
        g
    }

    /// Sets the gauges the agent's state says.
    pub fn observe(&self, state: &MemberState) {
        self.up.set(bit(state.healthy));
        self.leader.set(bit(state.is_leader));
        self.learner.set(bit(state.is_learner));
        self.alarm
            .get_or_create(&AlarmLabel {
                alarm: "NOSPACE".to_string(),
            })
            .set(bit(state.message_is_no_space));
    }

    /// The latest configuration: the cluster's size and quota, whether this member still has to
    /// restart onto it, whether it is leaving.
    pub fn configuration(&self, latest: &ClusterConfig, me: &str, restart_pending: bool) {
        let size = latest.members.len().saturating_sub(latest.leaving.len());
        self.cluster_size
            .set(i64::try_from(size).unwrap_or(i64::MAX));
        self.quota
            .set(i64::try_from(latest.etcd.quota_backend_bytes).unwrap_or(i64::MAX));
        self.rollout_pending.set(bit(restart_pending));
        self.leaving
            .set(bit(latest.leaving.iter().any(|m| m == me)));
    }

    /// This member's database size and the part in use, as etcd reported them.
    pub fn database(&self, size: u64, in_use: u64) {
        self.db_size.set(i64::try_from(size).unwrap_or(i64::MAX));
        self.db_size_in_use
            .set(i64::try_from(in_use).unwrap_or(i64::MAX));
    }

    /// A renewal of this member's lease succeeded or failed.
    pub fn renewal(&self, ok: bool) {
        self.renewals
            .get_or_create(&ResultLabel {
                result: if ok { "success" } else { "failure" }.to_string(),
            })
            .inc();
    }
}
