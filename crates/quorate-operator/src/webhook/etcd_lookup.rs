//! Reading the facts about an `Etcd` that component protection depends on. A trait, so the
//! webhook's HTTP handling can be tested with a table instead of an API server.

use std::future::Future;

use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_api::annotations::are_components_protected;

use super::protection::EtcdFacts;

/// The `Etcd` could not be read; the request is refused rather than let through unchecked.
#[derive(Debug, thiserror::Error)]
#[error("cannot read Etcd {namespace}/{name}: {source}")]
pub struct LookupError {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// What the API server (or the connection) said.
    #[source]
    pub source: kube::Error,
}

/// Gets what component protection needs to know about one `Etcd`.
pub trait EtcdLookup: Send + Sync + 'static {
    /// The facts about `namespace/name`; [`EtcdFacts::Missing`] when it does not exist.
    fn etcd_facts(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<EtcdFacts, LookupError>> + Send;
}

/// Reads the `Etcd` from the API server. Only its metadata is fetched, so an `Etcd` whose spec
/// this version cannot decode still gets a decision.
#[derive(Clone)]
pub struct KubeEtcdLookup {
    client: Client,
}

impl KubeEtcdLookup {
    /// Looks `Etcd`s up with `client` (which needs `get` on `etcds.druid.gardener.cloud`).
    pub fn new(client: Client) -> KubeEtcdLookup {
        KubeEtcdLookup { client }
    }
}

impl EtcdLookup for KubeEtcdLookup {
    async fn etcd_facts(&self, namespace: &str, name: &str) -> Result<EtcdFacts, LookupError> {
        let api: Api<Etcd> = Api::namespaced(self.client.clone(), namespace);
        let meta = api
            .get_metadata_opt(name)
            .await
            .map_err(|source| LookupError {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source,
            })?;
        Ok(match meta {
            None => EtcdFacts::Missing,
            Some(m) if m.metadata.deletion_timestamp.is_some() => EtcdFacts::Deleting,
            Some(m) => EtcdFacts::Present {
                protection_disabled: !are_components_protected(m.metadata.annotations.as_ref()),
            },
        })
    }
}
