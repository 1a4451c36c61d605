//! Builds the `object_store` client for a store spec: the provider druid names, its bucket,
//! endpoint and credentials (from the secret directory, or the provider's ambient chain when
//! there is none), with bounded timeouts so a dead store is reported instead of waited for.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use quorate_api::{StorageProvider, StoreSpec};
use url::Url;

use super::StoreOptions;
use super::error::StoreError;
use super::swift::SwiftStore;
use crate::credentials::{
    AzureCredentials, GcsCredentials, OssCredentials, S3Credentials, SecretDir, SwiftCredentials,
};

/// How long to wait for a TCP/TLS connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take, body included (a part of at most a few MiB, or a download
/// that object_store resumes on failure).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// An opened store: the client and what describes it.
pub(crate) struct Backend {
    pub store: Arc<dyn ObjectStore>,
    pub provider: StorageProvider,
    pub bucket: String,
    pub description: String,
}

/// Opens the store `spec` describes.
pub(crate) fn open(spec: &StoreSpec, opts: &StoreOptions) -> Result<Backend, StoreError> {
    let name = spec.provider.as_deref().ok_or_else(|| StoreError::Config {
        detail: format!(
            "spec.backup.store.provider is not set; use one of {}",
            StorageProvider::accepted_names().join(", ")
        ),
    })?;
    let provider = StorageProvider::from_spec(name).ok_or_else(|| StoreError::Config {
        detail: format!(
            "spec.backup.store.provider {name:?} is unknown; use one of {}",
            StorageProvider::accepted_names().join(", ")
        ),
    })?;
    let secret = match &opts.secret_dir {
        Some(dir) => Some(SecretDir::open(dir)?),
        None => None,
    };
    let prefix = spec.prefix.trim_matches('/');
    match provider {
        StorageProvider::Local => open_local(spec, opts, prefix),
        StorageProvider::S3 => {
            let creds = secret.as_ref().map(S3Credentials::from_dir).transpose()?;
            open_s3(spec, provider, creds, prefix)
        }
        // S3-compatible, each with its own Secret layout (druid's and etcd-backup-restore's).
        StorageProvider::Ecs | StorageProvider::Ocs => {
            let secret = secret.as_ref().ok_or_else(|| StoreError::Config {
                detail: format!(
                    "provider {provider} needs spec.backup.store.secretRef: a Secret with {}",
                    if provider == StorageProvider::Ecs {
                        "endpoint, accessKeyID and secretAccessKey"
                    } else {
                        "endpoint, region, accessKeyID and secretAccessKey"
                    }
                ),
            })?;
            let creds = if provider == StorageProvider::Ecs {
                S3Credentials::from_ecs_dir(secret)?
            } else {
                S3Credentials::from_ocs_dir(secret)?
            };
            open_s3(spec, provider, Some(creds), prefix)
        }
        StorageProvider::Gcs => open_gcs(spec, secret.as_ref(), prefix),
        StorageProvider::Abs => open_azure(spec, secret.as_ref(), prefix),
        StorageProvider::Swift => {
            let secret = secret.as_ref().ok_or_else(|| StoreError::Config {
                detail: format!(
                    "provider {provider} needs spec.backup.store.secretRef: a Secret with authURL, domainName, tenantName and username + password (or an application credential)"
                ),
            })?;
            open_swift(spec, SwiftCredentials::from_dir(secret)?, prefix)
        }
        // Alibaba OSS through its S3-compatible API.
        StorageProvider::Oss => {
            let secret = secret.as_ref().ok_or_else(|| StoreError::Config {
                detail: format!(
                    "provider {provider} needs spec.backup.store.secretRef: a Secret with storageEndpoint, accessKeyID and accessKeySecret"
                ),
            })?;
            let creds = oss_as_s3(OssCredentials::from_dir(secret)?)?;
            open_s3(spec, provider, Some(creds), prefix)
        }
    }
}

/// Retries of a failed request (connection errors, 5xx, throttling) before giving up.
const MAX_RETRIES: usize = 3;

fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: MAX_RETRIES,
        retry_timeout: Duration::from_secs(60),
    }
}

fn client_options(allow_http: bool) -> ClientOptions {
    ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_allow_http(allow_http)
}

fn container(spec: &StoreSpec, provider: StorageProvider) -> Result<&str, StoreError> {
    match spec.container.as_deref().map(str::trim) {
        Some(c) if !c.is_empty() => Ok(c),
        _ => Err(StoreError::Config {
            detail: format!(
                "spec.backup.store.container (the bucket) is required for provider {provider}"
            ),
        }),
    }
}

/// Parses an endpoint URL, naming the field it came from when it is not one.
fn endpoint_url(text: &str, field: &str) -> Result<Url, StoreError> {
    // `host:port` without a scheme means https, as the AWS SDK etcd-backup-restore uses reads it
    // (druid's CRD accepts it).
    let with_scheme;
    let text = if text.contains("://") {
        text
    } else {
        with_scheme = format!("https://{text}");
        &with_scheme
    };
    let url = Url::parse(text).map_err(|e| StoreError::Config {
        detail: format!("{field} {text:?} is not a URL ({e}); write it like https://host:port"),
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(StoreError::Config {
            detail: format!("{field} {text:?} has scheme {other:?}; use http or https"),
        }),
    }
}

/// The endpoint as written, without a trailing slash.
fn endpoint_text(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_string()
}

fn with_prefix(base: String, prefix: &str) -> String {
    if prefix.is_empty() {
        base
    } else {
        format!("{base}/{prefix}")
    }
}

fn open_local(spec: &StoreSpec, opts: &StoreOptions, prefix: &str) -> Result<Backend, StoreError> {
    let container = spec.container.as_deref().map(str::trim).unwrap_or("");
    if container.split('/').any(|part| part == ".." || part == ".") || container.starts_with('/') {
        return Err(StoreError::Config {
            detail: format!(
                "spec.backup.store.container {container:?} must be a plain directory name for provider Local"
            ),
        });
    }
    let root = opts.local_root.join(container);
    // etcd-backup-restore creates its local store directory as well.
    std::fs::create_dir_all(&root).map_err(|e| StoreError::Config {
        detail: format!(
            "cannot create the local backup directory {}: {e}",
            root.display()
        ),
    })?;
    let fs = LocalFileSystem::new_with_prefix(&root)
        .map_err(|e| StoreError::Config {
            detail: format!(
                "cannot use the local backup directory {}: {e}",
                root.display()
            ),
        })?
        .with_automatic_cleanup(true);
    let root_text = root.display().to_string();
    Ok(Backend {
        store: Arc::new(fs),
        provider: StorageProvider::Local,
        bucket: root_text.clone(),
        description: with_prefix(format!("file://{root_text}"), prefix),
    })
}

fn open_s3(
    spec: &StoreSpec,
    provider: StorageProvider,
    creds: Option<S3Credentials>,
    prefix: &str,
) -> Result<Backend, StoreError> {
    let bucket = container(spec, provider)?;
    let insecure = creds.as_ref().is_some_and(|c| c.insecure_skip_verify);
    let mut b = match &creds {
        Some(c) => {
            let mut b = AmazonS3Builder::new()
                .with_access_key_id(&c.access_key_id)
                .with_secret_access_key(&c.secret_access_key)
                .with_region(c.region.as_deref().unwrap_or("us-east-1"));
            if let Some(t) = &c.session_token {
                b = b.with_token(t);
            }
            b
        }
        // AWS_ACCESS_KEY_ID, AWS_REGION, web identity, instance metadata ...
        None => AmazonS3Builder::from_env(),
    };
    b = b.with_bucket_name(bucket).with_retry(retry_config());
    let endpoint = match (
        &spec.endpoint_override,
        creds.as_ref().and_then(|c| c.endpoint.as_ref()),
    ) {
        (Some(e), _) => Some(endpoint_url(e, "spec.backup.store.endpointOverride")?),
        (None, Some(e)) => Some(endpoint_url(e, "the secret's endpoint")?),
        (None, None) => None,
    };
    let force_path_style = creds.as_ref().and_then(|c| c.force_path_style);
    let description;
    match &endpoint {
        Some(url) => {
            let allow_http = url.scheme() == "http";
            b = b.with_client_options(
                client_options(allow_http).with_allow_invalid_certificates(insecure),
            );
            // S3-compatible servers are addressed path-style unless the secret says otherwise.
            if force_path_style.unwrap_or(true) {
                b = b
                    .with_endpoint(endpoint_text(url))
                    .with_virtual_hosted_style_request(false);
            } else {
                let mut hosted = url.clone();
                let host = url.host_str().unwrap_or_default();
                hosted
                    .set_host(Some(&format!("{bucket}.{host}")))
                    .map_err(|e| StoreError::Config {
                        detail: format!(
                            "cannot address bucket {bucket:?} virtual-hosted at {url}: {e}; set s3ForcePathStyle to true"
                        ),
                    })?;
                b = b
                    .with_endpoint(endpoint_text(&hosted))
                    .with_virtual_hosted_style_request(true);
            }
            description = format!(
                "{} at {}",
                with_prefix(format!("s3://{bucket}"), prefix),
                endpoint_text(url)
            );
        }
        None => {
            b = b
                .with_client_options(client_options(false))
                .with_virtual_hosted_style_request(!force_path_style.unwrap_or(false));
            description = with_prefix(format!("s3://{bucket}"), prefix);
        }
    }
    let store = b.build().map_err(|e| StoreError::Config {
        detail: format!("cannot set up S3 store {description}: {e}"),
    })?;
    Ok(Backend {
        store: Arc::new(store),
        provider,
        bucket: bucket.to_string(),
        description,
    })
}

/// OSS credentials as S3 ones for OSS's S3-compatible API: requests are signed for the region
/// the endpoint names (`oss-eu-central-1.aliyuncs.com` → `oss-eu-central-1`, as Alibaba's
/// S3 guide does) and buckets addressed virtual-hosted (OSS refuses path-style), except at an
/// IP address or `localhost` (an S3 server standing in for OSS), which is addressed path-style.
fn oss_as_s3(c: OssCredentials) -> Result<S3Credentials, StoreError> {
    let url = endpoint_url(&c.storage_endpoint, "the secret's storageEndpoint")?;
    let host = url.host_str().unwrap_or_default().to_string();
    let local =
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[');
    let region = host
        .split('.')
        .next()
        .filter(|label| label.starts_with("oss-"))
        .map(|label| label.trim_end_matches("-internal").to_string());
    Ok(S3Credentials {
        access_key_id: c.access_key_id,
        secret_access_key: c.access_key_secret,
        region,
        endpoint: Some(endpoint_text(&url)),
        force_path_style: Some(local),
        session_token: None,
        insecure_skip_verify: false,
    })
}

fn open_swift(
    spec: &StoreSpec,
    creds: SwiftCredentials,
    prefix: &str,
) -> Result<Backend, StoreError> {
    let container_name = container(spec, StorageProvider::Swift)?;
    if spec.endpoint_override.is_some() {
        return Err(StoreError::Config {
            detail: "spec.backup.store.endpointOverride is not used by provider Swift: the object-store endpoint comes from Keystone's catalog (or v1 auth); remove it".to_string(),
        });
    }
    let auth_url = endpoint_url(&creds.auth_url, "the secret's authURL")?;
    let description = format!(
        "{} at {}",
        with_prefix(format!("swift://{container_name}"), prefix),
        endpoint_text(&auth_url)
    );
    let store = SwiftStore::new(
        creds,
        container_name,
        &client_options(auth_url.scheme() == "http"),
    )
    .map_err(|e| StoreError::Config {
        detail: format!("cannot set up Swift store {description}: {e}"),
    })?;
    Ok(Backend {
        store: Arc::new(store),
        provider: StorageProvider::Swift,
        bucket: container_name.to_string(),
        description,
    })
}

fn open_gcs(
    spec: &StoreSpec,
    secret: Option<&SecretDir>,
    prefix: &str,
) -> Result<Backend, StoreError> {
    let bucket = container(spec, StorageProvider::Gcs)?;
    let creds = secret.map(GcsCredentials::from_dir).transpose()?;
    let mut b = match &creds {
        Some(c) => GoogleCloudStorageBuilder::new()
            .with_service_account_path(c.service_account_path.display().to_string()),
        // GOOGLE_APPLICATION_CREDENTIALS, workload identity, metadata server ...
        None => GoogleCloudStorageBuilder::from_env(),
    };
    let endpoint = match (
        &spec.endpoint_override,
        creds.as_ref().and_then(|c| c.storage_api_endpoint.as_ref()),
    ) {
        (Some(e), _) => Some(endpoint_url(e, "spec.backup.store.endpointOverride")?),
        (None, Some(e)) => Some(endpoint_url(e, "the secret's storageAPIEndpoint")?),
        (None, None) => None,
    };
    let allow_http = endpoint.as_ref().is_some_and(|u| u.scheme() == "http");
    if let Some(url) = &endpoint {
        b = b.with_base_url(&endpoint_text(url));
    }
    b = b
        .with_bucket_name(bucket)
        .with_retry(retry_config())
        .with_client_options(client_options(allow_http));
    let mut description = with_prefix(format!("gs://{bucket}"), prefix);
    if let Some(url) = &endpoint {
        description = format!("{description} at {}", endpoint_text(url));
    }
    let store = b.build().map_err(|e| StoreError::Config {
        detail: format!("cannot set up GCS store {description}: {e}"),
    })?;
    Ok(Backend {
        store: Arc::new(store),
        provider: StorageProvider::Gcs,
        bucket: bucket.to_string(),
        description,
    })
}

fn open_azure(
    spec: &StoreSpec,
    secret: Option<&SecretDir>,
    prefix: &str,
) -> Result<Backend, StoreError> {
    let container_name = container(spec, StorageProvider::Abs)?;
    let creds = secret.map(AzureCredentials::from_dir).transpose()?;
    let mut b = match &creds {
        Some(c) => MicrosoftAzureBuilder::new()
            .with_account(&c.storage_account)
            .with_access_key(&c.storage_key)
            .with_use_emulator(c.emulator_enabled),
        // AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, workload identity ...
        None => MicrosoftAzureBuilder::from_env(),
    };
    let account = creds
        .as_ref()
        .map(|c| c.storage_account.clone())
        .unwrap_or_else(|| std::env::var("AZURE_STORAGE_ACCOUNT_NAME").unwrap_or_default());
    let endpoint = match (
        &spec.endpoint_override,
        creds.as_ref().and_then(|c| c.domain.as_ref()),
    ) {
        (Some(e), _) => Some(endpoint_url(e, "spec.backup.store.endpointOverride")?),
        (None, Some(domain)) => Some(endpoint_url(
            &format!("https://{account}.{}", domain.trim_matches('.')),
            "the secret's domain",
        )?),
        (None, None) => None,
    };
    let allow_http = endpoint.as_ref().is_some_and(|u| u.scheme() == "http")
        || creds.as_ref().is_some_and(|c| c.emulator_enabled);
    if let Some(url) = &endpoint {
        b = b.with_endpoint(endpoint_text(url));
    }
    b = b
        .with_container_name(container_name)
        .with_retry(retry_config())
        .with_client_options(client_options(allow_http));
    let mut description = with_prefix(format!("azure://{account}/{container_name}"), prefix);
    if let Some(url) = &endpoint {
        description = format!("{description} at {}", endpoint_text(url));
    }
    let store = b.build().map_err(|e| StoreError::Config {
        detail: format!("cannot set up Azure Blob store {description}: {e}"),
    })?;
    Ok(Backend {
        store: Arc::new(store),
        provider: StorageProvider::Abs,
        bucket: container_name.to_string(),
        description,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(provider: &str, container: Option<&str>) -> StoreSpec {
        StoreSpec {
            container: container.map(str::to_string),
            endpoint_override: None,
            prefix: "etcd-main".to_string(),
            provider: Some(provider.to_string()),
            secret_ref: None,
        }
    }

    fn opts(root: &std::path::Path, secret: Option<&std::path::Path>) -> StoreOptions {
        StoreOptions {
            local_root: root.to_path_buf(),
            secret_dir: secret.map(|p| p.to_path_buf()),
            encryption_keys: None,
        }
    }

    #[test]
    fn druid_provider_names_open_their_store() {
        let tmp = tempfile::tempdir().unwrap();
        let secret = tempfile::tempdir().unwrap();
        for (k, v) in [
            ("accessKeyID", "AKIA"),
            ("secretAccessKey", "secret"),
            ("region", "eu-central-1"),
            ("storageAccount", "acct"),
            ("storageKey", "a2V5"),
        ] {
            std::fs::write(secret.path().join(k), v).unwrap();
        }
        let o = opts(tmp.path(), Some(secret.path()));
        for (name, provider, description) in [
            ("aws", StorageProvider::S3, "s3://bkt/etcd-main"),
            ("S3", StorageProvider::S3, "s3://bkt/etcd-main"),
            ("stackit", StorageProvider::S3, "s3://bkt/etcd-main"),
            ("azure", StorageProvider::Abs, "azure://acct/bkt/etcd-main"),
            ("ABS", StorageProvider::Abs, "azure://acct/bkt/etcd-main"),
        ] {
            let b = open(&spec(name, Some("bkt")), &o).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(b.provider, provider, "{name}");
            assert_eq!(b.description, description, "{name}");
        }
        // A GCS service account for an emulator (no OAuth, so no real key is needed).
        std::fs::write(
            secret.path().join("serviceaccount.json"),
            r#"{"gcs_base_url": "http://127.0.0.1:4443", "disable_oauth": true, "client_email": "", "private_key_id": "", "private_key": ""}"#,
        )
        .unwrap();
        for name in ["gcp", "GCS"] {
            let b = open(&spec(name, Some("bkt")), &o).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(b.provider, StorageProvider::Gcs);
            assert_eq!(b.description, "gs://bkt/etcd-main");
        }
        let b = open(&spec("Local", Some("bucket")), &o).unwrap();
        assert_eq!(b.provider, StorageProvider::Local);
        assert!(tmp.path().join("bucket").is_dir());
        assert!(b.description.starts_with("file://"), "{}", b.description);
    }

    #[test]
    fn oss_signs_for_the_endpoints_region_and_addresses_buckets_by_host() {
        let creds = |endpoint: &str| OssCredentials {
            storage_endpoint: endpoint.to_string(),
            access_key_id: "id".to_string(),
            access_key_secret: "secret".to_string(),
        };
        let c = oss_as_s3(creds("oss-eu-central-1.aliyuncs.com")).unwrap();
        assert_eq!(c.region.as_deref(), Some("oss-eu-central-1"));
        assert_eq!(
            c.endpoint.as_deref(),
            Some("https://oss-eu-central-1.aliyuncs.com")
        );
        assert_eq!(c.force_path_style, Some(false));
        let c = oss_as_s3(creds("https://oss-cn-hangzhou-internal.aliyuncs.com")).unwrap();
        assert_eq!(c.region.as_deref(), Some("oss-cn-hangzhou"));
        let c = oss_as_s3(creds("http://127.0.0.1:9000")).unwrap();
        assert_eq!((c.region, c.force_path_style), (None, Some(true)));
        let tmp = tempfile::tempdir().unwrap();
        let secret = tempfile::tempdir().unwrap();
        for (k, v) in [
            ("storageEndpoint", "oss-eu-central-1.aliyuncs.com"),
            ("accessKeyID", "id"),
            ("accessKeySecret", "secret"),
        ] {
            std::fs::write(secret.path().join(k), v).unwrap();
        }
        let b = open(
            &spec("alicloud", Some("bkt")),
            &opts(tmp.path(), Some(secret.path())),
        )
        .unwrap();
        assert_eq!(b.provider, StorageProvider::Oss);
        assert_eq!(
            b.description,
            "s3://bkt/etcd-main at https://oss-eu-central-1.aliyuncs.com"
        );
    }

    #[test]
    fn endpoint_override_means_path_style_with_http_allowed() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = spec("aws", Some("bkt"));
        s.endpoint_override = Some("http://127.0.0.1:9000/".to_string());
        let b = open(&s, &opts(tmp.path(), None)).unwrap();
        assert_eq!(b.description, "s3://bkt/etcd-main at http://127.0.0.1:9000");
        s.endpoint_override = Some("127.0.0.1:9000".to_string());
        let b = open(&s, &opts(tmp.path(), None)).unwrap();
        assert_eq!(
            b.description,
            "s3://bkt/etcd-main at https://127.0.0.1:9000"
        );
        s.endpoint_override = Some("ftp://127.0.0.1:9000".to_string());
        let e = open(&s, &opts(tmp.path(), None)).err().unwrap();
        assert!(e.to_string().contains("endpointOverride"), "{e}");
    }

    #[test]
    fn misconfiguration_is_reported_with_the_field() {
        let tmp = tempfile::tempdir().unwrap();
        let o = opts(tmp.path(), None);
        let cases = [
            (spec("aws", None), "container"),
            (
                spec("Swift", Some("b")),
                "needs spec.backup.store.secretRef",
            ),
            (spec("OSS", Some("b")), "needs spec.backup.store.secretRef"),
            (spec("nope", Some("b")), "unknown"),
            (spec("Local", Some("../escape")), "plain directory"),
        ];
        for (s, needle) in cases {
            let e = open(&s, &o).err().unwrap();
            assert!(matches!(e, StoreError::Config { .. }), "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
        let mut s = spec("aws", Some("b"));
        s.provider = None;
        assert!(open(&s, &o).err().unwrap().to_string().contains("provider"));
        // A secret directory that does not exist.
        let o = opts(tmp.path(), Some(&tmp.path().join("missing")));
        let e = open(&spec("aws", Some("b")), &o).err().unwrap();
        assert_eq!(e.reason(), "StoreCredentialsInvalid");
    }
}
