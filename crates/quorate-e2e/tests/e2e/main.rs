//! The end-to-end scenarios of issue 5, on a real cluster with the operator installed
//! (`scripts/e2e.sh`). Each asserts what a user would check: `kubectl get etcd -o wide`, a
//! client pod reading and writing through the `<name>-client` Service, the members' own data,
//! the backup bucket. Without `QUORATE_E2E_KUBECONFIG` they print SKIPPED (see the crate docs).
//!
//! Run one at a time (`--test-threads=1`): they share one small node.

mod s10_maintenance;
mod s11_user_tls;
mod s12_version_chain;
mod s13_drain;
mod s14_node_loss;
mod s15_wildcard_tls;
mod s16_kubectl_plugin;
mod s1_ready;
mod s2_tls_scale_out;
mod s3_member_loss;
mod s4_total_loss;
mod s5_controls;
mod s6_delete;
mod s7_quorum_loss;
mod s8_scale_in_and_hibernation;
mod s9_upgrade_and_rollout;

pub use quorate_e2e::scenario::READY_TIMEOUT;
