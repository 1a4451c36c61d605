//! `quorate operator`: etcd-druid's Etcd controller on Kubernetes. It renders every component
//! of an `Etcd` with the pure builders of `quorate-core`, applies them in druid's order, keeps
//! the status fresh from the member leases and the StatefulSet, and serves the validating
//! webhooks (the `Etcd` itself, and protection of the components it manages).

pub mod apply;
pub mod context;
pub mod controller;
pub mod delete_flow;
pub mod error;
pub mod http;
pub mod images;
pub mod metrics;
pub mod reconcile;
pub mod run;
pub mod spec_flow;
pub mod status;
pub mod trim;
pub mod webhook;

pub use context::OperatorSettings;
pub use error::Error;
pub use run::{OperatorArgs, RunError, run_operator};
