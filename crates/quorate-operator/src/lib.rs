//! `quorate operator`: etcd-druid's Etcd controller on Kubernetes. It renders every component
//! of an `Etcd` with the pure builders of `quorate-core`, applies them in druid's order, keeps
//! the status fresh from the member leases and the StatefulSet, and serves the validating
//! webhooks (the `Etcd` itself, and protection of the components it manages).
//!
//! A pass (`reconcile`): validate the `Etcd` once (`validated`); if it is being deleted, the
//! delete flow; otherwise the spec flow when the reconcile controls allow it (`spec_flow`:
//! finalizer → dereference → build → apply → StatefulSet), then always the status. Every
//! module is private; the API is what the `quorate` CLI, the integration tests and the
//! benchmark ([`replay`]) use, re-exported below.

mod apply;
mod context;
mod controller;
mod crd_install;
mod defrag_events;
mod delete_flow;
mod error;
mod finalizer;
mod http;
mod images;
mod metrics;
mod reconcile;
pub mod replay;
mod run;
mod spec_flow;
mod status;
pub mod tasks;
mod trim;
mod validated;
mod webhook;

pub use context::OperatorSettings;
pub use controller::{Scope, StartError, run as run_controller};
pub use crd_install::{CrdInstallError, install_crds};
pub use error::Error;
pub use images::Images;
pub use metrics::Metrics;
pub use run::{OperatorArgs, RunError, run_operator};
pub use tasks::run as run_task_controllers;
pub use webhook::{
    COMPONENT_PROTECTION_PATH, DEFAULT_CERT_DIR, DEFAULT_WEBHOOK_PORT, ETCD_VALIDATION_PATH,
    EtcdFacts, EtcdLookup, EtcdVerdict, LookupError, PROTECTED_KINDS, ProtectionConfig,
    TASK_VALIDATION_PATH, WebhookCerts, WebhookConfig, WebhookError, generate_webhook_certs,
    judge_etcd, router as webhook_router, serve_webhooks_on, service_account_username,
};
