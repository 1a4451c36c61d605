//! What went wrong with the backup store, sorted into the few cases an operator acts on
//! differently, each with a stable reason for the `BackupReady` condition.

use std::error::Error as StdError;
use std::io;

use object_store::client::{HttpError, HttpErrorKind};
use thiserror::Error;

use crate::credentials::CredentialsError;

/// A failed store operation. `store` is the store's description (see `SnapStore::describe`).
#[derive(Debug, Error)]
pub enum StoreError {
    /// The store spec cannot be used (no provider, unsupported provider, missing container ...).
    #[error("backup store is misconfigured: {detail}")]
    Config {
        /// What is wrong and which field to fix.
        detail: String,
    },
    /// The secret with the store credentials cannot be read or lacks keys.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// No connection to the store (refused, timed out, name not resolved).
    #[error(
        "cannot reach {store} during {op}: {detail}; check the endpoint and that it is reachable from here"
    )]
    Unreachable {
        /// The store.
        store: String,
        /// The operation (`list`, `upload of <key>` ...).
        op: String,
        /// The underlying error.
        detail: String,
    },
    /// The store rejected the credentials or they lack a permission.
    #[error(
        "{store} denied {op}: {detail}; check the credentials in the store secret and the bucket's permissions"
    )]
    AccessDenied {
        /// The store.
        store: String,
        /// The operation.
        op: String,
        /// The underlying error.
        detail: String,
    },
    /// The bucket (container) does not exist.
    #[error(
        "bucket {bucket:?} of {store} does not exist: create it, or fix spec.backup.store.container ({detail})"
    )]
    BucketMissing {
        /// The store.
        store: String,
        /// The bucket.
        bucket: String,
        /// The underlying error.
        detail: String,
    },
    /// The object does not exist (any more).
    #[error(
        "snapshot {path} is not in {store}; it may have been garbage-collected, list the store again"
    )]
    NotFound {
        /// The store.
        store: String,
        /// The object key.
        path: String,
    },
    /// The object's bytes are damaged (truncated, bad checksum, undecodable).
    #[error(
        "snapshot {path} in {store} is corrupt: {detail}; it cannot be used, restore from another snapshot"
    )]
    Corrupt {
        /// The store.
        store: String,
        /// The object key.
        path: String,
        /// What is damaged.
        detail: String,
    },
    /// The store acknowledged an upload but, asked right after, does not hold the object (or
    /// holds another size): the write was lost, so the chain must not count it as stored.
    #[error(
        "{store} acknowledged the upload of {path} but does not hold it: {detail}; the snapshot \
         is not counted as stored and is taken again"
    )]
    NotKept {
        /// The store.
        store: String,
        /// The object key.
        path: String,
        /// What the store answered when asked for the object.
        detail: String,
    },
    /// The snapshot body handed to an upload failed.
    #[error("upload of {path} to {store} stopped because its data failed: {source}")]
    Source {
        /// The store.
        store: String,
        /// The object key.
        path: String,
        /// The error of the body stream.
        source: io::Error,
    },
    /// An encrypted object cannot be written or read with the keys at hand, or was tampered
    /// with.
    #[error(transparent)]
    Encryption(#[from] crate::encryption::EncryptionError),
    /// Any other failure of the store.
    #[error("{op} on {store} failed: {detail}")]
    Other {
        /// The store.
        store: String,
        /// The operation.
        op: String,
        /// The underlying error.
        detail: String,
    },
}

impl StoreError {
    /// A stable, CamelCase reason for conditions and `lastErrors` (e.g. `BackupReady=False`).
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Config { .. } => "StoreMisconfigured",
            StoreError::Credentials(_) => "StoreCredentialsInvalid",
            StoreError::Unreachable { .. } => "StoreUnreachable",
            StoreError::AccessDenied { .. } => "StoreAccessDenied",
            StoreError::BucketMissing { .. } => "StoreBucketMissing",
            StoreError::NotFound { .. } => "SnapshotNotFound",
            StoreError::Corrupt { .. } => "SnapshotCorrupt",
            StoreError::NotKept { .. } => "SnapshotNotKept",
            StoreError::Source { .. } => "SnapshotSourceFailed",
            StoreError::Encryption(e) => e.reason(),
            StoreError::Other { .. } => "StoreError",
        }
    }

    /// Whether trying again later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable { .. }
                | StoreError::Other { .. }
                | StoreError::Source { .. }
                | StoreError::NotKept { .. }
        )
    }

    /// Recovers the `StoreError` carried by an error of a download stream (see
    /// `SnapStore::download`); other I/O errors become `Other`.
    pub fn from_stream_error(e: io::Error, store: &str, path: &str) -> StoreError {
        if e.get_ref().is_some_and(|inner| inner.is::<StoreError>()) {
            if let Some(Ok(inner)) = e.into_inner().map(|i| i.downcast::<StoreError>()) {
                return *inner;
            }
            return StoreError::Other {
                store: store.to_string(),
                op: format!("download of {path}"),
                detail: "unknown stream error".to_string(),
            };
        }
        StoreError::Other {
            store: store.to_string(),
            op: format!("download of {path}"),
            detail: e.to_string(),
        }
    }
}

/// Where an object-store error happened, for classifying it.
pub(crate) struct Context<'a> {
    /// The store's description.
    pub store: &'a str,
    /// The bucket, if the provider has one.
    pub bucket: &'a str,
    /// The operation, e.g. `list` or `upload of <key>`.
    pub op: String,
    /// The object key the operation was about, if any.
    pub path: Option<&'a str>,
}

/// Texts providers put in their "no such bucket" answers.
const BUCKET_MISSING_MARKERS: &[&str] = &[
    "NoSuchBucket",
    "ContainerNotFound",
    "The specified bucket does not exist",
    "bucket does not exist",
];

/// Texts providers put in their "bad credentials / forbidden" answers.
const ACCESS_DENIED_MARKERS: &[&str] = &[
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "AuthenticationFailed",
    "AuthorizationFailure",
    "InvalidClientTokenId",
    "ExpiredToken",
    "status code: 401",
    "status code: 403",
];

/// Sorts an `object_store` error into a `StoreError`.
pub(crate) fn classify(err: object_store::Error, cx: Context<'_>) -> StoreError {
    let detail = chain_text(&err);
    let store = cx.store.to_string();
    let bucket_missing = BUCKET_MISSING_MARKERS.iter().any(|m| detail.contains(m));
    if bucket_missing {
        return StoreError::BucketMissing {
            store,
            bucket: cx.bucket.to_string(),
            detail,
        };
    }
    match &err {
        object_store::Error::NotFound { path, .. } => {
            return StoreError::NotFound {
                store,
                path: cx.path.map_or_else(|| path.clone(), str::to_string),
            };
        }
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            return StoreError::AccessDenied {
                store,
                op: cx.op,
                detail,
            };
        }
        _ => {}
    }
    if is_unreachable(&err) {
        return StoreError::Unreachable {
            store,
            op: cx.op,
            detail,
        };
    }
    if ACCESS_DENIED_MARKERS.iter().any(|m| detail.contains(m))
        || io_kind(&err) == Some(io::ErrorKind::PermissionDenied)
    {
        return StoreError::AccessDenied {
            store,
            op: cx.op,
            detail,
        };
    }
    StoreError::Other {
        store,
        op: cx.op,
        detail,
    }
}

/// Whether the error chain holds a connection failure (not an answer from the server).
fn is_unreachable(err: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(h) = e.downcast_ref::<HttpError>()
            && matches!(
                h.kind(),
                HttpErrorKind::Connect | HttpErrorKind::Timeout | HttpErrorKind::Interrupted
            )
        {
            return true;
        }
        if let Some(io) = e.downcast_ref::<io::Error>()
            && matches!(
                io.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The kind of the first `io::Error` in the chain.
fn io_kind(err: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cur = e.source();
    }
    None
}

/// The error and its sources joined, without repeating a source its parent already shows.
pub(crate) fn chain_text(err: &(dyn StdError + 'static)) -> String {
    let mut text = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        cur = e.source();
    }
    text
}
