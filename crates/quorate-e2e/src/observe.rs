//! What is going on in a namespace, in one line, for wait loops: the pods (phase, readiness,
//! restarts) and the newest Warning event, which is usually why something is stuck.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, ListParams};

/// `pods[name phase ready/total restarts, ...]` and the newest Warning event, if any.
pub async fn namespace_state(client: &Client, namespace: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod_text = match pods.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(pod_line)
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("(listing pods: {e})"),
    };
    let mut text = format!("pods[{pod_text}]");
    if let Some(warning) = newest_warning(client, namespace).await {
        text.push_str(&format!(" last warning: {warning}"));
    }
    text
}

fn pod_line(pod: &Pod) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("?");
    let containers = status.and_then(|s| s.container_statuses.as_ref());
    let total = containers.map(|c| c.len()).unwrap_or(0);
    let ready = containers
        .map(|c| c.iter().filter(|c| c.ready).count())
        .unwrap_or(0);
    let restarts: i32 = containers
        .map(|c| c.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0);
    let waiting = containers
        .into_iter()
        .flatten()
        .chain(
            status
                .and_then(|s| s.init_container_statuses.as_ref())
                .into_iter()
                .flatten(),
        )
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
        .filter(|r| r != "PodInitializing")
        .collect::<Vec<_>>();
    let mut line = format!("{name} {phase} {ready}/{total}");
    if restarts > 0 {
        line.push_str(&format!(" restarts={restarts}"));
    }
    if !waiting.is_empty() {
        line.push_str(&format!(" {}", waiting.join("/")));
    }
    line
}

/// The newest Warning event of the namespace: `<kind>/<name> <reason>: <message>`.
pub async fn newest_warning(client: &Client, namespace: &str) -> Option<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = events
        .list(&ListParams::default().fields("type=Warning"))
        .await
        .ok()?;
    let newest = list.items.into_iter().max_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    })?;
    let mut message = newest.message.unwrap_or_default();
    if message.len() > 240 {
        let mut cut = 240;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    Some(format!(
        "{}/{} {}: {}",
        newest.involved_object.kind.unwrap_or_default(),
        newest.involved_object.name.unwrap_or_default(),
        newest.reason.unwrap_or_default(),
        message.trim()
    ))
}
