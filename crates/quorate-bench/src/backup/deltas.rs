//! Delta backups as the agent runs them: a [`DeltaWatcher`] on the member, catching up with
//! it periodically and cutting a batch every period, and a task uploading each batch (gzip, as
//! by default) into a snapshot store; and, for where the cost goes, a watch that stays open
//! and a catch-up that drops what it receives.

use std::time::{Duration, Instant};

use bytes::Bytes;
use quorate_api::CompressionPolicy;
use quorate_backup::layout::SnapshotName;
use quorate_backup::snapshotter::{
    CaptureEnd, CaptureError, CutSchedule, DeltaBatch, DeltaConfig, DeltaHandle, DeltaWatcher,
};
use quorate_backup::store::SnapStore;
use quorate_etcd::{EtcdTimeouts, MemberClient};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::{BenchError, Result};

/// What a delta backup captured and stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeltaStats {
    /// Delta snapshots uploaded.
    pub batches: u64,
    /// Events in them.
    pub events: u64,
    /// Their encoded (uncompressed) size.
    pub encoded_bytes: u64,
    /// Their stored (compressed) size.
    pub stored_bytes: u64,
    /// Last revision covered.
    pub last_revision: i64,
    /// Time spent uploading (compressing and writing).
    pub upload_time: Duration,
}

/// Uploads every batch until the capture closes the channel.
async fn upload_batches(
    mut batches: mpsc::Receiver<DeltaBatch>,
    store: SnapStore,
    start_revision: i64,
    compression: Option<CompressionPolicy>,
) -> Result<DeltaStats> {
    let mut stats = DeltaStats {
        last_revision: start_revision - 1,
        ..DeltaStats::default()
    };
    while let Some(batch) = batches.recv().await {
        let name = SnapshotName::incr(
            batch.start_revision,
            batch.last_revision,
            jiff::Timestamp::now().as_second(),
            compression,
        );
        let t = Instant::now();
        let encoded = batch.encoded.len() as u64;
        let body = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(batch.encoded))]);
        let stored = store
            .upload(&name, body)
            .await
            .map_err(|e| BenchError::failed(format!("uploading {}: {e}", name.file_name())))?;
        stats.upload_time += t.elapsed();
        stats.batches += 1;
        stats.events += batch.events.len() as u64;
        stats.encoded_bytes += encoded;
        stats.stored_bytes += stored.size;
        stats.last_revision = batch.last_revision;
    }
    Ok(stats)
}

/// A running delta backup.
pub struct DeltaBackup {
    handle: DeltaHandle,
    capture: JoinHandle<std::result::Result<CaptureEnd, CaptureError>>,
    uploader: JoinHandle<Result<DeltaStats>>,
}

impl DeltaBackup {
    /// Captures every event from `start_revision` on, catching up every `catch_up_every` and
    /// cutting a batch every `period`, and uploads each batch to `store` with `compression`. Capture and uploads run on `runtime`
    /// with their own connection to `url`, apart from the tasks of whoever calls this (the
    /// agent is a process of its own).
    pub async fn start(
        runtime: &Handle,
        url: &str,
        start_revision: i64,
        store: SnapStore,
        period: Duration,
        catch_up_every: Duration,
        compression: Option<CompressionPolicy>,
    ) -> Result<DeltaBackup> {
        let url = url.to_string();
        runtime
            .spawn(async move {
                let client = MemberClient::connect(&url, None, EtcdTimeouts::default()).await?;
                let mut config = DeltaConfig::new(start_revision);
                config.schedule = CutSchedule::Every(period);
                config.catch_up_every = catch_up_every;
                let (handle, batches, capture) = DeltaWatcher::spawn(client, config)
                    .map_err(|e| BenchError::failed(format!("starting the delta capture: {e}")))?;
                let uploader =
                    tokio::spawn(upload_batches(batches, store, start_revision, compression));
                Ok(DeltaBackup {
                    handle,
                    capture,
                    uploader,
                })
            })
            .await
            .map_err(|e| BenchError::failed(format!("starting the delta backup failed: {e}")))?
    }

    /// The last revision captured so far.
    pub fn captured_through(&self) -> i64 {
        self.handle.captured_through()
    }

    /// Waits until everything through `revision` has been captured (at most `timeout`).
    pub async fn wait_captured(&self, revision: i64, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        while self.captured_through() < revision {
            if started.elapsed() > timeout || !self.handle.is_running() {
                return Err(BenchError::failed(format!(
                    "the delta capture reached revision {} only, not {revision}, within {timeout:?}",
                    self.captured_through()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stops capturing; returns once the last batch is uploaded.
    pub async fn stop(self) -> Result<DeltaStats> {
        self.handle.stop().await;
        let uploaded = self
            .uploader
            .await
            .map_err(|e| BenchError::failed(format!("the delta uploader failed: {e}")))?;
        let captured = self
            .capture
            .await
            .map_err(|e| BenchError::failed(format!("the delta capture task failed: {e}")))?;
        let stats = uploaded?;
        captured.map_err(|e| BenchError::failed(format!("delta capture: {e}")))?;
        Ok(stats)
    }
}

/// A bare watch over every key that stays open, its events received and dropped: what etcd and
/// the gRPC client spend on following every write as it happens (how delta capture worked
/// before it caught up periodically).
pub struct RawWatch {
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<Result<u64>>,
}

impl RawWatch {
    /// Watches everything from `start_revision` on, on `runtime` with its own connection.
    pub async fn start(runtime: &Handle, url: &str, start_revision: i64) -> Result<RawWatch> {
        let url = url.to_string();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, watching) = tokio::sync::oneshot::channel::<Result<()>>();
        let task = runtime.spawn(async move {
            let opened = async {
                let client = MemberClient::connect(&url, None, EtcdTimeouts::default()).await?;
                Ok::<_, BenchError>(client.watch_all_from(start_revision).await?)
            };
            let mut stream = match opened.await {
                Ok(stream) => {
                    let _ = ready.send(Ok(()));
                    stream
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return Ok(0);
                }
            };
            let mut events = 0u64;
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(events),
                    message = stream.message() => match message {
                        Ok(Some(response)) => events += response.events().len() as u64,
                        Ok(None) => return Err(BenchError::failed("etcd closed the watch")),
                        Err(e) => return Err(e.into()),
                    },
                }
            }
        });
        watching
            .await
            .map_err(|_| BenchError::failed("the watch task ended before it was watching"))??;
        Ok(RawWatch { stop, task })
    }

    /// Stops watching; returns the events received.
    pub async fn stop(self) -> Result<u64> {
        let _ = self.stop.send(());
        self.task
            .await
            .map_err(|e| BenchError::failed(format!("the watch task failed: {e}")))?
    }
}

/// What a [`CatchUpWatch`] received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CatchUpStats {
    /// Catch-ups made (watches opened).
    pub catch_ups: u64,
    /// Events received.
    pub events: u64,
    /// Watch responses received (created notices included).
    pub responses: u64,
}

/// Periodic catch-up, events dropped: every `period`, the member's current revision (from a
/// status call), then a watch from the first revision not yet received that is read until it
/// has brought that revision, and dropped. etcd serves such a watch from its backend as an
/// unsynced watcher in batched responses, instead of one response per write. (The
/// `DeltaWatcher` takes the revision from the watch's creation answer instead of a status
/// call.)
pub struct CatchUpWatch {
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<Result<CatchUpStats>>,
}

impl CatchUpWatch {
    /// Catches up from `start_revision` on every `period`, on `runtime` with its own
    /// connection.
    pub async fn start(
        runtime: &Handle,
        url: &str,
        start_revision: i64,
        period: Duration,
    ) -> Result<CatchUpWatch> {
        let url = url.to_string();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let client = runtime
            .spawn(async move { MemberClient::connect(&url, None, EtcdTimeouts::default()).await })
            .await
            .map_err(|e| BenchError::failed(format!("connecting the catch-up watch: {e}")))??;
        let task = runtime.spawn(async move {
            let mut stats = CatchUpStats::default();
            let mut next = start_revision;
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(stats),
                    _ = ticks.tick() => {}
                }
                let target = client.status().await?.revision;
                if target < next {
                    continue;
                }
                stats.catch_ups += 1;
                let mut stream = client.watch_all_from(next).await?;
                while next <= target {
                    let response = stream
                        .message()
                        .await?
                        .ok_or_else(|| BenchError::failed("etcd closed the catch-up watch"))?;
                    if response.compact_revision() > 0 || response.canceled() {
                        return Err(BenchError::failed(format!(
                            "the catch-up watch from {next} was canceled (compacted at {})",
                            response.compact_revision()
                        )));
                    }
                    stats.responses += 1;
                    stats.events += response.events().len() as u64;
                    if let Some(kv) = response.events().last().and_then(|e| e.kv()) {
                        next = kv.mod_revision() + 1;
                    }
                }
            }
        });
        Ok(CatchUpWatch { stop, task })
    }

    /// Stops; returns what was received.
    pub async fn stop(self) -> Result<CatchUpStats> {
        let _ = self.stop.send(());
        self.task
            .await
            .map_err(|e| BenchError::failed(format!("the catch-up task failed: {e}")))?
    }
}

/// A tokio runtime of its own for the backup side, shut down without waiting when dropped
/// (dropping a runtime the ordinary way inside another one panics).
pub struct SideRuntime(Option<tokio::runtime::Runtime>);

impl SideRuntime {
    /// A multi-thread runtime with `threads` workers named `name`.
    pub fn new(name: &str, threads: usize) -> Result<SideRuntime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| BenchError::failed(format!("cannot start the {name} runtime: {e}")))?;
        Ok(SideRuntime(Some(runtime)))
    }

    /// Where to spawn on it.
    pub fn handle(&self) -> &Handle {
        self.0.as_ref().expect("present until dropped").handle()
    }
}

impl Drop for SideRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
