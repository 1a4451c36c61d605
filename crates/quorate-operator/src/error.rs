//! What can go wrong in a reconcile, each naming the object and the action, and each mapped to
//! a stable `lastErrors` code.

use quorate_core::components::ComponentError;
use quorate_core::last_operation::ErrorCode;

/// A failed reconcile step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action} {kind} {namespace}/{name}: {source}")]
    Kube {
        /// What was being done (`apply`, `delete`, `get`, ...).
        action: &'static str,
        /// The object's kind.
        kind: String,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The cause (boxed: `kube::Error` is large and errors travel through every step).
        #[source]
        source: Box<kube::Error>,
    },
    /// The desired objects could not be built from the `Etcd`.
    #[error("rendering the components: {0}")]
    Render(#[from] ComponentError),
    /// The `Etcd` has no name, namespace or uid (never true for an object from the API).
    #[error("the Etcd object lacks {0}")]
    Incomplete(&'static str),
}

impl Error {
    /// A failed API call on `kind` `namespace/name`.
    pub fn kube(
        action: &'static str,
        kind: impl Into<String>,
        namespace: &str,
        name: &str,
    ) -> impl FnOnce(kube::Error) -> Error {
        let kind = kind.into();
        let (namespace, name) = (namespace.to_string(), name.to_string());
        move |source| Error::Kube {
            action,
            kind,
            namespace,
            name,
            source: Box::new(source),
        }
    }

    /// The `lastErrors` code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Kube { kind, .. } => code_for_kind(kind),
            Error::Render(_) | Error::Incomplete(_) => ErrorCode::SyncStatefulSet,
        }
    }

    /// Whether the API said the object is not there.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if matches!(**source, kube::Error::Api(ref s) if s.code == 404))
    }
}

/// The sync error code for a component kind.
pub fn code_for_kind(kind: &str) -> ErrorCode {
    match kind {
        "ServiceAccount" => ErrorCode::SyncServiceAccount,
        "Role" => ErrorCode::SyncRole,
        "RoleBinding" => ErrorCode::SyncRoleBinding,
        "Lease" => ErrorCode::SyncMemberLease,
        "PodDisruptionBudget" => ErrorCode::SyncPodDisruptionBudget,
        "Service" => ErrorCode::SyncClientService,
        "ConfigMap" => ErrorCode::SyncConfigMap,
        _ => ErrorCode::SyncStatefulSet,
    }
}
