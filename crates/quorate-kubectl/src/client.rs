//! The connection as kubectl makes it: `--kubeconfig` (else `KUBECONFIG`, else
//! `~/.kube/config`, else the pod's service account), `--context`, and the namespace from
//! `-n`, else the context's, else `default`.

use crate::{KubeFlags, KubectlError};
use kube::api::{ListParams, Patch, PatchParams};
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use quorate_api::Etcd;

/// A client and the Etcds a command works on.
#[derive(Clone)]
pub struct Target {
    /// The API client.
    pub client: Client,
    /// The namespace of named objects.
    pub namespace: String,
    /// `-A`.
    pub all_namespaces: bool,
    /// `-l`.
    pub selector: Option<String>,
}

impl Target {
    /// Connects as kubectl would with these flags.
    pub async fn connect(flags: &KubeFlags) -> Result<Target, KubectlError> {
        let options = KubeConfigOptions {
            context: flags.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &flags.kubeconfig {
            Some(path) => {
                Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &options).await?
            }
            None => match Kubeconfig::read() {
                Ok(kubeconfig) => Config::from_custom_kubeconfig(kubeconfig, &options).await?,
                Err(kubeconfig) if flags.context.is_none() => {
                    Config::incluster().map_err(|in_cluster| KubectlError::NoConfig {
                        kubeconfig,
                        in_cluster,
                    })?
                }
                Err(e) => return Err(e.into()),
            },
        };
        let namespace = flags
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(KubectlError::Client)?;
        Ok(Target {
            client,
            namespace,
            all_namespaces: flags.all_namespaces,
            selector: flags.selector.clone(),
        })
    }

    /// The Etcds of the namespace.
    pub fn etcds(&self) -> Api<Etcd> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// One Etcd of the namespace, or [`KubectlError::NotFound`].
    pub async fn etcd(&self, name: &str) -> Result<Etcd, KubectlError> {
        self.etcds()
            .get_opt(name)
            .await
            .map_err(|source| KubectlError::Api {
                verb: "get",
                what: format!("etcd {}/{name}", self.namespace),
                source,
            })?
            .ok_or_else(|| KubectlError::NotFound {
                namespace: self.namespace.clone(),
                name: name.to_string(),
            })
    }

    /// The Etcds a command on several works on: those named (in the namespace), else those
    /// `-l` selects in the namespace or, with `-A`, in every namespace. Nothing named and no
    /// selection is refused: a command that changes objects never means "all" by default.
    pub async fn selected(
        &self,
        names: &[String],
        changes: bool,
    ) -> Result<Vec<Etcd>, KubectlError> {
        if !names.is_empty() {
            if self.all_namespaces {
                return Err(KubectlError::Usage(
                    "a name cannot be combined with -A: name Etcds in one namespace (-n), or \
                     select them with -l"
                        .into(),
                ));
            }
            let mut items = Vec::new();
            for name in names {
                items.push(self.etcd(name).await?);
            }
            return Ok(items);
        }
        if changes && self.selector.is_none() && !self.all_namespaces {
            return Err(KubectlError::Usage(
                "name the Etcds to change, or select them with -l SELECTOR or -A".into(),
            ));
        }
        let api: Api<Etcd> = if self.all_namespaces {
            Api::all(self.client.clone())
        } else {
            self.etcds()
        };
        let mut params = ListParams::default();
        if let Some(selector) = &self.selector {
            params = params.labels(selector);
        }
        let list = api
            .list(&params)
            .await
            .map_err(|source| KubectlError::Api {
                verb: "list",
                what: if self.all_namespaces {
                    "etcds in every namespace".to_string()
                } else {
                    format!("etcds in namespace {}", self.namespace)
                },
                source,
            })?;
        let mut items = list.items;
        items.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(items)
    }

    /// Sets (`Some`) or removes (`None`) annotations on one Etcd with a merge patch (nothing
    /// else of the object is touched); returns the object as stored.
    pub async fn annotate(
        &self,
        etcd: &Etcd,
        changes: &[(&str, Option<&str>)],
    ) -> Result<Etcd, KubectlError> {
        let namespace = etcd
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(&self.namespace);
        let name = etcd.metadata.name.as_deref().unwrap_or_default();
        let annotations: serde_json::Map<String, serde_json::Value> = changes
            .iter()
            .map(|(key, value)| (key.to_string(), serde_json::json!(value)))
            .collect();
        let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
        let api: Api<Etcd> = Api::namespaced(self.client.clone(), namespace);
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| KubectlError::Api {
                verb: "patch",
                what: format!("etcd {namespace}/{name}"),
                source,
            })
    }
}

/// A fresh request ID for an annotation the agents carry out once per value
/// (`<what>-<unix milliseconds>`, as local mode writes it).
pub fn request_id(what: &str) -> String {
    format!("{what}-{}", jiff::Timestamp::now().as_millisecond())
}
