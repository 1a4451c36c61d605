//! The webhook server's TLS configuration: the serving certificate and key from a directory
//! (`tls.crt`, `tls.key`, as a `kubernetes.io/tls` Secret is mounted), checked again every few
//! seconds and swapped in when they change, so cert-manager or a rotated Secret takes effect
//! without a restart. Only the aws-lc-rs provider is used, whatever else is compiled in.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// File name of the serving certificate (chain) in the certificate directory.
pub const CERT_FILE: &str = "tls.crt";
/// File name of the serving key in the certificate directory.
pub const KEY_FILE: &str = "tls.key";

/// How often the certificate directory is checked for new files by default. The kubelet
/// refreshes Secret volumes about once a minute, so this adds little to the delay.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The certificate or key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error(
        "cannot read {path}: {source}; mount the webhook's TLS Secret (keys {CERT_FILE} and \
         {KEY_FILE}) there, or point the cert dir elsewhere"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{path} holds no PEM certificate: {reason}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What the PEM reader said.
        reason: String,
    },
    /// The key file holds no PEM private key.
    #[error("{path} holds no PEM private key: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What the PEM reader said.
        reason: String,
    },
    /// rustls refused the pair (e.g. the key does not belong to the certificate).
    #[error("the certificate {cert} and key {key} cannot serve TLS: {source}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
}

/// The contents of the two files, kept to notice when they change.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PemPair {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// A certificate directory and the TLS configuration served from it.
#[derive(Clone, Debug)]
pub struct CertDir {
    dir: PathBuf,
}

impl CertDir {
    /// The directory holding [`CERT_FILE`] and [`KEY_FILE`].
    pub fn new(dir: impl Into<PathBuf>) -> CertDir {
        CertDir { dir: dir.into() }
    }

    fn cert_path(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    fn key_path(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    async fn read(&self) -> Result<PemPair, TlsError> {
        let read = |path: PathBuf| async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| TlsError::Read { path, source })
        };
        Ok(PemPair {
            cert: read(self.cert_path()).await?,
            key: read(self.key_path()).await?,
        })
    }

    fn server_config(&self, pem: &PemPair) -> Result<Arc<ServerConfig>, TlsError> {
        server_config_from_pem(&pem.cert, &pem.key).map_err(|e| match e {
            PemError::Certificate(reason) => TlsError::Certificate {
                path: self.cert_path(),
                reason,
            },
            PemError::Key(reason) => TlsError::Key {
                path: self.key_path(),
                reason,
            },
            PemError::Config(source) => TlsError::Config {
                cert: self.cert_path(),
                key: self.key_path(),
                source,
            },
        })
    }

    /// Reads the files and builds the configuration to serve; fails when either file is missing
    /// or unusable, so a server never starts without a certificate.
    pub async fn load(&self) -> Result<ReloadingTls, TlsError> {
        let pem = self.read().await?;
        let config = self.server_config(&pem)?;
        Ok(ReloadingTls {
            dir: self.clone(),
            config: RustlsConfig::from_config(config),
            loaded: pem,
        })
    }
}

/// The served TLS configuration with what it was built from.
#[derive(Clone, Debug)]
pub struct ReloadingTls {
    dir: CertDir,
    config: RustlsConfig,
    loaded: PemPair,
}

impl ReloadingTls {
    /// The configuration to hand to axum-server; [`ReloadingTls::reload_if_changed`] swaps its
    /// contents in place.
    pub fn rustls_config(&self) -> RustlsConfig {
        self.config.clone()
    }

    /// Reads the files again and, if they changed and are usable, serves them from the next
    /// handshake on. Returns whether it swapped. A half-written pair (a rotation in progress)
    /// is an error, and the previous certificate stays.
    pub async fn reload_if_changed(&mut self) -> Result<bool, TlsError> {
        let pem = self.dir.read().await?;
        if pem == self.loaded {
            return Ok(false);
        }
        let config = self.dir.server_config(&pem)?;
        self.config.reload_from_config(config);
        self.loaded = pem;
        Ok(true)
    }

    /// Checks for new files every `interval` until dropped (the caller aborts the task).
    pub async fn watch(mut self, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            match self.reload_if_changed().await {
                Ok(true) => {
                    tracing::info!(dir = %self.dir.dir.display(), "webhook serving certificate reloaded")
                }
                Ok(false) => {}
                Err(e) => tracing::warn!("keeping the current webhook serving certificate: {e}"),
            }
        }
    }
}

/// Why a PEM pair cannot serve.
#[derive(Debug)]
enum PemError {
    Certificate(String),
    Key(String),
    Config(rustls::Error),
}

/// A rustls server configuration from a PEM certificate chain and key, with the aws-lc-rs
/// provider and HTTP/2 and HTTP/1.1 offered.
fn server_config_from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<ServerConfig>, PemError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PemError::Certificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(PemError::Certificate("no CERTIFICATE block".to_string()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| PemError::Key(e.to_string()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(PemError::Config)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(PemError::Config)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Whether `dir` holds both files (for tests checking what was written).
#[cfg(test)]
pub fn cert_dir_populated(dir: &std::path::Path) -> bool {
    dir.join(CERT_FILE).is_file() && dir.join(KEY_FILE).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::certs::generate_webhook_certs;

    fn certs() -> crate::webhook::WebhookCerts {
        generate_webhook_certs(&["127.0.0.1".to_string()], jiff::Timestamp::now()).expect("certs")
    }

    #[tokio::test]
    async fn missing_files_say_what_to_mount() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = CertDir::new(dir.path()).load().await.expect_err("no files");
        let message = err.to_string();
        assert!(message.contains("tls.crt"), "{message}");
        assert!(
            message.contains("mount the webhook's TLS Secret"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_key_of_another_certificate_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (certs(), certs());
        crate::webhook::WebhookCerts {
            key_pem: b.key_pem,
            ..a
        }
        .write_to(dir.path())
        .expect("write");
        let err = CertDir::new(dir.path()).load().await.expect_err("mismatch");
        assert!(matches!(err, TlsError::Config { .. }), "{err}");
    }

    #[tokio::test]
    async fn changed_files_are_swapped_in_and_broken_ones_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = certs();
        first.write_to(dir.path()).expect("write");
        let mut tls = CertDir::new(dir.path()).load().await.expect("load");
        assert!(!tls.reload_if_changed().await.expect("unchanged"));

        let second = certs();
        std::fs::write(dir.path().join(CERT_FILE), &second.cert_pem).expect("write cert");
        // Only the certificate is new: its key does not match yet, so the old pair stays.
        assert!(tls.reload_if_changed().await.is_err());
        second.write_to(dir.path()).expect("write");
        assert!(tls.reload_if_changed().await.expect("reload"));
        assert!(cert_dir_populated(dir.path()));
    }
}
