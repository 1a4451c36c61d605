//! Throwaway certificates (one CA, a loopback server/peer cert, a client cert) for TLS tests.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::etcd::ServerTlsFiles;

/// PEM files written to a directory: `ca.pem`, `server.pem`/`server-key.pem` (valid for
/// 127.0.0.1 and localhost, usable for both client and peer listeners), and
/// `client.pem`/`client-key.pem`.
#[derive(Clone, Debug)]
pub struct TestCerts {
    /// CA certificate that signed both leaf certificates.
    pub ca: PathBuf,
    /// Server certificate.
    pub server_cert: PathBuf,
    /// Server key.
    pub server_key: PathBuf,
    /// Client certificate (for client-cert auth).
    pub client_cert: PathBuf,
    /// Client key.
    pub client_key: PathBuf,
}

impl TestCerts {
    /// Generates a fresh CA and leaf certificates into `dir` (created if missing).
    pub fn generate(dir: &Path) -> io::Result<TestCerts> {
        fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate().map_err(to_io)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(to_io)?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "quorate test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(to_io)?;

        let leaf = |cn: &str, sans: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>| {
            let key = KeyPair::generate().map_err(to_io)?;
            let mut params = CertificateParams::new(sans).map_err(to_io)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = usages;
            let cert = params.signed_by(&key, &ca).map_err(to_io)?;
            Ok::<_, io::Error>((cert.pem(), key.serialize_pem()))
        };
        let (server_pem, server_key_pem) = leaf(
            "quorate test server",
            vec!["127.0.0.1".into(), "localhost".into()],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )?;
        let (client_pem, client_key_pem) = leaf(
            "quorate test client",
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        )?;

        let certs = TestCerts {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server-key.pem"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client-key.pem"),
        };
        fs::write(&certs.ca, ca.pem())?;
        fs::write(&certs.server_cert, server_pem)?;
        fs::write(&certs.server_key, server_key_pem)?;
        fs::write(&certs.client_cert, client_pem)?;
        fs::write(&certs.client_key, client_key_pem)?;
        Ok(certs)
    }

    /// Server-side TLS settings for an etcd listener using these certificates.
    pub fn server_tls(&self, client_cert_auth: bool) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: self.server_cert.clone(),
            key: self.server_key.clone(),
            trusted_ca: self.ca.clone(),
            client_cert_auth,
        }
    }
}

fn to_io(e: rcgen::Error) -> io::Error {
    io::Error::other(format!("generating test certificate: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pem_files() {
        let dir = tempfile::tempdir().unwrap();
        let certs = TestCerts::generate(dir.path()).unwrap();
        for path in [&certs.ca, &certs.server_cert, &certs.client_cert] {
            let text = fs::read_to_string(path).unwrap();
            assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{path:?}");
        }
        for path in [&certs.server_key, &certs.client_key] {
            let text = fs::read_to_string(path).unwrap();
            assert!(text.contains("PRIVATE KEY"), "{path:?}");
        }
    }
}
