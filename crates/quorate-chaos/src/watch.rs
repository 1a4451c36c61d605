//! Watchers: each watching one member, the workload's prefix from revision 1 and resuming
//! after the last revision it received whenever its stream breaks, so each ends with the whole
//! write history of the run as that member delivered it.

use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};

use crate::history::WatchChange;
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
