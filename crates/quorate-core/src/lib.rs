//! Pure decisions for quorate: no I/O and no clocks (time is always an argument), so every
//! rule here can be unit- and property-tested.

pub mod backup_ready;
pub mod backup_schedule;
pub mod cluster_config;
pub mod components;
pub mod conditions;
pub mod etcd_config;
pub mod gc;
pub mod join;
pub mod last_operation;
pub mod lease;
pub mod member_health;
pub mod member_start;
pub mod planner;
pub mod reconcile_control;
pub mod rollout;
pub mod statefulset_step;
pub mod status;
