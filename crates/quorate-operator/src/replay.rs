//! The operator's own pieces a benchmark needs to compare it with the bare cost of its work,
//! without running its controller: replay the requests of a first pass (the same writes, of
//! the same objects, with the same field manager and status) and size its caches (objects
//! trimmed as its watches trim them). Kept to these few names so the benchmark depends on
//! what the operator does, not on how its modules are laid out.

pub use crate::apply::apply_component;
pub use crate::spec_flow::agent_token::token_secret;
pub use crate::status::{PassOutcome, StatusInputs, compute_status};

/// What the controller's watch caches keep of each object (see the operator's trim rules).
pub mod trim {
    pub use crate::trim::{etcd, lease, pod, statefulset};
}
