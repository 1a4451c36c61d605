//! The client TLS settings of a cluster as the etcd adapter wants them: core's certificate
//! file paths ([`TlsFiles`]) mapped to [`EtcdTls`]. Here, in the adapter, so every program that
//! talks to a cluster's members (agent, local runtime) maps them the same way without depending
//! on another program.

use crate::config::{ClientIdentity, EtcdTls, PemSource};
use quorate_core::cluster_config::{ClusterConfig, TlsFiles};

/// Client TLS for connections to `cluster`'s members, `None` when its clients speak plain
/// http; the client certificate is offered when the cluster configuration names one.
pub fn client_tls(cluster: &ClusterConfig) -> Option<EtcdTls> {
    cluster.client_tls.as_ref().map(tls_from_files)
}

/// TLS trusting `files`' CA, with the client certificate and key when both are given.
pub fn tls_from_files(files: &TlsFiles) -> EtcdTls {
    EtcdTls {
        ca: PemSource::File(files.ca_file.clone().into()),
        identity: files
            .client_cert_file
            .as_ref()
            .zip(files.client_key_file.as_ref())
            .map(|(cert, key)| ClientIdentity {
                cert: PemSource::File(cert.into()),
                key: PemSource::File(key.into()),
            }),
        domain_name: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_certificate_is_offered_only_with_both_files() {
        let mut files = TlsFiles {
            ca_file: "/tls/ca.crt".into(),
            cert_file: "/tls/tls.crt".into(),
            key_file: "/tls/tls.key".into(),
            client_cert_file: Some("/tls/client.crt".into()),
            client_key_file: Some("/tls/client.key".into()),
            trusted_ca_digest: None,
        };
        let tls = tls_from_files(&files);
        assert_eq!(tls.ca, PemSource::File("/tls/ca.crt".into()));
        assert_eq!(
            tls.identity,
            Some(ClientIdentity {
                cert: PemSource::File("/tls/client.crt".into()),
                key: PemSource::File("/tls/client.key".into()),
            })
        );
        files.client_key_file = None;
        assert_eq!(tls_from_files(&files).identity, None);
    }
}
