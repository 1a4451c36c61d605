//! The `Etcd` of a pass, checked once at its start: every later step reads the name and
//! namespace from here instead of unwrapping `metadata` again.

use std::sync::Arc;

use quorate_api::Etcd;

use crate::error::Error;

/// An `Etcd` known to have a name and a namespace.
#[derive(Clone, Debug)]
pub struct ValidatedEtcd {
    etcd: Arc<Etcd>,
    name: String,
    namespace: String,
}

impl ValidatedEtcd {
    /// Checks that `etcd` has a name and a namespace (an object from the API always has).
    pub fn new(etcd: Arc<Etcd>) -> Result<ValidatedEtcd, Error> {
        let namespace = etcd
            .metadata
            .namespace
            .clone()
            .ok_or(Error::Incomplete("a namespace"))?;
        let name = etcd
            .metadata
            .name
            .clone()
            .ok_or(Error::Incomplete("a name"))?;
        Ok(ValidatedEtcd {
            etcd,
            name,
            namespace,
        })
    }

    /// A newer version of the same object (read afresh from the API server); name and
    /// namespace cannot change, so they are not checked again.
    pub fn with_version(&self, newer: Arc<Etcd>) -> ValidatedEtcd {
        ValidatedEtcd {
            etcd: newer,
            ..self.clone()
        }
    }

    /// The object.
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `namespace/name`, as logs and metrics name the cluster.
    pub fn cluster(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn etcd(name: Option<&str>, namespace: Option<&str>) -> Arc<Etcd> {
        let mut etcd = Etcd::new("x", Default::default());
        etcd.metadata = ObjectMeta {
            name: name.map(str::to_string),
            namespace: namespace.map(str::to_string),
            ..ObjectMeta::default()
        };
        Arc::new(etcd)
    }

    #[test]
    fn carries_name_and_namespace() {
        let v = ValidatedEtcd::new(etcd(Some("main"), Some("shoot"))).unwrap();
        assert_eq!((v.name(), v.namespace()), ("main", "shoot"));
        assert_eq!(v.cluster(), "shoot/main");
    }

    #[test]
    fn refuses_an_object_without_name_or_namespace() {
        let no_ns = ValidatedEtcd::new(etcd(Some("main"), None)).unwrap_err();
        assert_eq!(no_ns.to_string(), "the Etcd object lacks a namespace");
        let no_name = ValidatedEtcd::new(etcd(None, Some("shoot"))).unwrap_err();
        assert_eq!(no_name.to_string(), "the Etcd object lacks a name");
    }

    #[test]
    fn a_newer_version_keeps_the_identity() {
        let v = ValidatedEtcd::new(etcd(Some("main"), Some("shoot"))).unwrap();
        let mut newer = (*v.etcd).clone();
        newer.metadata.resource_version = Some("7".into());
        let v = v.with_version(Arc::new(newer));
        assert_eq!(v.cluster(), "shoot/main");
        assert_eq!(v.etcd().metadata.resource_version.as_deref(), Some("7"));
    }
}
