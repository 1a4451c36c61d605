//! Object-store credentials from a secret directory: one file per key of the Kubernetes Secret
//! that `spec.backup.store.secretRef` names, as the Secret looks when mounted in a pod and as
//! local mode stores secrets. Key names are etcd-backup-restore's, so the same Secret works for
//! both.
//!
//! | provider | keys |
//! |---|---|
//! | S3 (and S3-compatible) | `accessKeyID`, `secretAccessKey`, `region`; optional `endpoint`, `s3ForcePathStyle`, `sessionToken` |
//! | GCS | `serviceaccount.json`; optional `storageAPIEndpoint` |
//! | ABS | `storageAccount`, `storageKey`; optional `domain`, `emulatorEnabled` |

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Credentials that could not be read from the secret directory.
#[derive(Debug, Error)]
pub enum CredentialsError {
    /// The directory or a file in it cannot be read.
    #[error(
        "cannot read store credentials {path}: {source}; check that the secret named in spec.backup.store.secretRef exists and is mounted there"
    )]
    Unreadable {
        /// The directory or file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A key the provider needs is missing or empty.
    #[error(
        "store credentials in {dir} lack the key {key:?} ({provider} needs {needs}); add it to the secret"
    )]
    Missing {
        /// The secret directory.
        dir: PathBuf,
        /// The missing key.
        key: &'static str,
        /// Provider name.
        provider: &'static str,
        /// All keys the provider needs, for the message.
        needs: &'static str,
    },
    /// A key holds a value that cannot be used.
    #[error("store credentials in {dir}: key {key:?} {problem}")]
    Invalid {
        /// The secret directory.
        dir: PathBuf,
        /// The key.
        key: &'static str,
        /// What is wrong with the value.
        problem: String,
    },
}

/// A directory holding one file per secret key.
#[derive(Clone, Debug)]
pub struct SecretDir {
    dir: PathBuf,
}

impl SecretDir {
    /// The secret mounted (or stored) at `dir`; fails when it is not a readable directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<SecretDir, CredentialsError> {
        let dir = dir.into();
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => Ok(SecretDir { dir }),
            Ok(_) => Err(CredentialsError::Unreadable {
                source: io::Error::other("not a directory"),
                path: dir,
            }),
            Err(source) => Err(CredentialsError::Unreadable { path: dir, source }),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The path of a key's file (whether or not it exists).
    pub fn key_path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// A key's value with surrounding whitespace (e.g. the newline `echo` adds) removed;
    /// `None` when the file is missing or blank.
    pub fn get(&self, key: &str) -> Result<Option<String>, CredentialsError> {
        let path = self.key_path(key);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let text = text.trim();
                Ok((!text.is_empty()).then(|| text.to_string()))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CredentialsError::Unreadable { path, source }),
        }
    }

    /// A boolean key (`true`/`false`, any case); `None` when absent.
    pub fn get_bool(&self, key: &'static str) -> Result<Option<bool>, CredentialsError> {
        match self.get(key)? {
            None => Ok(None),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" => Ok(Some(true)),
                "false" => Ok(Some(false)),
                _ => Err(CredentialsError::Invalid {
                    dir: self.dir.clone(),
                    key,
                    problem: format!("is {v:?}, expected true or false"),
                }),
            },
        }
    }

    fn require(
        &self,
        key: &'static str,
        provider: &'static str,
        needs: &'static str,
    ) -> Result<String, CredentialsError> {
        self.get(key)?.ok_or_else(|| CredentialsError::Missing {
            dir: self.dir.clone(),
            key,
            provider,
            needs,
        })
    }
}

/// Static S3 credentials and connection settings.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// `accessKeyID`.
    pub access_key_id: String,
    /// `secretAccessKey`.
    pub secret_access_key: String,
    /// `region`, when given.
    pub region: Option<String>,
    /// `endpoint`: an S3-compatible server instead of AWS.
    pub endpoint: Option<String>,
    /// `s3ForcePathStyle`: bucket in the path instead of the host name.
    pub force_path_style: Option<bool>,
    /// `sessionToken`: for temporary credentials.
    pub session_token: Option<String>,
}

const S3_NEEDS: &str = "accessKeyID and secretAccessKey, usually region";

impl S3Credentials {
    /// Reads the S3 keys of etcd-backup-restore's AWS secret.
    pub fn from_dir(dir: &SecretDir) -> Result<S3Credentials, CredentialsError> {
        Ok(S3Credentials {
            access_key_id: dir.require("accessKeyID", "S3", S3_NEEDS)?,
            secret_access_key: dir.require("secretAccessKey", "S3", S3_NEEDS)?,
            region: dir.get("region")?,
            endpoint: dir.get("endpoint")?,
            force_path_style: dir.get_bool("s3ForcePathStyle")?,
            session_token: dir.get("sessionToken")?,
        })
    }
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("force_path_style", &self.force_path_style)
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Google Cloud Storage credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcsCredentials {
    /// The service account key file (`serviceaccount.json`).
    pub service_account_path: PathBuf,
    /// `storageAPIEndpoint`: another GCS-compatible endpoint.
    pub storage_api_endpoint: Option<String>,
}

impl GcsCredentials {
    /// Reads etcd-backup-restore's GCS secret.
    pub fn from_dir(dir: &SecretDir) -> Result<GcsCredentials, CredentialsError> {
        // Checked for presence only: the file's contents are the store client's to parse.
        dir.require("serviceaccount.json", "GCS", "serviceaccount.json")?;
        Ok(GcsCredentials {
            service_account_path: dir.key_path("serviceaccount.json"),
            storage_api_endpoint: dir.get("storageAPIEndpoint")?,
        })
    }
}

/// Azure Blob Storage credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct AzureCredentials {
    /// `storageAccount`.
    pub storage_account: String,
    /// `storageKey`: the account's access key.
    pub storage_key: String,
    /// `domain`: the blob domain, e.g. `blob.core.chinacloudapi.cn`; `blob.core.windows.net`
    /// when unset.
    pub domain: Option<String>,
    /// `emulatorEnabled`: talk to an Azurite emulator.
    pub emulator_enabled: bool,
}

const AZURE_NEEDS: &str = "storageAccount and storageKey";

impl AzureCredentials {
    /// Reads etcd-backup-restore's Azure secret.
    pub fn from_dir(dir: &SecretDir) -> Result<AzureCredentials, CredentialsError> {
        Ok(AzureCredentials {
            storage_account: dir.require("storageAccount", "ABS", AZURE_NEEDS)?,
            storage_key: dir.require("storageKey", "ABS", AZURE_NEEDS)?,
            domain: dir.get("domain")?,
            emulator_enabled: dir.get_bool("emulatorEnabled")?.unwrap_or(false),
        })
    }
}

impl fmt::Debug for AzureCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureCredentials")
            .field("storage_account", &self.storage_account)
            .field("storage_key", &"<redacted>")
            .field("domain", &self.domain)
            .field("emulator_enabled", &self.emulator_enabled)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(entries: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (k, v) in entries {
            std::fs::write(dir.path().join(k), v).unwrap();
        }
        dir
    }

    #[test]
    fn reads_s3_keys_trimming_newlines() {
        let d = secret(&[
            ("accessKeyID", "AKIA\n"),
            ("secretAccessKey", "s3cr3t"),
            ("region", "eu-west-1\n"),
            ("endpoint", "http://127.0.0.1:9000"),
            ("s3ForcePathStyle", "True\n"),
        ]);
        let c = S3Credentials::from_dir(&SecretDir::open(d.path()).unwrap()).unwrap();
        assert_eq!(c.access_key_id, "AKIA");
        assert_eq!(c.secret_access_key, "s3cr3t");
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(c.force_path_style, Some(true));
        assert_eq!(c.session_token, None);
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }

    #[test]
    fn missing_and_invalid_keys_are_named() {
        let d = secret(&[("accessKeyID", "AKIA"), ("secretAccessKey", "  \n")]);
        let e = S3Credentials::from_dir(&SecretDir::open(d.path()).unwrap()).unwrap_err();
        assert!(
            matches!(
                e,
                CredentialsError::Missing {
                    key: "secretAccessKey",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("secretAccessKey"), "{e}");

        let d = secret(&[
            ("accessKeyID", "AKIA"),
            ("secretAccessKey", "x"),
            ("s3ForcePathStyle", "yes"),
        ]);
        let e = S3Credentials::from_dir(&SecretDir::open(d.path()).unwrap()).unwrap_err();
        assert!(e.to_string().contains("s3ForcePathStyle"), "{e}");

        let e = SecretDir::open("/nonexistent/quorate-secret").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/quorate-secret"), "{e}");
    }

    #[test]
    fn reads_gcs_and_azure_keys() {
        let d = secret(&[("serviceaccount.json", "{}")]);
        let g = GcsCredentials::from_dir(&SecretDir::open(d.path()).unwrap()).unwrap();
        assert_eq!(g.service_account_path, d.path().join("serviceaccount.json"));
        let d = secret(&[]);
        assert!(GcsCredentials::from_dir(&SecretDir::open(d.path()).unwrap()).is_err());

        let d = secret(&[
            ("storageAccount", "acct"),
            ("storageKey", "a2V5"),
            ("emulatorEnabled", "true"),
        ]);
        let a = AzureCredentials::from_dir(&SecretDir::open(d.path()).unwrap()).unwrap();
        assert_eq!(a.storage_account, "acct");
        assert!(a.emulator_enabled);
        assert!(!format!("{a:?}").contains("a2V5"));
    }
}
