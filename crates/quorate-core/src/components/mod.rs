//! The Kubernetes objects an `Etcd` should have, built from the `Etcd` (and a small
//! [`ComponentContext`]) alone: no client, no clock. The operator's controller applies them in
//! the order [`desired_components`] returns them; keeping the building pure lets every rule
//! (names, labels, ports, mounts, quorum) be tested without an API server, and lets golden
//! files show exactly what an `Etcd` turns into.
//!
//! One file per component, named after it; the in-pod paths are in [`paths`], the agent's
//! command line in [`agent_args`].

pub mod addresses;
pub mod agent_args;
pub mod client_service;
pub mod cluster_config;
pub mod config_map;
pub mod context;
pub mod desired;
pub mod error;
pub mod etcd_conf_yaml;
pub mod member_container;
pub mod member_leases;
pub mod meta;
pub mod paths;
pub mod peer_service;
pub mod pod_disruption_budget;
pub mod role;
pub mod role_binding;
pub mod security;
pub mod service_account;
pub mod snapshot_leases;
pub mod statefulset;
pub mod tls_secrets;
pub mod volumes;

pub use context::ComponentContext;
pub use desired::{DesiredComponents, DesiredObject, desired_components};
pub use error::ComponentError;
