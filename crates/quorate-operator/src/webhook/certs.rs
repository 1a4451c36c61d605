//! A self-signed CA and a serving certificate for the webhook server, for installs without
//! cert-manager (plain manifests) and for tests: the API server trusts the webhook through the
//! CA bundle placed in the ValidatingWebhookConfiguration.

use std::fs;
use std::io;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, date_time_ymd,
};

use super::tls::{CERT_FILE, KEY_FILE};

/// How long generated certificates are valid, in years. Long, because nothing rotates them;
/// generate new ones (and update the CA bundle) to rotate.
pub const VALIDITY_YEARS: i16 = 10;

/// Generating the certificates failed.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused a name or failed to sign.
    #[error("generating the webhook certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// No name to put in the certificate.
    #[error("the webhook certificate needs at least one DNS name or IP address")]
    NoNames,
    /// The files could not be written.
    #[error("writing the webhook certificate to {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// File of the CA certificate beside `tls.crt` and `tls.key`.
pub const CA_FILE: &str = "ca.crt";

/// A serving certificate, its key and the CA that signed it, all PEM.
#[derive(Clone, Debug)]
pub struct WebhookCerts {
    /// The CA certificate: the `caBundle` of the webhook configuration.
    pub ca_pem: String,
    /// The serving certificate (`tls.crt`).
    pub cert_pem: String,
    /// The serving key (`tls.key`).
    pub key_pem: String,
}

impl WebhookCerts {
    /// Writes `tls.crt`, `tls.key` and `ca.crt` (the layout of a `kubernetes.io/tls` Secret
    /// volume as cert-manager fills it) into `dir`, creating it, for [`super::serve_webhooks`]
    /// to read. The key is written mode 0600.
    pub fn write_to(&self, dir: &Path) -> Result<(), CertError> {
        let write_err = |path: &Path| {
            let path = path.display().to_string();
            move |source| CertError::Write { path, source }
        };
        fs::create_dir_all(dir).map_err(write_err(dir))?;
        let key = dir.join(KEY_FILE);
        write_private(&key, &self.key_pem).map_err(write_err(&key))?;
        let ca = dir.join(CA_FILE);
        fs::write(&ca, &self.ca_pem).map_err(write_err(&ca))?;
        let cert = dir.join(CERT_FILE);
        fs::write(&cert, &self.cert_pem).map_err(write_err(&cert))
    }
}

fn write_private(path: &Path, content: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(content.as_bytes())?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

/// The names a Service is reached by from the API server: `<service>.<ns>.svc` is the one the
/// API server uses; the others cover tools that use the short or fully qualified name.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A new CA and a serving certificate for `names` (DNS names; IP addresses such as `127.0.0.1`
/// become IP SANs), valid from a day before `now` for [`VALIDITY_YEARS`].
pub fn generate_webhook_certs(
    names: &[String],
    now: jiff::Timestamp,
) -> Result<WebhookCerts, CertError> {
    if names.is_empty() {
        return Err(CertError::NoNames);
    }
    let today = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    let yesterday = today.yesterday().unwrap_or(today);
    let not_before = date_time_ymd(
        i32::from(yesterday.year()),
        yesterday.month().unsigned_abs(),
        yesterday.day().unsigned_abs(),
    );
    let not_after = date_time_ymd(
        i32::from(today.year()) + i32::from(VALIDITY_YEARS),
        today.month().unsigned_abs(),
        // The 29th of February may not exist in the last year.
        today.day().unsigned_abs().min(28),
    );

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "quorate webhook CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, names[0].as_str());
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.signed_by(&key, &ca)?;
    Ok(WebhookCerts {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_pem_and_written_where_the_server_reads_them() {
        let names = service_dns_names("quorate-webhook", "quorate-system");
        assert_eq!(names[2], "quorate-webhook.quorate-system.svc");
        let certs = generate_webhook_certs(&names, jiff::Timestamp::now()).expect("certs");
        assert!(certs.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.key_pem.contains("PRIVATE KEY"));
        assert_ne!(certs.ca_pem, certs.cert_pem);

        let dir = tempfile::tempdir().expect("tempdir");
        certs.write_to(&dir.path().join("tls")).expect("write");
        let key = dir.path().join("tls").join(KEY_FILE);
        assert_eq!(fs::read_to_string(&key).expect("key"), certs.key_pem);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&key).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn at_least_one_name_is_needed() {
        assert!(matches!(
            generate_webhook_certs(&[], jiff::Timestamp::now()),
            Err(CertError::NoNames)
        ));
    }
}
