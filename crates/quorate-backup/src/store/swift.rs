//! OpenStack Swift as an [`ObjectStore`], so Swift buckets go through the same snapshot code as
//! every other provider. `object_store` has no Swift client and the `openstack` crate brings its
//! own HTTP stack without an `ObjectStore`, so this speaks the handful of Swift requests needed
//! (authenticate, list with `marker` pagination, GET/HEAD/PUT/DELETE an object) over
//! `object_store`'s own HTTP client: the same TLS, timeouts and connection errors as the other
//! stores.
//!
//! Authentication is Keystone v3 (password or application credential, from druid's Secret keys,
//! as etcd-backup-restore authenticates through gophercloud), or Swift's v1 auth (tempauth)
//! when `authURL` ends in `/v1.0`. A token the server stops accepting (401) is renewed once.
//!
//! Large objects are written as etcd-backup-restore writes them: segments
//! `<key>/0000000001`, `<key>/0000000002`, … and a zero-byte manifest `<key>` carrying
//! `X-Object-Manifest: <container>/<key>/` (a Dynamic Large Object), so etcd-backup-restore
//! reads them with a plain GET and deletes them as its own (it lists the segments by name).
//! Before the manifest is written, the container listing must show every segment with its
//! size: a DLO is assembled from that listing. Deleting an object deletes its segments first.

use std::fmt;
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, NaiveDateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use http::header::{CONTENT_LENGTH, CONTENT_RANGE, ETAG, LAST_MODIFIED, RANGE};
use http::{HeaderMap, Method, Request, StatusCode};
use object_store::client::{
    HttpClient, HttpConnector, HttpRequestBody, HttpResponse, ReqwestConnector,
};
use object_store::path::Path;
use object_store::{
    Attributes, ClientOptions, CopyMode, CopyOptions, GetOptions, GetRange, GetResult,
    GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};
use serde::Deserialize;
use tokio::sync::Mutex;
use url::Url;

use crate::credentials::{SwiftAuth, SwiftCredentials};

/// The name `object_store` errors carry for this store.
const STORE: &str = "Swift";
/// Retries of a request that failed to connect or got a 5xx answer.
const MAX_RETRIES: u32 = 3;
/// Digits of a segment number, as etcd-backup-restore names segments (`%010d`).
const SEGMENT_DIGITS: usize = 10;

/// A failed Swift or Keystone request: what was asked, what came back.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {status} {body}")]
struct SwiftError {
    what: String,
    status: StatusCode,
    body: String,
}

/// A Swift answer that could not be understood.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Malformed(String);

fn generic(e: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: Box::new(e),
    }
}

/// An authenticated session: where the account's objects are and the token that opens them
/// (no `Debug`: the token is a credential).
struct Session {
    storage_url: Url,
    token: String,
}

struct Inner {
    client: HttpClient,
    creds: SwiftCredentials,
    container: String,
    session: Mutex<Option<Arc<Session>>>,
    /// Entries asked for per listing page; `None` lets the server choose (its
    /// `container_listing_limit`, which it refuses to be asked to exceed).
    page_limit: Option<usize>,
}

/// A Swift container as an [`ObjectStore`].
#[derive(Clone)]
pub(crate) struct SwiftStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for SwiftStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SwiftStore")
            .field("container", &self.inner.container)
            .field("creds", &self.inner.creds)
            .finish()
    }
}

impl fmt::Display for SwiftStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Swift({} at {})",
            self.inner.container, self.inner.creds.auth_url
        )
    }
}

impl SwiftStore {
    /// A store for `container`, authenticating lazily (on the first request) with `creds`.
    pub(crate) fn new(
        creds: SwiftCredentials,
        container: &str,
        options: &ClientOptions,
    ) -> object_store::Result<SwiftStore> {
        let client = ReqwestConnector::default().connect(options)?;
        Ok(SwiftStore {
            inner: Arc::new(Inner {
                client,
                creds,
                container: container.to_string(),
                session: Mutex::new(None),
                page_limit: None,
            }),
        })
    }

    /// The same store listing `limit` entries per page (tests make pagination visible).
    #[cfg(test)]
    fn with_page_limit(creds: SwiftCredentials, container: &str, limit: usize) -> SwiftStore {
        let mut store = SwiftStore::new(
            creds,
            container,
            &ClientOptions::new().with_allow_http(true),
        )
        .expect("a client");
        Arc::get_mut(&mut store.inner)
            .expect("not shared yet")
            .page_limit = Some(limit);
        store
    }
}

/// Keystone v3's token answer: only the catalog is read.
#[derive(Deserialize)]
struct TokenAnswer {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
}

#[derive(Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<CatalogEndpoint>,
}

#[derive(Deserialize)]
struct CatalogEndpoint {
    interface: String,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    region_id: Option<String>,
    url: String,
}

/// One entry of a JSON container listing.
#[derive(Deserialize)]
struct Listed {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    subdir: Option<String>,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    hash: Option<String>,
    #[serde(default)]
    last_modified: Option<String>,
}

/// Whether `auth_url` is Swift's own v1 auth (tempauth) rather than Keystone.
fn is_v1_auth(auth_url: &Url) -> bool {
    let path = auth_url.path().trim_end_matches('/');
    path.ends_with("/v1.0") || path.ends_with("/auth/v1")
}

/// Keystone's token URL for `auth_url` (`…/v3` or the bare service root).
fn keystone_tokens_url(auth_url: &Url) -> Result<Url, object_store::Error> {
    let path = auth_url.path().trim_end_matches('/').to_string();
    if path.ends_with("/v2.0") {
        return Err(generic(Malformed(format!(
            "authURL {auth_url} is Keystone v2.0, which is gone; use the v3 URL (…/v3)"
        ))));
    }
    let mut url = auth_url.clone();
    if path.ends_with("/v3") {
        url.set_path(&format!("{path}/auth/tokens"));
    } else {
        url.set_path(&format!("{path}/v3/auth/tokens"));
    }
    Ok(url)
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether a failed attempt is worth another: no connection, or a server error.
fn retryable(result: &Result<HttpResponse, object_store::client::HttpError>) -> bool {
    match result {
        Ok(r) => r.status().is_server_error(),
        Err(e) => matches!(
            e.kind(),
            object_store::client::HttpErrorKind::Connect
                | object_store::client::HttpErrorKind::Request
                | object_store::client::HttpErrorKind::Interrupted
        ),
    }
}

impl Inner {
    /// Sends a request built by `build` (called again for each attempt), retrying connection
    /// failures and 5xx answers a bounded number of times.
    async fn send_raw(
        &self,
        build: &(dyn Fn() -> Request<HttpRequestBody> + Send + Sync),
    ) -> Result<HttpResponse, object_store::Error> {
        let mut attempt = 0;
        loop {
            let result = self.client.execute(build()).await;
            if attempt < MAX_RETRIES && retryable(&result) {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                continue;
            }
            return result.map_err(generic);
        }
    }

    async fn session(&self) -> Result<Arc<Session>, object_store::Error> {
        let mut guard = self.session.lock().await;
        if let Some(s) = guard.as_ref() {
            return Ok(s.clone());
        }
        let s = Arc::new(self.authenticate().await?);
        *guard = Some(s.clone());
        Ok(s)
    }

    /// Forgets `stale` (a token the server refused), unless another request already renewed it.
    async fn forget(&self, stale: &Arc<Session>) {
        let mut guard = self.session.lock().await;
        if guard.as_ref().is_some_and(|s| Arc::ptr_eq(s, stale)) {
            *guard = None;
        }
    }

    async fn authenticate(&self) -> Result<Session, object_store::Error> {
        let creds = &self.creds;
        let auth_url = Url::parse(&creds.auth_url).map_err(|e| {
            generic(Malformed(format!(
                "authURL {:?} is not a URL ({e}); write it like https://keystone.example:5000/v3",
                creds.auth_url
            )))
        })?;
        if is_v1_auth(&auth_url) {
            return self.authenticate_v1(&auth_url).await;
        }
        let tokens = keystone_tokens_url(&auth_url)?;
        let identity = match &creds.auth {
            SwiftAuth::Password { username, password } => serde_json::json!({
                "methods": ["password"],
                "password": {"user": {
                    "name": username,
                    "domain": {"name": creds.domain_name},
                    "password": password,
                }},
            }),
            SwiftAuth::ApplicationCredential { id, secret, .. } => serde_json::json!({
                "methods": ["application_credential"],
                "application_credential": {"id": id, "secret": secret},
            }),
        };
        let mut auth = serde_json::json!({"identity": identity});
        if matches!(creds.auth, SwiftAuth::Password { .. }) {
            auth["scope"] = serde_json::json!({"project": {
                "name": creds.tenant_name,
                "domain": {"name": creds.domain_name},
            }});
        }
        let body = Bytes::from(serde_json::json!({ "auth": auth }).to_string());
        let response = self
            .send_raw(&|| {
                Request::builder()
                    .method(Method::POST)
                    .uri(tokens.as_str())
                    .header("Content-Type", "application/json")
                    .body(HttpRequestBody::from(body.clone()))
                    .expect("a valid request")
            })
            .await?;
        let status = response.status();
        let token = header_str(response.headers(), "x-subject-token").map(str::to_string);
        let text = response.into_body().bytes().await.map_err(generic)?;
        if !status.is_success() {
            return Err(auth_refused(
                format!("Keystone v3 authentication at {tokens}"),
                status,
                &text,
            ));
        }
        let token = token.ok_or_else(|| {
            generic(Malformed(format!(
                "Keystone at {tokens} answered {status} without an X-Subject-Token header"
            )))
        })?;
        let answer: TokenAnswer = serde_json::from_slice(&text).map_err(|e| {
            generic(Malformed(format!(
                "Keystone at {tokens} answered a token that is not JSON ({e})"
            )))
        })?;
        // etcd-backup-restore picks the region from OS_REGION_NAME; the secret's `region` wins here.
        let region = creds.region.clone().or_else(|| {
            std::env::var("OS_REGION_NAME")
                .ok()
                .filter(|r| !r.is_empty())
        });
        let endpoint = answer
            .token
            .catalog
            .iter()
            .filter(|e| e.kind == "object-store")
            .flat_map(|e| e.endpoints.iter())
            .filter(|e| e.interface == "public")
            .find(|e| {
                region.as_deref().is_none_or(|r| {
                    e.region.as_deref() == Some(r) || e.region_id.as_deref() == Some(r)
                })
            })
            .ok_or_else(|| {
                generic(Malformed(format!(
                    "Keystone's catalog has no public object-store endpoint{}; check the secret's region and that Swift is registered in Keystone",
                    region.map(|r| format!(" in region {r:?}")).unwrap_or_default()
                )))
            })?;
        let storage_url = Url::parse(&endpoint.url).map_err(|e| {
            generic(Malformed(format!(
                "Keystone's object-store endpoint {:?} is not a URL ({e})",
                endpoint.url
            )))
        })?;
        Ok(Session { storage_url, token })
    }

    /// Swift's v1 auth: `X-Auth-User: <tenantName>:<username>`, `X-Auth-Key: <password>`.
    async fn authenticate_v1(&self, auth_url: &Url) -> Result<Session, object_store::Error> {
        let SwiftAuth::Password { username, password } = &self.creds.auth else {
            return Err(generic(Malformed(format!(
                "authURL {auth_url} is Swift's v1 auth, which takes username and password, not an application credential"
            ))));
        };
        let user = format!("{}:{username}", self.creds.tenant_name);
        let response = self
            .send_raw(&|| {
                Request::builder()
                    .method(Method::GET)
                    .uri(auth_url.as_str())
                    .header("X-Auth-User", &user)
                    .header("X-Auth-Key", password)
                    .body(HttpRequestBody::empty())
                    .expect("a valid request")
            })
            .await?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.into_body().bytes().await.map_err(generic)?;
        if !status.is_success() {
            return Err(auth_refused(
                format!("Swift v1 authentication at {auth_url}"),
                status,
                &text,
            ));
        }
        let (Some(url), Some(token)) = (
            header_str(&headers, "x-storage-url"),
            header_str(&headers, "x-auth-token"),
        ) else {
            return Err(generic(Malformed(format!(
                "Swift v1 auth at {auth_url} answered {status} without X-Storage-Url and X-Auth-Token"
            ))));
        };
        let storage_url = Url::parse(url).map_err(|e| {
            generic(Malformed(format!(
                "Swift's storage URL {url:?} is not a URL ({e})"
            )))
        })?;
        Ok(Session {
            storage_url,
            token: token.to_string(),
        })
    }

    /// The URL of the container, or of `key` in it, with `query` appended.
    fn url(&self, session: &Session, key: Option<&str>, query: &[(&str, &str)]) -> Url {
        let mut url = session.storage_url.clone();
        {
            let mut segments = url
                .path_segments_mut()
                .expect("an http(s) storage URL has a path");
            segments.pop_if_empty().push(&self.container);
            if let Some(key) = key {
                segments.extend(key.split('/'));
            }
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    /// Sends an authenticated request to the container (`key: None`) or an object; a refused
    /// token is renewed and the request sent once more.
    async fn send(
        &self,
        method: Method,
        key: Option<&str>,
        query: &[(&str, &str)],
        headers: &[(&str, String)],
        body: Option<PutPayload>,
    ) -> Result<HttpResponse, object_store::Error> {
        let mut renewed = false;
        loop {
            let session = self.session().await?;
            let url = self.url(&session, key, query);
            let response = self
                .send_raw(&|| {
                    let mut r = Request::builder()
                        .method(method.clone())
                        .uri(url.as_str())
                        .header("X-Auth-Token", &session.token);
                    for (name, value) in headers {
                        r = r.header(*name, value);
                    }
                    let body = match &body {
                        Some(p) => HttpRequestBody::from(p.clone()),
                        None => HttpRequestBody::empty(),
                    };
                    if method == Method::PUT {
                        r = r.header(CONTENT_LENGTH, body.content_length());
                    }
                    r.body(body).expect("a valid request")
                })
                .await?;
            if response.status() == StatusCode::UNAUTHORIZED && !renewed {
                self.forget(&session).await;
                renewed = true;
                continue;
            }
            return Ok(response);
        }
    }

    /// Turns an unsuccessful answer about `key` into `object_store`'s error.
    async fn failure(
        &self,
        what: String,
        key: &str,
        response: HttpResponse,
    ) -> object_store::Error {
        let status = response.status();
        let body = response
            .into_body()
            .bytes()
            .await
            .map(|b| snippet(&b))
            .unwrap_or_default();
        let source = Box::new(SwiftError { what, status, body });
        let path = key.to_string();
        match status {
            StatusCode::NOT_FOUND => object_store::Error::NotFound { path, source },
            StatusCode::UNAUTHORIZED => object_store::Error::Unauthenticated { path, source },
            StatusCode::FORBIDDEN => object_store::Error::PermissionDenied { path, source },
            StatusCode::PRECONDITION_FAILED => object_store::Error::Precondition { path, source },
            StatusCode::NOT_MODIFIED => object_store::Error::NotModified { path, source },
            _ => object_store::Error::Generic {
                store: STORE,
                source,
            },
        }
    }

    /// The error for a container that is not there (which Swift answers with a plain 404).
    fn container_missing(&self, status: StatusCode) -> object_store::Error {
        generic(SwiftError {
            what: format!(
                "ContainerNotFound: the Swift container {:?} does not exist",
                self.container
            ),
            status,
            body: "create it (swift post <container>) or fix spec.backup.store.container"
                .to_string(),
        })
    }

    /// One page of the container listing after `marker`.
    async fn list_page(
        &self,
        prefix: &str,
        delimiter: bool,
        marker: &str,
    ) -> Result<Vec<Listed>, object_store::Error> {
        let limit = self.page_limit.map(|l| l.to_string());
        let mut query = vec![("format", "json"), ("prefix", prefix)];
        if let Some(limit) = &limit {
            query.push(("limit", limit));
        }
        if delimiter {
            query.push(("delimiter", "/"));
        }
        if !marker.is_empty() {
            query.push(("marker", marker));
        }
        let response = self.send(Method::GET, None, &query, &[], None).await?;
        match response.status() {
            StatusCode::NO_CONTENT => Ok(Vec::new()),
            StatusCode::NOT_FOUND => Err(self.container_missing(StatusCode::NOT_FOUND)),
            s if s.is_success() => {
                let bytes = response.into_body().bytes().await.map_err(generic)?;
                serde_json::from_slice(&bytes).map_err(|e| {
                    generic(Malformed(format!(
                        "the listing of container {:?} is not Swift's JSON ({e})",
                        self.container
                    )))
                })
            }
            _ => Err(self
                .failure(
                    format!("list of container {:?}", self.container),
                    prefix,
                    response,
                )
                .await),
        }
    }

    /// Every entry under `prefix` (pages followed by `marker` until an empty page).
    async fn list_all(
        &self,
        prefix: &str,
        delimiter: bool,
    ) -> Result<Vec<Listed>, object_store::Error> {
        let mut all = Vec::new();
        let mut marker = String::new();
        loop {
            let page = self.list_page(prefix, delimiter, &marker).await?;
            let Some(last) = page.last() else {
                return Ok(all);
            };
            let next = last
                .name
                .clone()
                .or_else(|| last.subdir.clone())
                .unwrap_or_default();
            if next <= marker {
                return Err(generic(Malformed(format!(
                    "the listing of container {:?} did not advance past {marker:?}",
                    self.container
                ))));
            }
            marker = next;
            all.extend(page);
        }
    }

    /// An object's metadata from a listing entry; a zero-byte entry may be a large object's
    /// manifest (listed with 0 bytes), so its size is asked with a HEAD.
    async fn meta(&self, entry: Listed) -> Result<Option<ObjectMeta>, object_store::Error> {
        let Some(name) = entry.name else {
            return Ok(None);
        };
        let location =
            Path::parse(&name).map_err(|source| object_store::Error::InvalidPath { source })?;
        if entry.bytes == 0 {
            return match self.head(&name).await {
                Ok(meta) => Ok(Some(meta)),
                // Deleted since the listing.
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            };
        }
        Ok(Some(ObjectMeta {
            location,
            last_modified: entry
                .last_modified
                .as_deref()
                .and_then(parse_listing_time)
                .unwrap_or_default(),
            size: entry.bytes,
            e_tag: entry.hash,
            version: None,
        }))
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, object_store::Error> {
        let response = self.send(Method::HEAD, Some(key), &[], &[], None).await?;
        if !response.status().is_success() {
            return Err(self.failure(format!("HEAD of {key}"), key, response).await);
        }
        meta_from_headers(key, response.headers(), None)
    }

    async fn put(
        &self,
        key: &str,
        payload: PutPayload,
        headers: &[(&str, String)],
    ) -> Result<PutResult, object_store::Error> {
        let response = self
            .send(Method::PUT, Some(key), &[], headers, Some(payload))
            .await?;
        match response.status() {
            s if s.is_success() => Ok(PutResult {
                e_tag: header_str(response.headers(), "etag").map(str::to_string),
                version: None,
                extensions: Default::default(),
            }),
            StatusCode::NOT_FOUND => Err(self.container_missing(StatusCode::NOT_FOUND)),
            StatusCode::PRECONDITION_FAILED => Err(object_store::Error::AlreadyExists {
                path: key.to_string(),
                source: Box::new(SwiftError {
                    what: format!("create of {key}"),
                    status: StatusCode::PRECONDITION_FAILED,
                    body: "it exists".to_string(),
                }),
            }),
            _ => Err(self.failure(format!("PUT of {key}"), key, response).await),
        }
    }

    async fn delete_one(&self, key: &str) -> Result<(), object_store::Error> {
        let response = self.send(Method::DELETE, Some(key), &[], &[], None).await?;
        if response.status().is_success() {
            return Ok(());
        }
        Err(self
            .failure(format!("DELETE of {key}"), key, response)
            .await)
    }

    /// Deletes `key` and, first, its large-object segments (`<key>/<10 digits>`), as
    /// etcd-backup-restore does.
    async fn delete(&self, key: &str) -> Result<(), object_store::Error> {
        let segment_prefix = format!("{key}/");
        for entry in self.list_all(&segment_prefix, true).await? {
            let Some(name) = entry.name else { continue };
            if is_segment_name(&name[segment_prefix.len()..]) {
                match self.delete_one(&name).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.delete_one(key).await
    }
}

/// Whether `rest` is a segment number as etcd-backup-restore writes it.
fn is_segment_name(rest: &str) -> bool {
    rest.len() == SEGMENT_DIGITS && rest.bytes().all(|b| b.is_ascii_digit())
}

/// The error for credentials the auth service refused (or another auth failure).
fn auth_refused(what: String, status: StatusCode, body: &[u8]) -> object_store::Error {
    let source = Box::new(SwiftError {
        what: format!(
            "{what} refused the credentials in the secret (check authURL, domainName, tenantName, username/password or the application credential)"
        ),
        status,
        body: snippet(body),
    });
    match status {
        StatusCode::UNAUTHORIZED => object_store::Error::Unauthenticated {
            path: String::new(),
            source,
        },
        StatusCode::FORBIDDEN => object_store::Error::PermissionDenied {
            path: String::new(),
            source,
        },
        _ => object_store::Error::Generic {
            store: STORE,
            source,
        },
    }
}

/// At most 300 characters of an answer's body, for error messages.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Swift's listing time (`2024-01-02T03:04:05.123456`, UTC).
fn parse_listing_time(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc())
}

/// Metadata from a GET/HEAD answer; `total` is the object's size when the answer is a range.
fn meta_from_headers(
    key: &str,
    headers: &HeaderMap,
    total: Option<u64>,
) -> Result<ObjectMeta, object_store::Error> {
    let size = match total {
        Some(t) => t,
        None => header_str(headers, CONTENT_LENGTH.as_str())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                generic(Malformed(format!(
                    "Swift answered for {key} without a Content-Length"
                )))
            })?,
    };
    Ok(ObjectMeta {
        location: Path::parse(key).map_err(|source| object_store::Error::InvalidPath { source })?,
        last_modified: header_str(headers, LAST_MODIFIED.as_str())
            .and_then(|v| DateTime::parse_from_rfc2822(v).ok())
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default(),
        size,
        e_tag: header_str(headers, ETAG.as_str()).map(str::to_string),
        version: None,
    })
}

/// `Content-Range: bytes a-b/total` as `(a..b+1, total)`.
fn parse_content_range(text: &str) -> Option<(std::ops::Range<u64>, u64)> {
    let rest = text.strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b, total): (u64, u64, u64) = (a.parse().ok()?, b.parse().ok()?, total.parse().ok()?);
    Some((a..b + 1, total))
}

fn range_header(range: &GetRange) -> String {
    match range {
        GetRange::Bounded(r) => format!("bytes={}-{}", r.start, r.end.saturating_sub(1)),
        GetRange::Offset(o) => format!("bytes={o}-"),
        GetRange::Suffix(n) => format!("bytes=-{n}"),
    }
}

/// The listing prefix for `object_store`'s `prefix` (whole path segments: `a/b` lists `a/b/…`).
fn list_prefix(prefix: Option<&Path>) -> String {
    match prefix.map(|p| p.as_ref()) {
        None | Some("") => String::new(),
        Some(p) => format!("{p}/"),
    }
}

#[async_trait]
impl ObjectStore for SwiftStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let headers = match opts.mode {
            PutMode::Overwrite => vec![],
            PutMode::Create => vec![("If-None-Match", "*".to_string())],
            PutMode::Update(_) => {
                return Err(object_store::Error::NotImplemented {
                    operation: "put_opts with PutMode::Update".to_string(),
                    implementer: STORE.to_string(),
                });
            }
        };
        self.inner.put(location.as_ref(), payload, &headers).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Ok(Box::new(SwiftUpload {
            inner: self.inner.clone(),
            key: location.to_string(),
            next_part: 0,
            written: Arc::new(SyncMutex::new(Vec::new())),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let key = location.as_ref();
        let mut headers = Vec::new();
        if let Some(range) = &options.range {
            headers.push((RANGE.as_str(), range_header(range)));
        }
        if let Some(tag) = &options.if_match {
            headers.push(("If-Match", tag.clone()));
        }
        if let Some(tag) = &options.if_none_match {
            headers.push(("If-None-Match", tag.clone()));
        }
        let method = if options.head {
            Method::HEAD
        } else {
            Method::GET
        };
        let response = self
            .inner
            .send(method, Some(key), &[], &headers, None)
            .await?;
        let status = response.status();
        if !status.is_success() {
            return Err(self
                .inner
                .failure(format!("GET of {key}"), key, response)
                .await);
        }
        let content_range = (status == StatusCode::PARTIAL_CONTENT)
            .then(|| {
                header_str(response.headers(), CONTENT_RANGE.as_str()).and_then(parse_content_range)
            })
            .flatten();
        let meta = meta_from_headers(key, response.headers(), content_range.as_ref().map(|c| c.1))?;
        let range = content_range.map_or(0..meta.size, |c| c.0);
        let payload = if options.head {
            stream::empty().boxed()
        } else {
            response.into_body().bytes_stream().map_err(generic).boxed()
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta,
            range,
            attributes: Attributes::default(),
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = self.inner.clone();
        locations
            .then(move |location| {
                let inner = inner.clone();
                async move {
                    let location = location?;
                    inner.delete(location.as_ref()).await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let prefix = list_prefix(prefix);
        stream::once(async move {
            let entries = inner.list_all(&prefix, false).await?;
            let metas = stream::iter(entries)
                .then(move |entry| {
                    let inner = inner.clone();
                    async move { inner.meta(entry).await }
                })
                .try_filter_map(|m| async move { Ok(m) });
            Ok::<_, object_store::Error>(metas)
        })
        .try_flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let entries = self.inner.list_all(&list_prefix(prefix), true).await?;
        let mut common_prefixes = Vec::new();
        let mut objects = Vec::new();
        for entry in entries {
            if let Some(dir) = &entry.subdir {
                common_prefixes.push(
                    Path::parse(dir.trim_end_matches('/'))
                        .map_err(|source| object_store::Error::InvalidPath { source })?,
                );
            } else if let Some(meta) = self.inner.meta(entry).await? {
                objects.push(meta);
            }
        }
        Ok(ListResult {
            common_prefixes,
            objects,
            extensions: Default::default(),
        })
    }

    /// A server-side copy (`X-Copy-From`). A large object is copied as it is stored: each
    /// segment `<from>/<n>` to `<to>/<n>`, then a manifest naming them (a copy of the manifest
    /// alone would name the source's segments, which go when the source is deleted).
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        let create = options.mode == CopyMode::Create;
        let inner = &self.inner;
        let head = inner.send(Method::HEAD, Some(from), &[], &[], None).await?;
        if !head.status().is_success() {
            return Err(inner.failure(format!("HEAD of {from}"), from, head).await);
        }
        let copy_from = |name: &str| ("X-Copy-From", format!("/{}/{name}", inner.container));
        let mut last = vec![];
        if create {
            last.push(("If-None-Match", "*".to_string()));
        }
        if header_str(head.headers(), "x-object-manifest").is_none() {
            last.push(copy_from(from));
            return inner
                .put(to, PutPayload::default(), &last)
                .await
                .map(|_| ());
        }
        let prefix = format!("{from}/");
        let mut copied = 0;
        for entry in inner.list_all(&prefix, true).await? {
            let Some(name) = entry.name else { continue };
            let rest = &name[prefix.len()..];
            if is_segment_name(rest) {
                inner
                    .put(
                        &format!("{to}/{rest}"),
                        PutPayload::default(),
                        &[copy_from(&name)],
                    )
                    .await?;
                copied += 1;
            }
        }
        if copied == 0 {
            return Err(generic(Malformed(format!(
                "{from} is a large object without segments named {prefix}<number>; cannot copy it"
            ))));
        }
        last.push(("X-Object-Manifest", format!("{}/{to}/", inner.container)));
        inner
            .put(to, PutPayload::default(), &last)
            .await
            .map(|_| ())
    }
}

/// A large object being written as segments; the manifest makes it visible on `complete`.
struct SwiftUpload {
    inner: Arc<Inner>,
    key: String,
    next_part: usize,
    /// `(part number, size)` of every segment written.
    written: Arc<SyncMutex<Vec<(usize, u64)>>>,
}

impl fmt::Debug for SwiftUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SwiftUpload")
            .field("key", &self.key)
            .field("next_part", &self.next_part)
            .finish()
    }
}

fn segment_name(key: &str, part: usize) -> String {
    format!("{key}/{part:0width$}", width = SEGMENT_DIGITS)
}

#[async_trait]
impl MultipartUpload for SwiftUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.next_part += 1;
        let part = self.next_part;
        let inner = self.inner.clone();
        let written = self.written.clone();
        let name = segment_name(&self.key, part);
        Box::pin(async move {
            let size = data.content_length() as u64;
            inner.put(&name, data, &[]).await?;
            written.lock().expect("not poisoned").push((part, size));
            Ok(())
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let mut written = self.written.lock().expect("not poisoned").clone();
        written.sort_unstable();
        if written.len() != self.next_part {
            return Err(generic(Malformed(format!(
                "{} of {} segments of {} were written; not writing the manifest",
                written.len(),
                self.next_part,
                self.key
            ))));
        }
        // A DLO is assembled from the container listing: the manifest goes up only when the
        // listing shows every segment with its size.
        let prefix = format!("{}/", self.key);
        let listed: Vec<(String, u64)> = self
            .inner
            .list_all(&prefix, true)
            .await?
            .into_iter()
            .filter_map(|e| e.name.map(|n| (n, e.bytes)))
            .filter(|(n, _)| is_segment_name(&n[prefix.len()..]))
            .collect();
        let expected: Vec<(String, u64)> = written
            .iter()
            .map(|(part, size)| (segment_name(&self.key, *part), *size))
            .collect();
        if listed != expected {
            return Err(generic(Malformed(format!(
                "the container listing shows {} segment(s) of {} where {} were written (the listing may lag); not writing the manifest",
                listed.len(),
                self.key,
                expected.len()
            ))));
        }
        let manifest = format!("{}/{}", self.inner.container, prefix);
        self.inner
            .put(
                &self.key,
                PutPayload::default(),
                &[("X-Object-Manifest", manifest)],
            )
            .await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        let written = self.written.lock().expect("not poisoned").clone();
        for (part, _) in written {
            match self.inner.delete_one(&segment_name(&self.key, part)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::SecretDir;
    use object_store::ObjectStoreExt;

    /// Listings of more entries than a page hold follow the marker to the end, with and
    /// without a delimiter, against a real Swift.
    #[tokio::test]
    async fn listings_follow_the_marker_across_pages() {
        let Some(swift) = quorate_testkit::SwiftServer::start("pages") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let secret = swift.write_secret(dir.path(), quorate_testkit::SWIFT_KEY);
        let creds = SwiftCredentials::from_dir(&SecretDir::open(secret).unwrap()).unwrap();
        let store = SwiftStore::with_page_limit(creds, "pages", 3);
        let mut names: Vec<String> = (0..7).map(|i| format!("p/v2/o{i}")).collect();
        names.push("p/v2/sub/x".to_string());
        names.push("p/other".to_string());
        for n in &names {
            store
                .put(&Path::from(n.as_str()), PutPayload::from(n.clone()))
                .await
                .unwrap();
        }
        let listed: Vec<String> = store
            .list(Some(&Path::from("p/v2")))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed, names[..8].to_vec());
        let sizes: Vec<u64> = store
            .list(Some(&Path::from("p")))
            .map_ok(|m| m.size)
            .try_collect()
            .await
            .unwrap();
        assert_eq!(sizes.len(), 9);
        assert!(sizes.iter().all(|s| *s >= 7), "{sizes:?}");
        let top = store
            .list_with_delimiter(Some(&Path::from("p/v2")))
            .await
            .unwrap();
        assert_eq!(
            top.objects
                .iter()
                .map(|m| m.location.to_string())
                .collect::<Vec<_>>(),
            names[..7].to_vec()
        );
        assert_eq!(top.common_prefixes, vec![Path::from("p/v2/sub")]);
        // The server holds exactly these, so the listing above lost nothing between pages.
        assert_eq!(swift.names("p/").len(), 9);
    }

    #[test]
    fn auth_urls_and_segment_names() {
        let u = |s| Url::parse(s).unwrap();
        assert!(is_v1_auth(&u("http://127.0.0.1:8080/auth/v1.0")));
        assert!(!is_v1_auth(&u("https://keystone:5000/v3")));
        assert_eq!(
            keystone_tokens_url(&u("https://keystone:5000/v3/"))
                .unwrap()
                .as_str(),
            "https://keystone:5000/v3/auth/tokens"
        );
        assert_eq!(
            keystone_tokens_url(&u("https://keystone:5000"))
                .unwrap()
                .as_str(),
            "https://keystone:5000/v3/auth/tokens"
        );
        assert!(keystone_tokens_url(&u("https://keystone:5000/v2.0")).is_err());
        assert_eq!(segment_name("p/v2/Full-1", 3), "p/v2/Full-1/0000000003");
        assert!(is_segment_name("0000000003"));
        assert!(!is_segment_name("000000003"));
        assert!(!is_segment_name("000000000x"));
        assert_eq!(parse_content_range("bytes 10-19/100"), Some((10..20, 100)));
        assert_eq!(
            parse_listing_time("2024-01-02T03:04:05.123456")
                .unwrap()
                .to_rfc3339(),
            "2024-01-02T03:04:05.123456+00:00"
        );
    }
}
