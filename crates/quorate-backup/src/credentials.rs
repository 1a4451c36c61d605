//! Object-store credentials from a secret directory: one file per key of the Kubernetes Secret
//! that `spec.backup.store.secretRef` names, as the Secret looks when mounted in a pod and as
//! local mode stores secrets. Key names are etcd-backup-restore's, so the same Secret works for
//! both.
//!
//! | provider | keys |
//! |---|---|
//! | S3 (and S3-compatible) | `accessKeyID`, `secretAccessKey`, `region`; optional `endpoint`, `s3ForcePathStyle`, `sessionToken` |
//! | ECS (S3-compatible) | `endpoint`, `accessKeyID`, `secretAccessKey` (druid's mapping to `ECS_*` variables); optional `region` (quorate's) |
//! | OCS (S3-compatible) | `endpoint`, `region`, `accessKeyID`, `secretAccessKey`; optional `disableSSL`, `insecureSkipVerify`; or one `*.json` file with those fields |
//! | GCS | `serviceaccount.json`; optional `storageAPIEndpoint` |
//! | ABS | `storageAccount`, `storageKey`; optional `domain`, `emulatorEnabled` |
//! | Swift | `authURL`, `domainName`, `tenantName`, then `username` + `password` or `applicationCredentialID` + `applicationCredentialName` + `applicationCredentialSecret`; optional `region` (or `regionName`); or one `*.json` file with those fields |
//! | OSS (S3-compatible) | `storageEndpoint`, `accessKeyID`, `accessKeySecret`; or one `*.json` file with those fields |

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

    /// The first file (by name) whose name ends in `.<extension>`, if any.
    fn first_with_extension(&self, extension: &str) -> Result<Option<PathBuf>, CredentialsError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|source| CredentialsError::Unreadable {
                path: self.dir.clone(),
                source,
            })?;
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == extension))
            .collect();
        found.sort();
        Ok(found.into_iter().next())
    }

    /// The first `*.json` file, parsed as `T`, when there is one (etcd-backup-restore lets it
    /// win over the per-key files); `what` and `example` make the error say what was expected.
    fn json_file<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        example: &str,
    ) -> Result<Option<T>, CredentialsError> {
        let Some(path) = self.first_with_extension("json")? else {
            return Ok(None);
        };
        let text =
            std::fs::read_to_string(&path).map_err(|source| CredentialsError::Unreadable {
                path: path.clone(),
                source,
            })?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| CredentialsError::Invalid {
                dir: self.dir.clone(),
                key: "*.json",
                problem: format!(
                    "{} is not {what} credentials JSON ({e}); write {example}",
                    path.display()
                ),
            })
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
    /// `insecureSkipVerify` (OCS): accept any server certificate.
    pub insecure_skip_verify: bool,
}

const S3_NEEDS: &str = "accessKeyID and secretAccessKey, usually region";
const ECS_NEEDS: &str = "endpoint, accessKeyID and secretAccessKey";
const OCS_NEEDS: &str =
    "endpoint, region, accessKeyID and secretAccessKey (or one *.json file with them)";
/// The region etcd-backup-restore signs ECS requests for: ECS has no regions.
pub const ECS_REGION: &str = "US-Standard";

/// The fields of an OCS credentials JSON file, as etcd-backup-restore reads them.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OcsJson {
    endpoint: String,
    region: String,
    #[serde(rename = "accessKeyID")]
    access_key_id: String,
    secret_access_key: String,
    #[serde(rename = "disableSSL")]
    disable_ssl: bool,
    insecure_skip_verify: bool,
}

/// `endpoint` with `http://` or `https://` (by `disable_ssl`) when it names no scheme.
fn with_scheme(endpoint: String, disable_ssl: bool) -> String {
    if endpoint.contains("://") {
        endpoint
    } else if disable_ssl {
        format!("http://{endpoint}")
    } else {
        format!("https://{endpoint}")
    }
}

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
            insecure_skip_verify: false,
        })
    }

    /// Reads the keys druid hands etcd-backup-restore for Dell ECS (`endpoint`,
    /// `accessKeyID`, `secretAccessKey`); requests are signed for [`ECS_REGION`] and address
    /// buckets path-style, as etcd-backup-restore's ECS store does. An optional `region` key
    /// (quorate's, not druid's) signs for another region, for servers that check its form.
    pub fn from_ecs_dir(dir: &SecretDir) -> Result<S3Credentials, CredentialsError> {
        Ok(S3Credentials {
            access_key_id: dir.require("accessKeyID", "ECS", ECS_NEEDS)?,
            secret_access_key: dir.require("secretAccessKey", "ECS", ECS_NEEDS)?,
            region: Some(dir.get("region")?.unwrap_or_else(|| ECS_REGION.to_string())),
            endpoint: Some(with_scheme(
                dir.require("endpoint", "ECS", ECS_NEEDS)?,
                false,
            )),
            force_path_style: Some(true),
            session_token: None,
            insecure_skip_verify: false,
        })
    }

    /// Reads etcd-backup-restore's OpenShift (OCS) credentials: a `*.json` file in the
    /// directory when there is one (its fields win, as in etcd-backup-restore), else the keys
    /// `endpoint`, `region`, `accessKeyID`, `secretAccessKey` (all required), `disableSSL` and
    /// `insecureSkipVerify`. Buckets are addressed path-style.
    pub fn from_ocs_dir(dir: &SecretDir) -> Result<S3Credentials, CredentialsError> {
        let json: Option<OcsJson> = dir.json_file(
            "OCS",
            r#"{"endpoint": ..., "region": ..., "accessKeyID": ..., "secretAccessKey": ...}"#,
        )?;
        let o = match json {
            Some(o) => o,
            None => OcsJson {
                endpoint: dir.require("endpoint", "OCS", OCS_NEEDS)?,
                region: dir.require("region", "OCS", OCS_NEEDS)?,
                access_key_id: dir.require("accessKeyID", "OCS", OCS_NEEDS)?,
                secret_access_key: dir.require("secretAccessKey", "OCS", OCS_NEEDS)?,
                disable_ssl: dir.get_bool("disableSSL")?.unwrap_or(false),
                insecure_skip_verify: dir.get_bool("insecureSkipVerify")?.unwrap_or(false),
            },
        };
        for (key, value) in [
            ("endpoint", &o.endpoint),
            ("region", &o.region),
            ("accessKeyID", &o.access_key_id),
            ("secretAccessKey", &o.secret_access_key),
        ] {
            if value.trim().is_empty() {
                return Err(CredentialsError::Missing {
                    dir: dir.path().to_path_buf(),
                    key,
                    provider: "OCS",
                    needs: OCS_NEEDS,
                });
            }
        }
        Ok(S3Credentials {
            access_key_id: o.access_key_id.trim().to_string(),
            secret_access_key: o.secret_access_key.trim().to_string(),
            region: Some(o.region.trim().to_string()),
            endpoint: Some(with_scheme(o.endpoint.trim().to_string(), o.disable_ssl)),
            force_path_style: Some(true),
            session_token: None,
            insecure_skip_verify: o.insecure_skip_verify,
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
            .field("insecure_skip_verify", &self.insecure_skip_verify)
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

/// How a Swift client proves who it is: Keystone v3 with a password or an application
/// credential (what etcd-backup-restore does through gophercloud), or Swift's own v1 auth
/// (tempauth, swauth) when `authURL` ends in `/v1.0` or `/v1` (quorate's addition).
#[derive(Clone, PartialEq, Eq)]
pub enum SwiftAuth {
    /// `username` and `password`, scoped to the project `tenantName` in `domainName`.
    Password {
        /// `username`.
        username: String,
        /// `password`.
        password: String,
    },
    /// A Keystone v3 application credential (scoped when it was created).
    ApplicationCredential {
        /// `applicationCredentialID`.
        id: String,
        /// `applicationCredentialName`.
        name: String,
        /// `applicationCredentialSecret`.
        secret: String,
    },
}

/// OpenStack Swift credentials, with etcd-backup-restore's key names.
#[derive(Clone, PartialEq, Eq)]
pub struct SwiftCredentials {
    /// `authURL`: the Keystone endpoint (`https://keystone:5000/v3`), or a v1 auth URL.
    pub auth_url: String,
    /// `domainName`: the user's and the project's domain.
    pub domain_name: String,
    /// `tenantName`: the project.
    pub tenant_name: String,
    /// `region` (etcd-backup-restore's key) or `regionName`: the catalog region whose
    /// object-store endpoint is used; the first public one when unset.
    pub region: Option<String>,
    /// Password or application credential.
    pub auth: SwiftAuth,
}

const SWIFT_NEEDS: &str = "authURL, domainName, tenantName and either username + password or applicationCredentialID + applicationCredentialName + applicationCredentialSecret";

/// etcd-backup-restore's Swift credentials file (`*.json` in the secret).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct SwiftJson {
    #[serde(rename = "authURL")]
    auth_url: String,
    domain_name: String,
    tenant_name: String,
    region: String,
    username: String,
    password: String,
    #[serde(rename = "applicationCredentialID")]
    application_credential_id: String,
    application_credential_name: String,
    application_credential_secret: String,
}

impl SwiftCredentials {
    /// Reads etcd-backup-restore's Swift secret: a `*.json` file when there is one (it wins,
    /// as in etcd-backup-restore), else one file per key. A password and an application
    /// credential together are refused, as etcd-backup-restore refuses them.
    pub fn from_dir(dir: &SecretDir) -> Result<SwiftCredentials, CredentialsError> {
        let j = match dir.json_file::<SwiftJson>(
            "Swift",
            r#"{"authURL": ..., "domainName": ..., "tenantName": ..., "username": ..., "password": ...}"#,
        )? {
            Some(j) => j,
            None => {
                let get = |k| dir.get(k).map(Option::unwrap_or_default);
                SwiftJson {
                    auth_url: get("authURL")?,
                    domain_name: get("domainName")?,
                    tenant_name: get("tenantName")?,
                    region: match dir.get("region")? {
                        Some(r) => r,
                        None => get("regionName")?,
                    },
                    username: get("username")?,
                    password: get("password")?,
                    application_credential_id: get("applicationCredentialID")?,
                    application_credential_name: get("applicationCredentialName")?,
                    application_credential_secret: get("applicationCredentialSecret")?,
                }
            }
        };
        let t = |s: String| s.trim().to_string();
        let j = SwiftJson {
            auth_url: t(j.auth_url),
            domain_name: t(j.domain_name),
            tenant_name: t(j.tenant_name),
            region: t(j.region),
            username: t(j.username),
            password: t(j.password),
            application_credential_id: t(j.application_credential_id),
            application_credential_name: t(j.application_credential_name),
            application_credential_secret: t(j.application_credential_secret),
        };
        let missing = |key| CredentialsError::Missing {
            dir: dir.path().to_path_buf(),
            key,
            provider: "Swift",
            needs: SWIFT_NEEDS,
        };
        let has_password = !j.username.is_empty() || !j.password.is_empty();
        let has_app =
            !j.application_credential_id.is_empty() || !j.application_credential_secret.is_empty();
        if has_password && has_app {
            return Err(CredentialsError::Invalid {
                dir: dir.path().to_path_buf(),
                key: "applicationCredentialSecret",
                problem: "is set together with username/password; keep one of the two ways to authenticate".to_string(),
            });
        }
        for (key, value) in [
            ("authURL", &j.auth_url),
            ("domainName", &j.domain_name),
            ("tenantName", &j.tenant_name),
        ] {
            if value.is_empty() {
                return Err(missing(key));
            }
        }
        let auth = if has_app {
            for (key, value) in [
                ("applicationCredentialID", &j.application_credential_id),
                ("applicationCredentialName", &j.application_credential_name),
                (
                    "applicationCredentialSecret",
                    &j.application_credential_secret,
                ),
            ] {
                if value.is_empty() {
                    return Err(missing(key));
                }
            }
            SwiftAuth::ApplicationCredential {
                id: j.application_credential_id,
                name: j.application_credential_name,
                secret: j.application_credential_secret,
            }
        } else {
            if j.username.is_empty() {
                return Err(missing("username"));
            }
            if j.password.is_empty() {
                return Err(missing("password"));
            }
            SwiftAuth::Password {
                username: j.username,
                password: j.password,
            }
        };
        Ok(SwiftCredentials {
            auth_url: j.auth_url,
            domain_name: j.domain_name,
            tenant_name: j.tenant_name,
            region: (!j.region.is_empty()).then_some(j.region),
            auth,
        })
    }
}

impl fmt::Debug for SwiftCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            SwiftAuth::Password { username, .. } => format!("password of {username:?}"),
            SwiftAuth::ApplicationCredential { id, name, .. } => {
                format!("application credential {name:?} ({id})")
            }
        };
        f.debug_struct("SwiftCredentials")
            .field("auth_url", &self.auth_url)
            .field("domain_name", &self.domain_name)
            .field("tenant_name", &self.tenant_name)
            .field("region", &self.region)
            .field("auth", &auth)
            .finish()
    }
}

/// Alibaba OSS credentials (etcd-backup-restore's key names), used through OSS's S3-compatible
/// API.
#[derive(Clone, PartialEq, Eq)]
pub struct OssCredentials {
    /// `storageEndpoint`: e.g. `oss-eu-central-1.aliyuncs.com` (https when no scheme is given).
    pub storage_endpoint: String,
    /// `accessKeyID`.
    pub access_key_id: String,
    /// `accessKeySecret`.
    pub access_key_secret: String,
}

const OSS_NEEDS: &str = "storageEndpoint, accessKeyID and accessKeySecret";

/// etcd-backup-restore's OSS credentials file (`*.json` in the secret).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct OssJson {
    #[serde(rename = "storageEndpoint")]
    storage_endpoint: String,
    #[serde(rename = "accessKeyID")]
    access_key_id: String,
    #[serde(rename = "accessKeySecret")]
    access_key_secret: String,
}

impl OssCredentials {
    /// Reads etcd-backup-restore's OSS secret: a `*.json` file when there is one, else the
    /// keys `storageEndpoint`, `accessKeyID`, `accessKeySecret`.
    pub fn from_dir(dir: &SecretDir) -> Result<OssCredentials, CredentialsError> {
        let j = match dir.json_file::<OssJson>(
            "OSS",
            r#"{"storageEndpoint": ..., "accessKeyID": ..., "accessKeySecret": ...}"#,
        )? {
            Some(j) => j,
            None => OssJson {
                storage_endpoint: dir.get("storageEndpoint")?.unwrap_or_default(),
                access_key_id: dir.get("accessKeyID")?.unwrap_or_default(),
                access_key_secret: dir.get("accessKeySecret")?.unwrap_or_default(),
            },
        };
        let mut values = [
            ("storageEndpoint", j.storage_endpoint),
            ("accessKeyID", j.access_key_id),
            ("accessKeySecret", j.access_key_secret),
        ];
        for (key, value) in &mut values {
            *value = value.trim().to_string();
            if value.is_empty() {
                return Err(CredentialsError::Missing {
                    dir: dir.path().to_path_buf(),
                    key,
                    provider: "OSS",
                    needs: OSS_NEEDS,
                });
            }
        }
        let [
            (_, storage_endpoint),
            (_, access_key_id),
            (_, access_key_secret),
        ] = values;
        Ok(OssCredentials {
            storage_endpoint,
            access_key_id,
            access_key_secret,
        })
    }
}

impl fmt::Debug for OssCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OssCredentials")
            .field("storage_endpoint", &self.storage_endpoint)
            .field("access_key_id", &self.access_key_id)
            .field("access_key_secret", &"<redacted>")
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
    fn ecs_takes_druids_three_keys_and_signs_for_us_standard() {
        let d = secret(&[
            ("endpoint", "ecs.example.com:9021\n"),
            ("accessKeyID", "ecs-user"),
            ("secretAccessKey", "s3cr3t"),
        ]);
        let c = S3Credentials::from_ecs_dir(&SecretDir::open(d.path()).unwrap()).unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("https://ecs.example.com:9021"));
        assert_eq!(c.region.as_deref(), Some(ECS_REGION));
        assert_eq!(c.force_path_style, Some(true));
        let d = secret(&[("accessKeyID", "a"), ("secretAccessKey", "b")]);
        let e = S3Credentials::from_ecs_dir(&SecretDir::open(d.path()).unwrap()).unwrap_err();
        assert!(
            matches!(
                e,
                CredentialsError::Missing {
                    key: "endpoint",
                    provider: "ECS",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn ocs_reads_its_keys_or_a_json_file_and_names_what_is_missing() {
        let d = secret(&[
            ("endpoint", "ocs.example.com"),
            ("region", "eu-1"),
            ("accessKeyID", "a"),
            ("secretAccessKey", "b"),
            ("disableSSL", "true"),
            ("insecureSkipVerify", "true"),
        ]);
        let c = S3Credentials::from_ocs_dir(&SecretDir::open(d.path()).unwrap()).unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("http://ocs.example.com"));
        assert_eq!(c.region.as_deref(), Some("eu-1"));
        assert!(c.insecure_skip_verify);

        // A JSON file wins over the keys, as in etcd-backup-restore.
        std::fs::write(
            d.path().join("credentials.json"),
            r#"{"endpoint": "https://json.example.com", "region": "eu-2", "accessKeyID": "ja", "secretAccessKey": "jb"}"#,
        )
        .unwrap();
        let c = S3Credentials::from_ocs_dir(&SecretDir::open(d.path()).unwrap()).unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("https://json.example.com"));
        assert_eq!(
            (c.access_key_id.as_str(), c.region.as_deref()),
            ("ja", Some("eu-2"))
        );
        assert!(!c.insecure_skip_verify);
        assert!(!format!("{c:?}").contains("jb"));

        std::fs::write(
            d.path().join("credentials.json"),
            r#"{"endpoint": "x", "accessKeyID": "a", "secretAccessKey": "b"}"#,
        )
        .unwrap();
        let e = S3Credentials::from_ocs_dir(&SecretDir::open(d.path()).unwrap()).unwrap_err();
        assert!(
            matches!(e, CredentialsError::Missing { key: "region", .. }),
            "{e}"
        );
        std::fs::write(d.path().join("credentials.json"), "endpoint: x").unwrap();
        let e = S3Credentials::from_ocs_dir(&SecretDir::open(d.path()).unwrap()).unwrap_err();
        assert!(e.to_string().contains("credentials.json"), "{e}");

        let d = secret(&[
            ("endpoint", "x"),
            ("accessKeyID", "a"),
            ("secretAccessKey", "b"),
        ]);
        let e = S3Credentials::from_ocs_dir(&SecretDir::open(d.path()).unwrap()).unwrap_err();
        assert!(
            e.to_string().contains("region") && e.to_string().contains("OCS"),
            "{e}"
        );
    }

    #[test]
    fn swift_reads_password_app_credential_and_json_forms() {
        let base = [
            ("authURL", "https://keystone:5000/v3\n"),
            ("domainName", "Default"),
            ("tenantName", "proj"),
        ];
        let mut keys = base.to_vec();
        keys.extend([
            ("username", "u"),
            ("password", "p"),
            ("region", "RegionTwo"),
        ]);
        let c =
            SwiftCredentials::from_dir(&SecretDir::open(secret(&keys).path()).unwrap()).unwrap();
        assert_eq!(c.auth_url, "https://keystone:5000/v3");
        assert_eq!(c.region.as_deref(), Some("RegionTwo"));
        assert!(matches!(c.auth, SwiftAuth::Password { ref username, .. } if username == "u"));
        assert!(!format!("{c:?}").contains("\"p\""), "{c:?}");

        let mut keys = base.to_vec();
        keys.extend([
            ("applicationCredentialID", "id"),
            ("applicationCredentialName", "name"),
            ("applicationCredentialSecret", "s3cr3t"),
            ("regionName", "RegionOne"),
        ]);
        let c =
            SwiftCredentials::from_dir(&SecretDir::open(secret(&keys).path()).unwrap()).unwrap();
        assert_eq!(c.region.as_deref(), Some("RegionOne"));
        assert!(matches!(c.auth, SwiftAuth::ApplicationCredential { ref id, .. } if id == "id"));
        assert!(!format!("{c:?}").contains("s3cr3t"), "{c:?}");

        let json = r#"{"authURL": "https://k/v3", "domainName": "d", "tenantName": "t", "username": "u", "password": "p"}"#;
        let c = SwiftCredentials::from_dir(
            &SecretDir::open(secret(&[("creds.json", json)]).path()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            (c.auth_url.as_str(), c.tenant_name.as_str()),
            ("https://k/v3", "t")
        );

        // Missing keys are named; both ways at once are refused.
        for (drop, named) in [("tenantName", "tenantName"), ("password", "password")] {
            let mut keys = base.to_vec();
            keys.extend([("username", "u"), ("password", "p")]);
            keys.retain(|(k, _)| *k != drop);
            let e = SwiftCredentials::from_dir(&SecretDir::open(secret(&keys).path()).unwrap())
                .unwrap_err();
            assert!(e.to_string().contains(named), "{e}");
        }
        let mut keys = base.to_vec();
        keys.extend([
            ("username", "u"),
            ("password", "p"),
            ("applicationCredentialID", "id"),
        ]);
        let e = SwiftCredentials::from_dir(&SecretDir::open(secret(&keys).path()).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("keep one"), "{e}");
    }

    #[test]
    fn oss_reads_keys_or_json() {
        let keys = [
            ("storageEndpoint", "oss-eu-central-1.aliyuncs.com"),
            ("accessKeyID", "id"),
            ("accessKeySecret", "secret"),
        ];
        let c = OssCredentials::from_dir(&SecretDir::open(secret(&keys).path()).unwrap()).unwrap();
        assert_eq!(c.storage_endpoint, "oss-eu-central-1.aliyuncs.com");
        assert!(!format!("{c:?}").contains("\"secret\""));
        let json = r#"{"storageEndpoint": "e", "accessKeyID": "i", "accessKeySecret": "s"}"#;
        let c =
            OssCredentials::from_dir(&SecretDir::open(secret(&[("a.json", json)]).path()).unwrap())
                .unwrap();
        assert_eq!(c.access_key_secret, "s");
        let e = OssCredentials::from_dir(&SecretDir::open(secret(&keys[1..]).path()).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("storageEndpoint"), "{e}");
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
