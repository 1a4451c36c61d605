//! Pure decisions for quorate: no I/O and no clocks (time is always an argument), so every
//! rule here can be unit- and property-tested.

pub mod agent_exit;
pub mod backup_chain;
pub mod backup_continuity;
pub mod backup_copy;
pub mod backup_hash;
pub mod backup_ready;
pub mod backup_schedule;
pub mod cluster_config;
pub mod components;
pub mod conditions;
pub mod etcd_version;
pub mod gc;
pub mod hibernation;
pub mod history_line;
pub mod last_operation;
pub mod lease;
pub mod maintenance;
pub mod member_etcd_config;
pub mod member_health;
pub mod membership;
pub mod pod_resize;
pub mod pod_rollout;
pub mod reconcile_control;
pub mod scale_plan;
pub mod shard;
pub mod statefulset_step;
pub mod status;
pub mod tasks;
pub mod upgrade;
