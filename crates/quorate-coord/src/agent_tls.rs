//! TLS of the agents' HTTP API (`spec.backup.tls`), for the agent that serves it and for every
//! client that talks to it (other agents, the operator, tests): rustls configurations built
//! from PEM, read anew each time they are built so a rotated certificate counts at the next
//! connection without a restart.
//!
//! The server asks every client for a certificate and verifies one that is presented against
//! the CA, but lets a connection without one through (kubelet probes, `/metrics`): whether an
//! endpoint needs a verified certificate is the HTTP layer's decision ([`VerifiedClient`]).

use std::path::Path;
use std::sync::Arc;

use quorate_core::cluster_config::TlsFiles;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use thiserror::Error;

/// Why a TLS configuration cannot be built; names the file or Secret at fault.
#[derive(Debug, Error)]
pub enum AgentTlsError {
    /// A file cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// PEM that holds no usable certificate or key.
    #[error("{what}: {detail}")]
    Pem {
        /// Which file or Secret key.
        what: String,
        /// What is wrong.
        detail: String,
    },
    /// rustls refused the combination (e.g. a key that does not match its certificate).
    #[error("{what}: {detail}")]
    Config {
        /// What was being configured.
        what: String,
        /// rustls' reason.
        detail: String,
    },
}

/// Set on a request whose connection presented a client certificate the CA verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedClient(pub bool);

fn read(path: &str) -> Result<Vec<u8>, AgentTlsError> {
    std::fs::read(Path::new(path)).map_err(|source| AgentTlsError::Read {
        path: path.to_string(),
        source,
    })
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, AgentTlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| AgentTlsError::Pem {
            what: what.to_string(),
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(AgentTlsError::Pem {
            what: what.to_string(),
            detail: "holds no PEM certificate".to_string(),
        });
    }
    Ok(certs)
}

fn key(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, AgentTlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| AgentTlsError::Pem {
        what: what.to_string(),
        detail: format!("holds no PEM private key ({e})"),
    })
}

fn roots(pem: &[u8], what: &str) -> Result<RootCertStore, AgentTlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(pem, what)? {
        roots.add(cert).map_err(|e| AgentTlsError::Pem {
            what: what.to_string(),
            detail: e.to_string(),
        })?;
    }
    Ok(roots)
}

fn config_error(what: &str) -> impl Fn(rustls::Error) -> AgentTlsError + '_ {
    move |e| AgentTlsError::Config {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The agent's server configuration from its files: its certificate and key, and the CA that
/// client certificates must chain to (asked for, not required).
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig, AgentTlsError> {
    let roots = roots(&read(&files.ca_file)?, &files.ca_file)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| AgentTlsError::Config {
            what: files.ca_file.clone(),
            detail: e.to_string(),
        })?;
    let chain = certificates(&read(&files.cert_file)?, &files.cert_file)?;
    let key = key(&read(&files.key_file)?, &files.key_file)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error(&files.cert_file))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(config_error(&files.cert_file))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A client configuration trusting the CA `ca_pem`, presenting `client` (certificate and key
/// PEM) when given. `what` names where the PEM came from, for errors.
pub fn client_config_from_pem(
    ca_pem: &[u8],
    client: Option<(&[u8], &[u8])>,
    what: &str,
) -> Result<ClientConfig, AgentTlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error(what))?
        .with_root_certificates(roots(ca_pem, &format!("{what}: the CA"))?);
    match client {
        Some((cert, key_pem)) => builder
            .with_client_auth_cert(
                certificates(cert, &format!("{what}: the client certificate"))?,
                key(key_pem, &format!("{what}: the client key"))?,
            )
            .map_err(config_error(what)),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The client configuration of an agent talking to the others, from its files.
pub fn client_config(files: &TlsFiles) -> Result<ClientConfig, AgentTlsError> {
    let client = match (&files.client_cert_file, &files.client_key_file) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    client_config_from_pem(
        &read(&files.ca_file)?,
        client.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
        &files.ca_file,
    )
}

/// An HTTP client for the agents: plain without TLS files, else HTTPS with `files`' CA and
/// client certificate.
pub fn http_client(files: Option<&TlsFiles>) -> Result<reqwest::Client, AgentTlsError> {
    let builder = reqwest::Client::builder();
    let builder = match files {
        Some(files) => builder.tls_backend_preconfigured(client_config(files)?),
        None => builder,
    };
    builder.build().map_err(|e| AgentTlsError::Config {
        what: "the agents' HTTP client".to_string(),
        detail: e.to_string(),
    })
}
