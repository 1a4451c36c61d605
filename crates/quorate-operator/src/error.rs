//! What can go wrong in a reconcile: [`Error`] names the object and the action; a
//! [`StepError`] adds the stable `lastErrors` code of the step that failed, declared by that
//! step (each component declares its own), never guessed from the error afterwards.

use quorate_core::components::ComponentError;
use quorate_core::last_operation::ErrorCode;

/// A failed action of a reconcile.
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
    /// The `Etcd` breaks the validation rules; nothing in the cluster is changed.
    #[error("the Etcd is invalid, nothing was changed: {}", .0.to_string().replace('\n', "; "))]
    Invalid(quorate_api::ValidationErrors),
    /// The desired objects could not be built from the `Etcd`.
    #[error("rendering the components: {0}")]
    Render(#[from] ComponentError),
    /// A member pod replaced in a rolling update did not come back; the rollout stops.
    #[error("the rolling update stopped at {pod}: {why}")]
    RolloutStopped {
        /// The pod.
        pod: String,
        /// What its containers and its member report.
        why: String,
    },
    /// The `Etcd` asks for an etcd version change that is refused; nothing is changed.
    #[error("{0}; nothing was changed")]
    EtcdVersion(String),
    /// A `Local` store's Secret names a host directory the operator may not mount.
    #[error(
        "the Secret {secret} names hostPath {path:?}, which is not {allowed}; move the bucket \
         there, or start the operator with --allowed-local-backup-host-path={path}"
    )]
    HostPathRefused {
        /// `namespace/name` of the Secret.
        secret: String,
        /// Its `hostPath`.
        path: String,
        /// The directories allowed, in words.
        allowed: String,
    },
    /// The operator may not use Secrets in this namespace: an admin has not bound the Secrets
    /// grant there (deploy/manifests/09-etcd-namespace-secrets.yaml).
    #[error(
        "the operator may not {action} the Secret {namespace}/{name} (403 Forbidden): it uses \
         Secrets only in the namespaces an admin grants it; grant this one with `kubectl create \
         rolebinding quorate-operator-secrets -n {namespace} \
         --clusterrole=quorate-operator-secrets \
         --serviceaccount=<operator namespace>:quorate-operator`, or add {namespace} to the \
         chart's etcdNamespaces"
    )]
    SecretsNotGranted {
        /// What was being done (`get`, `create`).
        action: &'static str,
        /// The namespace without the grant.
        namespace: String,
        /// The Secret.
        name: String,
    },
    /// The `Etcd` has no name or namespace (never true for an object from the API).
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
        move |source| match source {
            kube::Error::Api(status) if status.code == 403 && kind == "Secret" => {
                Error::SecretsNotGranted {
                    action,
                    namespace,
                    name,
                }
            }
            source => Error::Kube {
                action,
                kind,
                namespace,
                name,
                source: Box::new(source),
            },
        }
    }
}

/// A step of a pass that failed, with the `lastErrors` code that step declares. The code
/// travels with the error, so status, metrics and logs all see the one the step chose.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {error}")]
pub struct StepError {
    /// The step's code.
    pub code: ErrorCode,
    /// What failed.
    #[source]
    pub error: Error,
}

impl StepError {
    /// Tags a failure of the step whose code is `code`: `.map_err(StepError::tag(code))`.
    pub fn tag<E: Into<Error>>(code: ErrorCode) -> impl FnOnce(E) -> StepError {
        move |error| StepError {
            code,
            error: error.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_error_keeps_the_code_of_its_step_and_the_message_of_its_cause() {
        let failed = StepError::tag(ErrorCode::AddFinalizer)(Error::Incomplete("a name"));
        assert_eq!(failed.code, ErrorCode::AddFinalizer);
        assert_eq!(failed.error.to_string(), "the Etcd object lacks a name");
        assert_eq!(
            failed.to_string(),
            "ERR_ADD_FINALIZER: the Etcd object lacks a name"
        );
    }
}
