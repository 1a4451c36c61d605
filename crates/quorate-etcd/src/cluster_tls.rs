//! The client TLS settings a cluster's configuration names, as this adapter takes them.

use crate::config::{ClientIdentity, EtcdTls, PemSource};
use quorate_core::cluster_config::ClusterConfig;

/// Client TLS for connections to `cluster`'s members (`None` without client TLS).
pub fn client_tls(cluster: &ClusterConfig) -> Option<EtcdTls> {
    cluster.client_tls.as_ref().map(|t| EtcdTls {
        ca: PemSource::File(t.ca_file.clone().into()),
        identity: t
            .client_cert_file
            .as_ref()
            .zip(t.client_key_file.as_ref())
            .map(|(cert, key)| ClientIdentity {
                cert: PemSource::File(cert.into()),
                key: PemSource::File(key.into()),
            }),
        domain_name: None,
    })
}
