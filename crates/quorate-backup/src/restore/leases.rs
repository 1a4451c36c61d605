//! Keeps every lease of the temporary etcd alive while deltas are replayed.
//!
//! A lease that expires inside the temporary etcd is revoked, and the revocation deletes its
//! keys at a new revision that the source cluster never had: every later event would land one
//! revision off, and a restorer that skips "already applied" revisions silently drops the
//! first delta event (etcd-backup-restore issue #1045). etcd restarts every lease's TTL when
//! the member becomes leader; renewing them from then on means none can expire during the
//! replay. Renewals change nothing in the database (no revision, no stored TTL), so the
//! restored data is exactly the replayed data.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How often every lease is renewed. Must stay well below etcd's minimum lease TTL, which is
/// 1.5 × the temporary etcd's election timeout, at least 1 s.
pub const RENEW_INTERVAL: Duration = Duration::from_millis(300);

/// Keep-alive streams opened at once when the replay starts.
const OPEN_CONCURRENCY: usize = 64;

/// The background task renewing leases; stops when dropped.
#[derive(Debug)]
pub struct LeaseKeepalive {
    add: mpsc::UnboundedSender<i64>,
    task: JoinHandle<()>,
}

impl LeaseKeepalive {
    /// Renews every lease in `initial` once (many at a time, so even thousands of leases are
    /// all renewed well within etcd's minimum TTL after start-up), then keeps renewing them,
    /// and any added later, in the background through `client`.
    pub async fn start(client: Client, initial: Vec<i64>) -> LeaseKeepalive {
        let keepers: HashMap<i64, Keeper> = futures::stream::iter(initial)
            .map(|id| {
                let client = client.clone();
                async move { (id, open(&client, id).await) }
            })
            .buffer_unordered(OPEN_CONCURRENCY)
            .filter_map(|(id, keeper)| async move { keeper.map(|k| (id, k)) })
            .collect()
            .await;
        let (add, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(client, keepers, rx));
        LeaseKeepalive { add, task }
    }

    /// Renews lease `id` from now on.
    pub fn add(&self, id: i64) {
        let _ = self.add.send(id);
    }
}

impl Drop for LeaseKeepalive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Keeper = (LeaseKeeper, LeaseKeepAliveStream);

/// Opens a keep-alive stream for lease `id`, which renews it once.
async fn open(client: &Client, id: i64) -> Option<Keeper> {
    match client.lease_client().keep_alive(id).await {
        Ok(pair) => Some(pair),
        Err(e) => {
            tracing::warn!(lease = id, error = %e, "cannot keep lease alive during restore");
            None
        }
    }
}

async fn run(
    client: Client,
    mut keepers: HashMap<i64, Keeper>,
    mut added: mpsc::UnboundedReceiver<i64>,
) {
    let mut tick = tokio::time::interval(RENEW_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            id = added.recv() => {
                let Some(id) = id else { return };
                if let Some(keeper) = open(&client, id).await {
                    keepers.insert(id, keeper);
                }
            }
            _ = tick.tick() => {
                // Send every renewal first, then read the answers, so a round costs about one
                // round trip however many leases there are.
                let mut lost = Vec::new();
                for (id, (keeper, _)) in keepers.iter_mut() {
                    if let Err(e) = keeper.keep_alive().await {
                        tracing::warn!(lease = *id, error = %e, "lease renewal during restore failed");
                        lost.push(*id);
                    }
                }
                for (id, (_, stream)) in keepers.iter_mut() {
                    if lost.contains(id) {
                        continue;
                    }
                    if let Err(e) = answer(stream).await {
                        tracing::warn!(lease = *id, error = %e, "lease renewal during restore failed");
                        lost.push(*id);
                    }
                }
                for id in lost {
                    keepers.remove(&id);
                    // Try again with a fresh stream; a lease that is really gone makes the
                    // replay's revision check fail with a clear error.
                    if let Some(keeper) = open(&client, id).await {
                        keepers.insert(id, keeper);
                    }
                }
            }
        }
    }
}

async fn answer(stream: &mut LeaseKeepAliveStream) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
        Ok(Ok(Some(resp))) if resp.ttl() > 0 => Ok(()),
        Ok(Ok(Some(_))) => Err("lease not found (expired or revoked)".to_string()),
        Ok(Ok(None)) => Err("keep-alive stream closed".to_string()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no keep-alive answer within 5s".to_string()),
    }
}
