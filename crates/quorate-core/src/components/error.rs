//! Why the components of an `Etcd` cannot be rendered.

use thiserror::Error;

/// A component could not be built from the `Etcd`. These are faults of the object handed in
/// (an `Etcd` read from the API server always has a name, namespace and uid), not of the spec.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ComponentError {
    /// `metadata.<field>` is empty, but every component needs it (names, namespace, owner
    /// reference).
    #[error(
        "Etcd {name:?} has no metadata.{field}; components are rendered only for an Etcd read \
         from the API server, which always sets it"
    )]
    MissingMetadata {
        /// The missing field: `name`, `namespace` or `uid`.
        field: &'static str,
        /// The name, if known.
        name: String,
    },
    /// A configuration could not be written as text.
    #[error("cannot serialize {what} of Etcd {name:?}: {detail}")]
    Serialize {
        /// What was being written, e.g. `etcd.conf.yaml`.
        what: &'static str,
        /// The `Etcd`.
        name: String,
        /// The serializer's message.
        detail: String,
    },
}
