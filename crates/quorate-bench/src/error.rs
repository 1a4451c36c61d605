//! The benchmark's error: what failed, in words a person running it can act on.

use std::path::Path;

/// Why a benchmark run stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A step failed; the message says which and why.
    #[error("{0}")]
    Failed(String),
    /// A file or process operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An etcd call made through quorate's adapter failed.
    #[error(transparent)]
    Etcd(#[from] quorate_etcd::EtcdError),
    /// An etcd call made directly through etcd-client failed.
    #[error("etcd client: {0}")]
    Client(#[from] etcd_client::Error),
    /// An etcd member started by hand did not become ready.
    #[error(transparent)]
    NotReady(Box<quorate_testkit::NotReady>),
}

impl From<quorate_testkit::NotReady> for BenchError {
    fn from(e: quorate_testkit::NotReady) -> BenchError {
        BenchError::NotReady(Box::new(e))
    }
}

impl BenchError {
    /// A failed step described by `message`.
    pub fn failed(message: impl Into<String>) -> BenchError {
        BenchError::Failed(message.into())
    }

    /// Wraps an I/O error with the action and path it concerned.
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BenchError {
        let path = path.display().to_string();
        move |source| BenchError::Io {
            action,
            path,
            source,
        }
    }
}

/// Result with [`BenchError`].
pub type Result<T> = std::result::Result<T, BenchError>;
