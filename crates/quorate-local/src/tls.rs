//! TLS for local clusters. A Secret named in the manifest is, locally, a directory
//! `secrets/<name>/` in the cluster's state directory holding the Secret's keys as files
//! (`ca.crt` or the CA's `dataKey`, `tls.crt`, `tls.key`). Files you put there are used as they
//! are; missing ones are generated from a per-cluster CA valid for 127.0.0.1 and localhost, so
//! a TLS manifest runs out of the box.

use crate::LocalError;
use crate::state_dir::ClusterDir;
use quorate_api::{Etcd, SecretReference};
use quorate_core::cluster_config::TlsFiles;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// The client and peer TLS files of a cluster, generating what is missing.
pub fn tls_files(
    etcd: &Etcd,
    dir: &ClusterDir,
) -> Result<(Option<TlsFiles>, Option<TlsFiles>), LocalError> {
    let secrets = dir.root().join("secrets");
    let client = match &etcd.spec.etcd.client_url_tls {
        Some(t) => Some(materialize(
            &secrets,
            &t.tls_ca_secret_ref,
            secret_name(&t.server_tls_secret_ref),
            t.client_tls_secret_ref.as_ref().map(secret_name),
        )?),
        None => None,
    };
    let peer = match &etcd.spec.etcd.peer_url_tls {
        Some(t) => Some(materialize(
            &secrets,
            &t.tls_ca_secret_ref,
            secret_name(&t.server_tls_secret_ref),
            None,
        )?),
        None => None,
    };
    Ok((client, peer))
}

/// The agents' TLS files (`spec.backup.tls`), generating what is missing.
pub fn agent_tls_files(etcd: &Etcd, dir: &ClusterDir) -> Result<Option<TlsFiles>, LocalError> {
    let Some(t) = &etcd.spec.backup.tls else {
        return Ok(None);
    };
    materialize(
        &dir.root().join("secrets"),
        &t.tls_ca_secret_ref,
        secret_name(&t.server_tls_secret_ref),
        t.client_tls_secret_ref.as_ref().map(secret_name),
    )
    .map(Some)
}

fn secret_name(r: &k8s_openapi::api::core::v1::SecretReference) -> &str {
    r.name.as_deref().unwrap_or_default()
}

fn materialize(
    secrets: &Path,
    ca: &SecretReference,
    server: &str,
    client: Option<&str>,
) -> Result<TlsFiles, LocalError> {
    let ca_dir = secrets.join(ca.name.as_deref().unwrap_or_default());
    let ca_file = ca_dir.join(ca.data_key());
    let ca_key_file = ca_dir.join("ca.key");
    let server_dir = secrets.join(server);
    let client_dir = client.map(|c| secrets.join(c));
    let leaf_missing = |d: &Path| !d.join("tls.crt").is_file() || !d.join("tls.key").is_file();
    let needs_issuing =
        leaf_missing(&server_dir) || client_dir.as_deref().is_some_and(leaf_missing);
    if needs_issuing {
        let issuer = load_or_create_ca(&ca_file, &ca_key_file)?;
        if leaf_missing(&server_dir) {
            issue(
                &issuer,
                &server_dir,
                "quorate etcd server",
                &["127.0.0.1", "localhost"],
                true,
            )?;
        }
        if let Some(d) = client_dir.as_deref().filter(|d| leaf_missing(d)) {
            issue(&issuer, d, "quorate etcd client", &[], false)?;
        }
    }
    let path = |p: PathBuf| p.display().to_string();
    Ok(TlsFiles {
        ca_file: path(ca_file),
        cert_file: path(server_dir.join("tls.crt")),
        key_file: path(server_dir.join("tls.key")),
        client_cert_file: client_dir.as_ref().map(|d| path(d.join("tls.crt"))),
        client_key_file: client_dir.as_ref().map(|d| path(d.join("tls.key"))),
        trusted_ca_digest: None,
    })
}

fn load_or_create_ca(
    ca_file: &Path,
    key_file: &Path,
) -> Result<Issuer<'static, KeyPair>, LocalError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| LocalError::Tls {
        message: format!("{what} {}: {e}", ca_file.display()),
    };
    match (ca_file.is_file(), key_file.is_file()) {
        (true, false) => {
            return Err(LocalError::Tls {
                message: format!(
                    "{} exists without its key {}, so missing certificates cannot be issued; put tls.crt \
                     and tls.key into the server and client secret directories yourself, or remove the CA \
                     to let quorate generate everything",
                    ca_file.display(),
                    key_file.display()
                ),
            });
        }
        (false, _) => {
            let key = KeyPair::generate().map_err(|e| fail("generating a key for", &e))?;
            let mut params =
                CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("creating", &e))?;
            params
                .distinguished_name
                .push(DnType::CommonName, "quorate local CA");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            let ca = CertifiedIssuer::self_signed(params, key).map_err(|e| fail("signing", &e))?;
            write(key_file, &ca.key().serialize_pem())?;
            write(ca_file, &ca.pem())?;
        }
        (true, true) => {}
    }
    let key =
        KeyPair::from_pem(&read(key_file)?).map_err(|e| fail("reading the CA key beside", &e))?;
    Issuer::from_ca_cert_pem(&read(ca_file)?, key).map_err(|e| fail("reading the CA", &e))
}

fn issue(
    issuer: &Issuer<'static, KeyPair>,
    dir: &Path,
    common_name: &str,
    sans: &[&str],
    server: bool,
) -> Result<(), LocalError> {
    let fail = |e: rcgen::Error| LocalError::Tls {
        message: format!("issuing {}: {e}", dir.display()),
    };
    let key = KeyPair::generate().map_err(fail)?;
    let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .map_err(fail)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    // Server certificates also authenticate members to each other (peer TLS is mutual).
    params.extended_key_usages = if server {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    let cert = params.signed_by(&key, issuer).map_err(fail)?;
    write(&dir.join("tls.crt"), &cert.pem())?;
    write(&dir.join("tls.key"), &key.serialize_pem())
}

fn read(path: &Path) -> Result<String, LocalError> {
    std::fs::read_to_string(path).map_err(|source| LocalError::Io {
        action: "read",
        path: path.display().to_string(),
        source,
    })
}

fn write(path: &Path, text: &str) -> Result<(), LocalError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| LocalError::Io {
        action: "write",
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(io)
}
