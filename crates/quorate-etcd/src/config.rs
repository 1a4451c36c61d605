//! How to reach etcd: endpoint URLs, TLS material and time bounds.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

use crate::error::{ErrorKind, EtcdError};

/// PEM data given either as a file (mounted secret) or inline (generated in memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PemSource {
    /// Read from this file at connect time.
    File(PathBuf),
    /// PEM text.
    Inline(String),
}

impl PemSource {
    fn load(&self, what: &str, endpoint: &str) -> Result<Vec<u8>, EtcdError> {
        match self {
            PemSource::Inline(pem) => Ok(pem.clone().into_bytes()),
            PemSource::File(path) => std::fs::read(path).map_err(|e| {
                EtcdError::new(
                    ErrorKind::InvalidConfig,
                    "load TLS material",
                    endpoint,
                    format!("cannot read {what} from {}: {e}", path.display()),
                )
            }),
        }
    }
}

/// Client certificate and key for etcd's `--client-cert-auth`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// Client certificate (PEM).
    pub cert: PemSource,
    /// Client private key (PEM).
    pub key: PemSource,
}

/// TLS settings for https endpoints: the CA that signed etcd's serving certificate and,
/// when etcd requires client certificates, our identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// CA bundle trusted for etcd's server certificate.
    pub ca: PemSource,
    /// Client certificate and key, if etcd runs with `--client-cert-auth`.
    pub identity: Option<ClientIdentity>,
    /// Server name to verify instead of the URL's host (e.g. a service DNS name when
    /// connecting by IP).
    pub domain_name: Option<String>,
}

impl EtcdTls {
    /// TLS trusting `ca`, without a client certificate.
    pub fn with_ca(ca: PemSource) -> EtcdTls {
        EtcdTls {
            ca,
            identity: None,
            domain_name: None,
        }
    }

    /// Adds a client certificate and key (mutual TLS).
    pub fn with_identity(mut self, cert: PemSource, key: PemSource) -> EtcdTls {
        self.identity = Some(ClientIdentity { cert, key });
        self
    }

    fn to_options(&self, endpoint: &str) -> Result<TlsOptions, EtcdError> {
        let mut tls =
            TlsOptions::new().ca_certificate(Certificate::from_pem(self.ca.load("CA", endpoint)?));
        if let Some(identity) = &self.identity {
            tls = tls.identity(Identity::from_pem(
                identity.cert.load("client certificate", endpoint)?,
                identity.key.load("client key", endpoint)?,
            ));
        }
        if let Some(name) = &self.domain_name {
            tls = tls.domain_name(name.clone());
        }
        Ok(tls)
    }
}

/// Time bounds for every call; etcd-client connects lazily, so without them a dead or
/// black-holed member would stall the caller indefinitely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdTimeouts {
    /// TCP (and TLS) connect.
    pub connect: Duration,
    /// Ordinary unary calls: status, reads, writes, membership changes.
    pub request: Duration,
    /// Calls that scale with the database size: defragment, and the wait for each snapshot
    /// chunk.
    pub long_request: Duration,
}

impl Default for EtcdTimeouts {
    fn default() -> Self {
        EtcdTimeouts {
            connect: Duration::from_secs(3),
            request: Duration::from_secs(5),
            long_request: Duration::from_secs(120),
        }
    }
}

impl EtcdTimeouts {
    /// Short bounds for tests and health probes on loopback.
    pub fn fast() -> EtcdTimeouts {
        EtcdTimeouts {
            connect: Duration::from_millis(500),
            request: Duration::from_secs(2),
            long_request: Duration::from_secs(30),
        }
    }
}

/// A set of etcd client endpoints with the TLS and timeouts to reach them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdEndpoints {
    /// Client URLs (`http://` or `https://`).
    pub urls: Vec<String>,
    /// TLS for the https URLs.
    pub tls: Option<EtcdTls>,
    /// Time bounds.
    pub timeouts: EtcdTimeouts,
}

impl EtcdEndpoints {
    /// Plain endpoints with default timeouts.
    pub fn new(urls: impl IntoIterator<Item = impl Into<String>>) -> EtcdEndpoints {
        EtcdEndpoints {
            urls: urls.into_iter().map(Into::into).collect(),
            tls: None,
            timeouts: EtcdTimeouts::default(),
        }
    }
}

/// etcd-client options for one endpoint. TLS applies only to https URLs, so during a TLS
/// migration plain and TLS members can be reached with the same settings.
pub(crate) fn connect_options(
    url: &str,
    tls: Option<&EtcdTls>,
    timeouts: &EtcdTimeouts,
) -> Result<ConnectOptions, EtcdError> {
    // The channel-level timeout is a backstop at the longest bound; each call applies its own
    // tighter bound on top.
    let mut options = ConnectOptions::new()
        .with_connect_timeout(timeouts.connect)
        .with_timeout(timeouts.long_request.max(timeouts.request));
    if url.starts_with("https://") {
        let tls = tls.ok_or_else(|| {
            EtcdError::new(
                ErrorKind::InvalidConfig,
                "connect",
                url,
                "https endpoint but no TLS settings (CA) were given",
            )
        })?;
        options = options.with_tls(tls.to_options(url)?);
    } else if !url.starts_with("http://") {
        return Err(EtcdError::new(
            ErrorKind::InvalidConfig,
            "connect",
            url,
            "endpoint URL must start with http:// or https://",
        ));
    }
    Ok(options)
}
