//! TLS settings of an `Etcd`: which Secrets hold the CA, server and client certificates for
//! the client URL, the peer URL and the backup server. Same JSON shape as etcd-druid.

use k8s_openapi::api::core::v1::SecretReference as CoreSecretReference;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Secret reference that also names the key inside the Secret (druid's `SecretReference`);
/// used for CA bundles, whose key differs between setups (`ca.crt`, `bundle.crt`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the Secret; the `Etcd`'s namespace when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Key in the Secret's data that holds the value; `ca.crt` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_key: Option<String>,
}

/// Certificates for one TLS endpoint (client URL or backup server): CA, server pair and,
/// optionally, a client pair used by the sidecar/agent to talk to etcd.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TlsConfig {
    /// Secret with the CA bundle that verifies the peer's certificate.
    #[serde(rename = "tlsCASecretRef")]
    pub tls_ca_secret_ref: SecretReference,
    /// Secret with the server certificate and key (`tls.crt`, `tls.key`).
    #[serde(rename = "serverTLSSecretRef")]
    pub server_tls_secret_ref: CoreSecretReference,
    /// Secret with the client certificate and key (`tls.crt`, `tls.key`).
    #[serde(
        rename = "clientTLSSecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_tls_secret_ref: Option<CoreSecretReference>,
}

/// Certificates for the peer URL: like [`TlsConfig`], plus the switch to skip the client SAN
/// check, needed when peers dial each other through addresses not in their certificates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PeerTlsConfig {
    /// Secret with the CA bundle that verifies peer certificates.
    #[serde(rename = "tlsCASecretRef")]
    pub tls_ca_secret_ref: SecretReference,
    /// Secret with the peer server certificate and key.
    #[serde(rename = "serverTLSSecretRef")]
    pub server_tls_secret_ref: CoreSecretReference,
    /// Not used for peers by etcd-druid; accepted for compatibility.
    #[serde(
        rename = "clientTLSSecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_tls_secret_ref: Option<CoreSecretReference>,
    /// Skip verifying the SAN of client certificates on peer connections.
    #[serde(
        rename = "skipClientSANVerification",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub skip_client_san_verification: Option<bool>,
}
