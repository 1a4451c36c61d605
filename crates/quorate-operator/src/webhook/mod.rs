//! Validating admission webhooks. Kubernetes 1.20 ignores the CEL rules of the CRD, so the
//! `Etcd` webhook is where the cluster refuses the manifests local mode refuses, with the same
//! messages; the component-protection webhook keeps people from editing or deleting the
//! resources the operator manages for an `Etcd`, as etcd-druid's does.
//!
//! The decisions ([`etcd`], [`protection`]) are pure functions of the admission request (and, for
//! protection, of what is known about the owning `Etcd`); [`etcd_lookup`] reads that `Etcd`,
//! [`server`] serves both over TLS, [`tls`] loads and reloads the serving certificate and
//! [`certs`] makes one when nobody else provides it.

mod certs;
mod etcd;
mod etcd_lookup;
mod protection;
mod review;
mod server;
mod tasks;
mod tls;

pub use certs::{CA_FILE, WebhookCerts, generate_webhook_certs, service_dns_names};
pub use etcd::{EtcdVerdict, judge_etcd};
pub use etcd_lookup::{EtcdLookup, LookupError};
pub use protection::{EtcdFacts, PROTECTED_KINDS, ProtectionConfig};
pub use server::{WebhookConfig, WebhookError, router, serve_webhooks, serve_webhooks_on};
pub use tasks::TASK_VALIDATION_PATH;
pub use tls::CERT_FILE;

/// Path of the webhook that validates `Etcd` objects on CREATE and UPDATE; the
/// ValidatingWebhookConfiguration's `clientConfig.service.path` (or `url` path) must be this.
pub const ETCD_VALIDATION_PATH: &str = "/webhooks/validate/etcd";

/// Path of the webhook that protects the components managed for an `Etcd` on UPDATE and
/// DELETE.
pub const COMPONENT_PROTECTION_PATH: &str = "/webhooks/validate/components";

/// Port the webhook server listens on by default (etcd-druid's `server.webhooks.port`).
pub const DEFAULT_WEBHOOK_PORT: u16 = 9443;

/// Directory the serving certificate is read from by default (etcd-druid's
/// `server.webhooks.serverCertDir`), holding [`tls::CERT_FILE`] and [`tls::KEY_FILE`].
pub const DEFAULT_CERT_DIR: &str = "/etc/webhook-server-tls";

/// The username Kubernetes gives a ServiceAccount's requests, as it appears in an
/// AdmissionRequest's `userInfo.username`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}
