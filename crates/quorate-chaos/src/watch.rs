//! Watchers: each watching one member, the workload's prefix from revision 1 and resuming
//! after the last revision it received whenever its stream breaks, so each ends with the whole
//! write history of the run as that member delivered it.

use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};
use tokio::task::JoinHandle;

use crate::history::WatchChange;
use crate::run::RunError;
use crate::workload::PREFIX;

/// What one watcher received.
#[derive(Clone, Debug, Default)]
pub struct WatchRecord {
    /// The member it watched.
    pub endpoint: String,
    /// Every change, in delivery order.
    pub changes: Vec<WatchChange>,
    /// How often the stream broke and was resumed.
    pub resumed: u32,
    /// Set when etcd refused to resume because the history was compacted: the record has a
    /// gap that is not the cluster's fault alone.
    pub compacted_at: Option<i64>,
}

impl WatchRecord {
    /// The revision of the last change received.
    pub fn last_revision(&self) -> i64 {
        self.changes.last().map_or(0, |c| c.mod_revision)
    }
}

/// Watches `endpoint` until a change of `until_key` arrives; a stream that breaks, or stays
/// silent for `stall`, is resumed after the last revision received.
pub async fn watch_until(endpoint: String, until_key: String, stall: Duration) -> WatchRecord {
    let mut record = WatchRecord {
        endpoint: endpoint.clone(),
        ..WatchRecord::default()
    };
    loop {
        let next = record.last_revision() + 1;
        match stream_once(&endpoint, next, &until_key, stall, &mut record).await {
            Ok(true) => return record,
            Ok(false) | Err(_) => {
                if record.compacted_at.is_some() {
                    return record;
                }
                record.resumed += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One watch stream from revision `from`; `Ok(true)` once `until_key` was seen.
async fn stream_once(
    endpoint: &str,
    from: i64,
    until_key: &str,
    stall: Duration,
    record: &mut WatchRecord,
) -> Result<bool, etcd_client::Error> {
    let mut client = tokio::time::timeout(stall, Client::connect([endpoint], None))
        .await
        .map_err(|_| etcd_client::Error::WatchError("connect timed out".into()))??;
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(from)
        .with_progress_notify();
    let mut stream = client.watch(PREFIX, Some(options)).await?;
    loop {
        let Ok(message) = tokio::time::timeout(stall, stream.message()).await else {
            return Ok(false);
        };
        let Some(response) = message? else {
            return Ok(false);
        };
        if response.canceled() {
            if response.compact_revision() > 0 {
                record.compacted_at = Some(response.compact_revision());
            }
            return Ok(false);
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let done = key == until_key;
            record.changes.push(WatchChange {
                key,
                mod_revision: kv.mod_revision(),
                value: match event.event_type() {
                    EventType::Put => Some(String::from_utf8_lossy(kv.value()).into_owned()),
                    EventType::Delete => None,
                },
            });
            if done {
                return Ok(true);
            }
        }
    }
}

/// The key the run writes last; every watch ends when it sees it.
fn end_key() -> String {
    format!("{PREFIX}end")
}

/// Watchers that run through every fault, one per member, from revision 1.
pub(crate) fn spawn_live_watchers(endpoints: &[String]) -> Vec<(String, JoinHandle<WatchRecord>)> {
    endpoints
        .iter()
        .map(|url| {
            let watch = watch_until(url.clone(), end_key(), Duration::from_secs(10));
            (format!("the live watch on {url}"), tokio::spawn(watch))
        })
        .collect()
}

/// Writes the end marker, and watches every member once more from revision 1 to it; returns
/// the first complete record (minus the marker) and every way the others, and the live
/// watchers, differ from it.
pub(crate) async fn final_watch(
    endpoints: &[String],
    live: Vec<(String, JoinHandle<WatchRecord>)>,
) -> Result<(Vec<crate::history::WatchChange>, Vec<String>), RunError> {
    let end_key = end_key();
    let mut client = etcd_client::Client::connect(endpoints, None)
        .await
        .map_err(|e| RunError::Harness(format!("connect for the end marker: {e}")))?;
    client
        .put(end_key.as_str(), "end", None)
        .await
        .map_err(|e| RunError::Harness(format!("write the end marker: {e}")))?;
    let replays = endpoints.iter().map(|url| {
        let watch = watch_until(url.clone(), end_key.clone(), Duration::from_secs(10));
        async move {
            let record = tokio::time::timeout(Duration::from_secs(120), watch).await;
            (format!("the replay watch on {url}"), record.ok())
        }
    });
    let live = live.into_iter().map(|(what, handle)| async move {
        let record = tokio::time::timeout(Duration::from_secs(120), handle).await;
        (what, record.ok().and_then(Result::ok))
    });
    let mut records = futures::future::join_all(replays).await;
    records.extend(futures::future::join_all(live).await);
    let mut anomalies = Vec::new();
    let mut reference: Option<Vec<crate::history::WatchChange>> = None;
    for (what, record) in records {
        let Some(record) = record else {
            anomalies.push(format!("{what} never reached the end marker"));
            continue;
        };
        if let Some(at) = record.compacted_at {
            anomalies.push(format!(
                "{what} could not resume: history compacted at {at}"
            ));
            continue;
        }
        let mut changes = record.changes;
        changes.retain(|c| c.key != end_key);
        match &reference {
            None => reference = Some(changes),
            Some(first) if *first != changes => {
                let at = first
                    .iter()
                    .zip(&changes)
                    .position(|(a, b)| a != b)
                    .unwrap_or(first.len().min(changes.len()));
                anomalies.push(format!(
                    "{what} differs from the first at change {at}: {:?} vs {:?}",
                    changes.get(at),
                    first.get(at)
                ));
            }
            Some(_) => {}
        }
    }
    let reference =
        reference.ok_or_else(|| RunError::Harness("no watch reached the end marker".into()))?;
    Ok((reference, anomalies))
}
