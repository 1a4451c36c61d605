//! The certificates this member serves or uses (etcd's client and peer TLS, the agents' TLS,
//! their CAs) and when each stops being valid: published on the member lease as the soonest
//! (`quorate.io/certificate-expiry`, read by the `CertificatesValid` condition) and exported
//! per file as `quorate_certificate_expiry_timestamp_seconds`. Read from the files, so a
//! rotated certificate is seen at the next refresh.

use quorate_core::cluster_config::ClusterConfig;
use quorate_core::conditions::CertificateExpiry;

/// Reads the certificate files of `cluster` and records their expiry in the metrics and the
/// member's state (for its lease).
pub fn record(state: &crate::SharedState, cluster: &ClusterConfig) {
    let all = expiries(cluster);
    state.metrics().certificates(&all);
    let soonest = CertificateExpiry::soonest(all);
    state.update(|s| s.certificate_expiry = soonest);
}

/// When each certificate file of `cluster` expires (the earliest certificate of a bundle);
/// files that are missing or hold no parseable certificate are left out.
pub fn expiries(cluster: &ClusterConfig) -> Vec<CertificateExpiry> {
    let mut files: Vec<&String> = Vec::new();
    for tls in [&cluster.client_tls, &cluster.peer_tls, &cluster.agent_tls]
        .into_iter()
        .flatten()
    {
        files.extend([&tls.ca_file, &tls.cert_file]);
        files.extend(tls.client_cert_file.as_ref());
    }
    files.sort();
    files.dedup();
    files
        .into_iter()
        .filter_map(|file| {
            let bytes = std::fs::read(file).ok()?;
            let not_after = earliest_not_after(&bytes)?;
            Some(CertificateExpiry {
                file: file.clone(),
                not_after,
            })
        })
        .collect()
}

/// The earliest `notAfter` of the PEM certificates in `pem`.
fn earliest_not_after(pem: &[u8]) -> Option<jiff::Timestamp> {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .filter_map(|p| {
            let p = p.ok()?;
            let cert = p.parse_x509().ok()?;
            jiff::Timestamp::from_second(cert.validity().not_after.timestamp()).ok()
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_give_their_earliest_certificate_and_garbage_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let certs = quorate_testkit::TestCerts::generate(dir.path()).unwrap();
        let ca = std::fs::read(&certs.ca).unwrap();
        let server = std::fs::read(&certs.server_cert).unwrap();
        let one = earliest_not_after(&server).expect("a certificate");
        let bundle = [ca.clone(), server].concat();
        assert_eq!(
            earliest_not_after(&bundle),
            earliest_not_after(&ca).min(Some(one))
        );
        assert!(one > jiff::Timestamp::now());
        assert_eq!(earliest_not_after(b"not a certificate"), None);
    }
}
