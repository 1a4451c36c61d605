//! The TLS files of a member pod: the agent reads the Secrets its configuration names
//! (`secretFiles`) through the API and writes every key as `<dir>/<key>`, before etcd starts
//! or restarts with them and again now and then, so a rotated certificate reaches etcd (which
//! reads its certificate files at each new connection). Enabling TLS is then a change of the
//! configuration only, carried out by restarting etcd in place; no pod is replaced.
//!
//! The backup encryption keys come the same way ([`write_backup_keys`]): copied from their
//! Secret into the directory the store reads them from, before the store is used and again now
//! and then, so a rotated key counts without a restart.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;

use crate::wait::Wait;

/// Writes the files of every Secret `cluster` names; true when a file changed. `Err` says what
/// is missing (a Secret that does not exist, an API or file error); nothing waits here.
pub async fn write_secret_files<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
) -> Result<bool, Wait> {
    let mut changed = false;
    for files in &cluster.secret_files {
        let data = coord
            .secret_data(&files.secret)
            .await
            .map_err(|e| Wait::new(format!("reading the TLS Secret {}: {e}", files.secret)))?
            .ok_or_else(|| {
                Wait::new(format!(
                    "the TLS Secret {} does not exist; etcd starts with TLS once it does",
                    files.secret
                ))
            })?;
        let dir = Path::new(&files.dir);
        std::fs::create_dir_all(dir).map_err(|e| io_wait(dir, &e))?;
        for (key, value) in &data {
            changed |= write_if_changed(&dir.join(key), value)?;
        }
    }
    Ok(changed)
}

/// `cluster` with the digest of each CA bundle etcd is configured to trust, as the files hold
/// it now (unreadable: none). etcd reads its CA files only when it starts, unlike its
/// certificates, so a changed bundle makes the running configuration differ from the latest:
/// the members restart one at a time onto it (`rollout_key`), which is what rotating a CA
/// through a bundle needs.
///
/// `Err` while a bundle is not whole PEM certificates (a file being written in place): etcd
/// would keep the complete ones and drop the rest, so nothing starts or restarts on it.
pub fn with_trust_digests(mut cluster: ClusterConfig) -> Result<ClusterConfig, Wait> {
    for tls in [&mut cluster.client_tls, &mut cluster.peer_tls]
        .into_iter()
        .flatten()
    {
        tls.trusted_ca_digest = match std::fs::read(&tls.ca_file) {
            Ok(pem) => {
                whole_certificates(&pem).map_err(|why| {
                    Wait::new(format!(
                        "the CA bundle {} {why}; etcd starts with it once it is whole",
                        tls.ca_file
                    ))
                })?;
                Some(quorate_core::membership::rollout::content_digest(&pem))
            }
            Err(_) => None,
        };
    }
    Ok(cluster)
}

/// `Ok` when `pem` is one or more complete PEM certificates and nothing else but whitespace.
fn whole_certificates(pem: &[u8]) -> Result<(), &'static str> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|_| "is not valid PEM")?;
        count += 1;
    }
    let text = String::from_utf8_lossy(pem);
    let (begins, ends) = (
        text.matches("-----BEGIN ").count(),
        text.matches("-----END ").count(),
    );
    if count == 0 || begins != count || ends != count {
        return Err("is not whole PEM certificates (being written?)");
    }
    Ok(())
}

/// Copies the backup encryption Secret `cluster` names into the key directory; true when a
/// file changed. Locally the directory is the Secret's own, so nothing changes. `Err` says
/// what is missing; the store then refuses to write (nothing is written in clear).
pub async fn write_backup_keys<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
) -> Result<bool, Wait> {
    let Some(backup) = &cluster.backup else {
        return Ok(false);
    };
    let (Some(secret), Some(dir)) = (&backup.encryption_secret, &backup.encryption_key_dir) else {
        return Ok(false);
    };
    mirror_secret(coord, secret, Path::new(dir)).await
}

/// Makes `dir` hold exactly the keys of Secret `secret` as files; true when a file changed.
async fn mirror_secret<C: Coordination>(coord: &C, secret: &str, dir: &Path) -> Result<bool, Wait> {
    let data = coord
        .secret_data(secret)
        .await
        .map_err(|e| Wait::new(format!("reading the backup encryption Secret {secret}: {e}")))?
        .ok_or_else(|| {
            Wait::new(format!(
                "the backup encryption Secret {secret} does not exist; no backup is written until it does"
            ))
        })?;
    std::fs::create_dir_all(dir).map_err(|e| io_wait(dir, &e))?;
    let mut changed = false;
    for (key, value) in &data {
        changed |= write_if_changed(&dir.join(key), value)?;
    }
    // A key removed from the Secret stops decrypting here too. (Locally the directory is the
    // Secret's own, whose regular files are exactly `data`: nothing is removed.)
    let entries = std::fs::read_dir(dir).map_err(|e| io_wait(dir, &e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|t| t.is_file()) && !data.contains_key(&name) {
            std::fs::remove_file(entry.path()).map_err(|e| io_wait(&entry.path(), &e))?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Writes `path` (owner read-write only) through a temporary file and a rename, so etcd never
/// reads half a certificate; false when it already held `value`.
fn write_if_changed(path: &Path, value: &[u8]) -> Result<bool, Wait> {
    if std::fs::read(path).is_ok_and(|old| old == value) {
        return Ok(false);
    }
    let tmp = path.with_extension("quorate-tmp");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io_wait(&tmp, &e))?;
    file.write_all(value).map_err(|e| io_wait(&tmp, &e))?;
    file.sync_all().map_err(|e| io_wait(&tmp, &e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_wait(path, &e))?;
    Ok(true)
}

fn io_wait(path: &Path, e: &std::io::Error) -> Wait {
    Wait::new(format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_cut_in_the_middle_of_a_certificate_is_not_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            quorate_testkit::TestCerts::generate(&dir.path().join("a")).unwrap(),
            quorate_testkit::TestCerts::generate(&dir.path().join("b")).unwrap(),
        );
        let bundle = [std::fs::read(&a.ca).unwrap(), std::fs::read(&b.ca).unwrap()].concat();
        assert_eq!(whole_certificates(&bundle), Ok(()));
        for cut in [bundle.len() - 30, bundle.len() / 2 + 40, 10] {
            assert!(
                whole_certificates(&bundle[..cut]).is_err(),
                "cut at {cut} of {}",
                bundle.len()
            );
        }
        assert!(whole_certificates(b"").is_err());
    }

    #[test]
    fn files_are_rewritten_only_when_their_content_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tls.crt");
        assert!(write_if_changed(&path, b"one").unwrap());
        assert!(!write_if_changed(&path, b"one").unwrap());
        assert!(write_if_changed(&path, b"two").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn the_key_directory_mirrors_the_secret_and_locally_touches_nothing() {
        let root = tempfile::tempdir().unwrap();
        let coord = quorate_coord::FileCoordination::new(root.path());
        let secret = root.path().join("secrets/keys");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("k1"), "one").unwrap();
        std::fs::write(secret.join("active"), "k1").unwrap();
        let pod_dir = root.path().join("pod/backup-encryption");
        std::fs::create_dir_all(&pod_dir).unwrap();
        std::fs::write(pod_dir.join("k0"), "retired").unwrap();
        assert!(mirror_secret(&coord, "keys", &pod_dir).await.unwrap());
        let mut names: Vec<String> = std::fs::read_dir(&pod_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["active", "k1"],
            "k0 left the Secret, so it leaves here"
        );
        assert!(!mirror_secret(&coord, "keys", &pod_dir).await.unwrap());
        // Locally the key directory is the Secret's own: mirroring changes nothing.
        assert!(!mirror_secret(&coord, "keys", &secret).await.unwrap());
        assert_eq!(std::fs::read(secret.join("k1")).unwrap(), b"one");
        let missing = mirror_secret(&coord, "absent", &pod_dir).await.unwrap_err();
        assert!(missing.to_string().contains("does not exist"), "{missing}");
    }
}
