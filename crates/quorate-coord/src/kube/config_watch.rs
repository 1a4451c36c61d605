//! The `<name>-config` ConfigMap, kept current by a watch. The agent asks for its
//! configuration every second or so; a watch costs the API server one long request per member
//! instead of one GET per question, and a change reaches the agent as soon as it is written.
//!
//! The Role allows list and watch of this one ConfigMap only with the field selector
//! `metadata.name=<name>-config`, which is what the watch uses.

use std::time::Duration;

use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher::{self, Event};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use tokio::sync::watch;

use super::api_failure::{ApiFailure, Target};

/// What is known about the ConfigMap.
#[derive(Clone, Debug)]
pub enum WatchState {
    /// The first list has not answered yet.
    Starting,
    /// The ConfigMap as last seen; `None` while it does not exist.
    Synced(Option<Box<ConfigMap>>),
    /// Listing it failed before it was ever seen; the watch keeps retrying with backoff.
    Failed(ApiFailure),
}

/// A running watch of one ConfigMap; the watch stops when this is dropped.
#[derive(Debug)]
pub struct ConfigWatch {
    state: watch::Receiver<WatchState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConfigWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConfigWatch {
    /// Starts watching the ConfigMap `name` through `api`. Must be called inside a tokio
    /// runtime.
    pub fn start(api: ::kube::Api<ConfigMap>, name: String, target: &Target<'_>) -> Self {
        let (tx, rx) = watch::channel(WatchState::Starting);
        let namespace = target.namespace.to_string();
        let cluster = target.cluster.to_string();
        let task = tokio::spawn(async move {
            let target = Target {
                namespace: &namespace,
                cluster: &cluster,
            };
            run(api, &name, &target, &tx).await;
        });
        Self { state: rx, task }
    }

    /// The ConfigMap as last seen, waiting up to `patience` for the first list.
    pub async fn current(
        &self,
        patience: Duration,
        target: &Target<'_>,
        name: &str,
    ) -> Result<Option<ConfigMap>, ApiFailure> {
        let mut state = self.state.clone();
        let waited = tokio::time::timeout(
            patience,
            state.wait_for(|s| !matches!(s, WatchState::Starting)),
        )
        .await;
        let current = match waited {
            Ok(Ok(state)) => state.clone(),
            Ok(Err(_)) => WatchState::Failed(ApiFailure::new(
                target,
                "watch",
                "configmaps",
                name,
                None,
                "the watch ended".to_string(),
            )),
            Err(_) => WatchState::Failed(ApiFailure::new(
                target,
                "list",
                "configmaps",
                name,
                None,
                format!("no answer within {patience:?}"),
            )),
        };
        match current {
            WatchState::Synced(config_map) => Ok(config_map.map(|c| *c)),
            WatchState::Failed(failure) => Err(failure),
            WatchState::Starting => Ok(None),
        }
    }
}

async fn run(
    api: ::kube::Api<ConfigMap>,
    name: &str,
    target: &Target<'_>,
    tx: &watch::Sender<WatchState>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    // Objects of the list in progress; the state changes only once it is complete.
    let mut listing: Option<ConfigMap> = None;
    let synced = |c: Option<ConfigMap>| WatchState::Synced(c.map(Box::new));
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listing = None,
            Ok(Event::InitApply(c)) if c.metadata.name.as_deref() == Some(name) => {
                listing = Some(c)
            }
            Ok(Event::InitDone) => {
                tx.send_replace(synced(listing.take()));
            }
            Ok(Event::Apply(c)) if c.metadata.name.as_deref() == Some(name) => {
                tx.send_replace(synced(Some(c)));
            }
            Ok(Event::Delete(c)) if c.metadata.name.as_deref() == Some(name) => {
                tx.send_replace(synced(None));
            }
            Ok(_) => {}
            Err(error) => {
                let failure = failure(target, name, &error);
                tracing::warn!(error = %failure, "watching the cluster configuration");
                // A configuration once seen stays valid while the watch recovers.
                if !matches!(*tx.borrow(), WatchState::Synced(_)) {
                    tx.send_replace(WatchState::Failed(failure));
                }
            }
        }
    }
}

fn failure(target: &Target<'_>, name: &str, error: &watcher::Error) -> ApiFailure {
    let resource = "configmaps";
    match error {
        watcher::Error::InitialListFailed(e) => {
            ApiFailure::from_kube(target, "list", resource, name, e)
        }
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            ApiFailure::from_kube(target, "watch", resource, name, e)
        }
        watcher::Error::WatchError(status) => {
            ApiFailure::from_status(target, "watch", resource, name, status)
        }
        other => ApiFailure::new(target, "watch", resource, name, None, other.to_string()),
    }
}
