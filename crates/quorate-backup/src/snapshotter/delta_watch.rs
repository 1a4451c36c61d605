//! Delta capture by periodic catch-up: every `catch_up_every` (and before every cut), a watch
//! over the whole keyspace is opened at the first revision not captured yet, read until it has
//! brought the revision etcd was at when the watch was made, and dropped. The events are cut
//! into [`DeltaBatch`]es when the delta period elapses, when the encoded batch reaches the
//! memory limit, or on request.
//!
//! Why not one watch that stays open: etcd sends a synced watcher one response per write
//! transaction, thousands of small gRPC messages a second under load, each costing etcd and
//! the client CPU that the writers then lack. A watch that starts in the past is served from
//! etcd's backend instead (an "unsynced" watcher), up to 1000 revisions per response (etcd
//! 3.4), so a catch-up of a second's writes takes a handful of messages. (The quorate-bench
//! backup benchmark measures both.) Each catch-up re-reads from etcd's backend what it has
//! not sent yet, every 100 ms, so catch-ups are kept frequent: a long backlog costs etcd
//! more than it saves.
//!
//! Guarantees, for the caller that uploads the batches:
//! - **No gap, no overlap.** The first batch starts at the configured start revision, every
//!   next one at the previous `last_revision + 1`; each catch-up opens its watch at the first
//!   revision not captured yet, also after a failed one (member restart, network, lost
//!   leader), so events etcd sends again are never taken twice.
//! - **Transactions stay whole.** etcd never splits a revision's events across watch
//!   responses (`fragment` stays off), and cuts happen only between revisions.
//! - **Up to now.** A requested cut, a period cut and the stop each catch up first, so the
//!   batch holds everything up to the revision etcd was at when it was asked.
//! - **Compaction is reported, not skipped.** If the revision to continue from has been
//!   compacted, the capture ends with [`CaptureError::Compacted`]: only a full snapshot can
//!   cover the lost events. Between catch-ups the capture trails etcd by up to
//!   `catch_up_every` (plus the catch-up itself), which must stay far below etcd's
//!   auto-compaction retention (quorate: 30 minutes by default; in revision mode, more
//!   revisions than are written in a few catch-up intervals).
//! - **Bounded memory.** One buffer up to the memory limit, one watch response, plus the
//!   batches queued in the channel; while the channel is full the watch is not read, and etcd
//!   holds the events.
//!
//! Event time stamps are the capture's clock at the catch-up: for the revisions up to the one
//! etcd was at when the catch-up's watch was made, the time its answer came (they were all
//! written before it); for later ones, the time their response came. So a stamp is never
//! before the write, and trails it by at most about `catch_up_every` plus the catch-up.
//!
//! Whatever ends the capture (stop, failure), the events already captured are delivered as a
//! last batch first, so a successor capture continues at [`CaptureEnd::next_revision`] (or at
//! the revision in the error).

use std::future::pending;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{EventType, WatchResponse};
use jiff::Timestamp;
use quorate_etcd::{EtcdError, MemberClient};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::buffer::{CutReason, DeltaBatch, DeltaBatchInfo, DeltaBuffer};
use super::clock::{Clock, JsonTimes, SystemClock};
use super::error::CaptureError;
use super::lease_ttl::LeaseTtlCache;
use crate::delta::{EVENT_DELETE, EVENT_PUT, KeyValueFields, write_event_json};

/// etcd-backup-restore's default delta period.
pub const DEFAULT_DELTA_PERIOD: Duration = Duration::from_secs(20);
/// etcd-backup-restore's default delta memory limit (10 MiB).
pub const DEFAULT_DELTA_MEMORY_LIMIT: usize = 10 * 1024 * 1024;
/// How often capture catches up with etcd by default.
pub const DEFAULT_CATCH_UP_EVERY: Duration = Duration::from_secs(1);

/// First wait before another catch-up after a failed one; doubles up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);
/// Leases remembered before the TTL cache starts over.
const LEASE_CACHE_CAPACITY: usize = 4096;

/// When the delta period elapses.
#[derive(Debug)]
pub enum CutSchedule {
    /// Every this long after the previous cut (of any kind), counted from when the catch-up
    /// before that cut began.
    Every(Duration),
    /// Whenever a tick arrives on this channel (tests, or a caller with its own timer). A
    /// closed channel means no period cuts.
    Ticks(mpsc::Receiver<()>),
}

/// How to capture deltas.
pub struct DeltaConfig {
    /// First revision to capture: a full snapshot's `revision + 1`, or the last stored delta's
    /// `last_revision + 1`.
    pub start_revision: i64,
    /// A batch is cut when its encoded size would exceed this (a single transaction larger
    /// than it still makes one batch). The buffer holds only the encoding, so it takes about
    /// this much (plus the growth slack of one `Vec`).
    pub memory_limit: usize,
    /// When the delta period elapses.
    pub schedule: CutSchedule,
    /// How often to catch up with etcd between cuts (each cut catches up as well). Shorter
    /// means more watches opened; longer means a larger backlog per catch-up, which etcd
    /// re-reads from its backend for every response it sends (about 1000 revisions each, one
    /// response per 100 ms), and older event time stamps. The capture trails etcd by up to
    /// about this much.
    pub catch_up_every: Duration,
    /// Time stamps for events.
    pub clock: Arc<dyn Clock>,
    /// A catch-up fails when etcd takes longer than this to open its watch or to send the
    /// next response. This catches a member that hangs without closing the connection.
    pub stall_timeout: Duration,
    /// Give up (with [`CaptureError::Unavailable`]) after catch-ups have failed for this long.
    pub give_up_after: Duration,
    /// Batches queued for the consumer before capture waits for it.
    pub channel_capacity: usize,
}

impl DeltaConfig {
    /// etcd-backup-restore's defaults (20 s period, 10 MiB limit), starting at
    /// `start_revision`, catching up every second.
    pub fn new(start_revision: i64) -> DeltaConfig {
        DeltaConfig {
            start_revision,
            memory_limit: DEFAULT_DELTA_MEMORY_LIMIT,
            schedule: CutSchedule::Every(DEFAULT_DELTA_PERIOD),
            catch_up_every: DEFAULT_CATCH_UP_EVERY,
            clock: Arc::new(SystemClock),
            stall_timeout: Duration::from_secs(10),
            give_up_after: Duration::from_secs(300),
            channel_capacity: 4,
        }
    }
}

impl std::fmt::Debug for DeltaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaConfig")
            .field("start_revision", &self.start_revision)
            .field("memory_limit", &self.memory_limit)
            .field("schedule", &self.schedule)
            .field("catch_up_every", &self.catch_up_every)
            .field("stall_timeout", &self.stall_timeout)
            .field("give_up_after", &self.give_up_after)
            .field("channel_capacity", &self.channel_capacity)
            .finish_non_exhaustive()
    }
}

/// The answer to [`DeltaHandle::request_cut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutOutcome {
    /// A batch was cut and is queued on the batch channel (ahead of any later batch).
    Cut(DeltaBatchInfo),
    /// Nothing was captured since the last batch.
    NoEvents {
        /// The first revision not captured yet.
        next_revision: i64,
    },
}

/// How a stopped capture ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureEnd {
    /// Where a successor capture must start: the last delivered batch's `last_revision + 1`.
    pub next_revision: i64,
}

enum Control {
    Cut(oneshot::Sender<CutOutcome>),
    Stop,
}

/// Controls a running [`DeltaWatcher`]. Cheap to clone; when every handle is dropped the
/// capture stops as if [`DeltaHandle::stop`] had been called.
#[derive(Clone, Debug)]
pub struct DeltaHandle {
    control: mpsc::Sender<Control>,
    captured_through: Arc<AtomicI64>,
}

impl DeltaHandle {
    /// Catches up with etcd and cuts everything captured into a batch now. When this returns
    /// [`CutOutcome::Cut`], the batch is already in the channel, so the batch receiver must be
    /// drained by another task (or have room) while waiting here. If the catch-up fails (etcd
    /// unreachable), the cut holds what was captured before.
    pub async fn request_cut(&self) -> Result<CutOutcome, CaptureError> {
        let (reply, answer) = oneshot::channel();
        self.control
            .send(Control::Cut(reply))
            .await
            .map_err(|_| CaptureError::NotRunning)?;
        answer.await.map_err(|_| CaptureError::NotRunning)
    }

    /// Asks the capture to stop: it catches up with etcd once more (if etcd answers), delivers
    /// what it has captured as a last batch, closes the batch channel and ends its task with
    /// [`CaptureEnd`]. Returns at once; keep draining the batch receiver until it closes. Does
    /// nothing when the capture has already ended.
    pub async fn stop(&self) {
        let _ = self.control.send(Control::Stop).await;
    }

    /// False once the capture task has ended.
    pub fn is_running(&self) -> bool {
        !self.control.is_closed()
    }

    /// The last revision captured (buffered or delivered); `start_revision - 1` before the
    /// first event. Compared with etcd's head revision it shows how far capture lags.
    pub fn captured_through(&self) -> i64 {
        self.captured_through.load(Ordering::Acquire)
    }
}

/// A delta capture from one member; run it with [`DeltaWatcher::run`] on a tokio task.
pub struct DeltaWatcher {
    client: MemberClient,
    buffer: DeltaBuffer,
    ticker: Ticker,
    catch_up_every: Duration,
    /// When the next catch-up between cuts is due.
    next_catch_up: Instant,
    /// When the last catch-up began: a batch holds what etcd had then (and maybe more), so
    /// the period restarts from there after a cut, and a period as long as `catch_up_every`
    /// makes one catch-up per period, not two.
    catch_up_began: Instant,
    clock: Arc<dyn Clock>,
    /// Event time stamps, formatted once per second.
    times: JsonTimes,
    stall_timeout: Duration,
    give_up_after: Duration,
    leases: LeaseTtlCache,
    control: mpsc::Receiver<Control>,
    batches: mpsc::Sender<DeltaBatch>,
    /// Shared with the handles: the last revision captured.
    captured_through: Arc<AtomicI64>,
    /// Since when catch-ups have failed, and the last reason.
    outage: Option<(Instant, String)>,
    /// The wait before the next catch-up after a failed one.
    retry_delay: Duration,
}

impl std::fmt::Debug for DeltaWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaWatcher")
            .field("endpoint", &self.client.endpoint())
            .field("next_revision", &self.buffer.next_revision())
            .finish_non_exhaustive()
    }
}

type RunResult = Result<CaptureEnd, CaptureError>;

impl DeltaWatcher {
    /// Prepares a capture from `client`'s member, with its control handle and the receiver of
    /// its batches. Nothing happens until [`DeltaWatcher::run`].
    pub fn new(
        client: MemberClient,
        config: DeltaConfig,
    ) -> Result<(DeltaWatcher, DeltaHandle, mpsc::Receiver<DeltaBatch>), CaptureError> {
        if config.start_revision < 1 {
            return Err(CaptureError::InvalidStart {
                revision: config.start_revision,
            });
        }
        let (control_tx, control_rx) = mpsc::channel(8);
        let (batch_tx, batch_rx) = mpsc::channel(config.channel_capacity.max(1));
        let captured_through = Arc::new(AtomicI64::new(config.start_revision - 1));
        let watcher = DeltaWatcher {
            client,
            buffer: DeltaBuffer::new(config.start_revision, config.memory_limit),
            ticker: Ticker::new(config.schedule),
            catch_up_every: config.catch_up_every.max(Duration::from_millis(1)),
            next_catch_up: Instant::now(),
            catch_up_began: Instant::now(),
            clock: config.clock,
            times: JsonTimes::default(),
            stall_timeout: config.stall_timeout,
            give_up_after: config.give_up_after,
            leases: LeaseTtlCache::new(LEASE_CACHE_CAPACITY),
            control: control_rx,
            batches: batch_tx,
            captured_through: captured_through.clone(),
            outage: None,
            retry_delay: FIRST_RETRY_DELAY,
        };
        Ok((
            watcher,
            DeltaHandle {
                control: control_tx,
                captured_through,
            },
            batch_rx,
        ))
    }

    /// [`DeltaWatcher::new`] and [`DeltaWatcher::run`] on a new tokio task.
    pub fn spawn(
        client: MemberClient,
        config: DeltaConfig,
    ) -> Result<
        (
            DeltaHandle,
            mpsc::Receiver<DeltaBatch>,
            JoinHandle<RunResult>,
        ),
        CaptureError,
    > {
        let (watcher, handle, batches) = DeltaWatcher::new(client, config)?;
        Ok((handle, batches, tokio::spawn(watcher.run())))
    }

    /// Captures until stopped or failed. Either way the events captured so far are delivered
    /// as a last batch before the batch channel closes (unless the receiver is gone).
    pub async fn run(mut self) -> RunResult {
        let ended = self.capture().await;
        match ended {
            Ok(()) => {
                self.cut(CutReason::Stop).await?;
                Ok(CaptureEnd {
                    next_revision: self.buffer.next_revision(),
                })
            }
            Err(e @ CaptureError::ConsumerGone { .. }) => Err(e),
            Err(e) => {
                tracing::warn!(endpoint = %self.client.endpoint(), "delta capture failed: {e}");
                // Keep what was captured; the error names where to continue.
                let _ = self.cut(CutReason::Failure).await;
                Err(e)
            }
        }
    }

    /// The capture loop; returns `Ok` when asked to stop, after a last catch-up.
    async fn capture(&mut self) -> Result<(), CaptureError> {
        loop {
            let step = tokio::select! {
                biased;
                c = self.control.recv() => Step::Control(c),
                _ = self.ticker.tick() => Step::Tick,
                _ = tokio::time::sleep_until(self.next_catch_up) => Step::CatchUp,
            };
            match step {
                Step::Control(None | Some(Control::Stop)) => {
                    // One attempt: a member that is gone must not hold up the hand-over; the
                    // successor continues where this capture ends.
                    return match self.try_catch_up().await {
                        Ok(()) => Ok(()),
                        Err(Absorb::Fatal(e)) => Err(e),
                        Err(Absorb::Broken(reason)) => {
                            tracing::warn!(
                                endpoint = %self.client.endpoint(),
                                next_revision = self.buffer.next_revision(),
                                "stopping delta capture without a last catch-up: {reason}"
                            );
                            Ok(())
                        }
                    };
                }
                Step::Control(Some(Control::Cut(reply))) => {
                    self.catch_up().await?;
                    let outcome = self.cut(CutReason::Requested).await?;
                    let _ = reply.send(outcome);
                }
                Step::Tick => {
                    self.catch_up().await?;
                    self.cut(CutReason::Period).await?;
                }
                Step::CatchUp => self.catch_up().await?,
            }
        }
    }

    /// Catches up, and schedules the next catch-up: `catch_up_every` after this one began, or
    /// after a growing delay when it failed. Fails only when capture cannot go on (history
    /// compacted, consumer gone, or catch-ups failing for longer than `give_up_after`).
    async fn catch_up(&mut self) -> Result<(), CaptureError> {
        let result = self.try_catch_up().await;
        let began = self.catch_up_began;
        match result {
            Ok(()) => {
                self.outage = None;
                self.retry_delay = FIRST_RETRY_DELAY;
                self.next_catch_up = began + self.catch_up_every;
                Ok(())
            }
            Err(Absorb::Fatal(e)) => Err(e),
            Err(Absorb::Broken(reason)) => {
                tracing::warn!(
                    endpoint = %self.client.endpoint(),
                    resume_at = self.buffer.next_revision(),
                    "delta catch-up failed, trying again: {reason}"
                );
                let (since, last_error) = match self.outage.take() {
                    Some((since, _)) => (since, reason),
                    None => (began, reason),
                };
                if since.elapsed() >= self.give_up_after {
                    return Err(CaptureError::Unavailable {
                        endpoint: self.client.endpoint().to_string(),
                        waited: since.elapsed(),
                        last_error,
                        next_revision: self.buffer.next_revision(),
                    });
                }
                self.outage = Some((since, last_error));
                self.next_catch_up = Instant::now() + self.retry_delay;
                self.retry_delay = (self.retry_delay * 2).min(MAX_RETRY_DELAY);
                Ok(())
            }
        }
    }

    /// One catch-up: a watch from the first revision not captured yet, read until it has
    /// brought the revision etcd was at when it made the watch (etcd answers the create
    /// request first, with that revision in the header), then dropped, which cancels it.
    /// etcd may send the backlog in any number of responses; each holds whole revisions.
    async fn try_catch_up(&mut self) -> Result<(), Absorb> {
        self.catch_up_began = Instant::now();
        let from = self.buffer.next_revision();
        let stall = self.stall_timeout;
        let mut stream = match tokio::time::timeout(stall, self.client.watch_all_from(from)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(Absorb::Broken(e.to_string())),
            Err(_) => {
                return Err(Absorb::Broken(format!(
                    "etcd did not open a watch within {stall:?}"
                )));
            }
        };
        // etcd's revision when it made the watch, and when its answer came.
        let mut target: Option<(i64, Timestamp)> = None;
        let mut responses = 0u32;
        loop {
            let response = match tokio::time::timeout(stall, stream.message()).await {
                Ok(Ok(Some(response))) => response,
                Ok(Ok(None)) => {
                    return Err(Absorb::Broken("etcd closed the watch stream".to_string()));
                }
                Ok(Err(e)) => {
                    let e = EtcdError::from_client("watch", self.client.endpoint(), e);
                    return Err(Absorb::Broken(e.to_string()));
                }
                Err(_) => {
                    return Err(Absorb::Broken(format!(
                        "no message from etcd for {stall:?} while catching up from revision {}",
                        self.buffer.next_revision()
                    )));
                }
            };
            let (head, answered) = match target {
                Some(target) => target,
                None => {
                    let head = match response.header() {
                        Some(header) if response.created() => header.revision(),
                        _ => {
                            return Err(Absorb::Broken(
                                "etcd's first watch response is not the creation of the watch"
                                    .to_string(),
                            ));
                        }
                    };
                    *target.insert((head, self.clock.now()))
                }
            };
            let last = response
                .events()
                .last()
                .and_then(|e| e.kv())
                .map_or(0, |kv| kv.mod_revision());
            // Written before etcd answered the create request, or before this response came.
            let stamp = if last <= head {
                answered
            } else {
                self.clock.now()
            };
            responses += 1;
            self.absorb(response, stamp).await?;
            if self.buffer.next_revision() > head {
                tracing::debug!(
                    endpoint = %self.client.endpoint(),
                    from,
                    target = head,
                    through = self.buffer.next_revision() - 1,
                    responses,
                    "caught up"
                );
                return Ok(());
            }
        }
    }

    /// Takes one watch response into the buffer, delivering any batches the memory limit cuts.
    async fn absorb(&mut self, response: WatchResponse, stamp: Timestamp) -> Result<(), Absorb> {
        if response.compact_revision() > 0 {
            return Err(Absorb::Fatal(CaptureError::Compacted {
                revision: self.buffer.next_revision(),
                compact_revision: response.compact_revision(),
                endpoint: self.client.endpoint().to_string(),
            }));
        }
        if response.canceled() {
            let reason = match response.cancel_reason() {
                "" => "no reason given",
                reason => reason,
            };
            return Err(Absorb::Broken(format!("etcd canceled the watch: {reason}")));
        }
        if response.events().is_empty() {
            // Created, or a progress report.
            return Ok(());
        }
        let events = response.events();
        let lease_ttls = self.lease_ttls(events).await?;
        let time = self.times.render(stamp);
        // Each event is encoded straight from the response into the buffer; a revision's
        // events are consecutive, and the batches a revision cuts are delivered before the
        // next one is taken in.
        for (i, event) in events.iter().enumerate() {
            let Some(kv) = event.kv() else { continue };
            let revision = kv.mod_revision();
            if self.buffer.open_revision() != Some(revision) {
                self.end_revision().await?;
                self.buffer.begin_revision(revision).map_err(|e| {
                    Absorb::Fatal(CaptureError::OutOfOrder {
                        endpoint: self.client.endpoint().to_string(),
                        revision: e.revision,
                        captured_through: e.captured_through,
                    })
                })?;
            }
            let is_put = event.event_type() == EventType::Put;
            let lease_ttl = lease_ttls.as_ref().and_then(|ttls| ttls[i]);
            self.buffer.push_event(|out| {
                write_event_json(
                    out,
                    if is_put { EVENT_PUT } else { EVENT_DELETE },
                    Some(kv),
                    event.prev_kv(),
                    &time,
                    lease_ttl,
                )
            });
        }
        self.end_revision().await
    }

    /// The granted TTL of each PUT's lease, by event index; `None` when no event carries a
    /// lease. Looked up before any event is taken in, so a failed lookup leaves the buffer as
    /// it was and the next catch-up brings the whole response again.
    async fn lease_ttls(
        &mut self,
        events: &[etcd_client::Event],
    ) -> Result<Option<Vec<Option<i64>>>, Absorb> {
        let leased = |event: &etcd_client::Event| {
            event.event_type() == EventType::Put && event.kv().is_some_and(|kv| kv.lease() != 0)
        };
        if !events.iter().any(leased) {
            return Ok(None);
        }
        let mut ttls = Vec::with_capacity(events.len());
        for event in events {
            let ttl = match event.kv() {
                Some(kv) if leased(event) => {
                    let (client, id) = (&self.client, kv.lease());
                    self.leases
                        .get(id, || client.lease_granted_ttl(id))
                        .await
                        .map_err(|e| Absorb::Broken(format!("cannot read the lease's TTL: {e}")))?
                }
                _ => None,
            };
            ttls.push(ttl);
        }
        Ok(Some(ttls))
    }

    /// Finishes the revision being taken in (if any) and delivers the batches it cut.
    async fn end_revision(&mut self) -> Result<(), Absorb> {
        if self.buffer.open_revision().is_none() {
            return Ok(());
        }
        let cuts = self.buffer.end_revision();
        self.captured_through
            .store(self.buffer.next_revision() - 1, Ordering::Release);
        for batch in cuts {
            self.deliver(batch).await.map_err(Absorb::Fatal)?;
        }
        Ok(())
    }

    /// Cuts the buffer now (if it holds anything) and delivers the batch.
    async fn cut(&mut self, reason: CutReason) -> Result<CutOutcome, CaptureError> {
        match self.buffer.cut(reason) {
            Some(batch) => {
                let info = batch.info();
                self.deliver(batch).await?;
                Ok(CutOutcome::Cut(info))
            }
            None => Ok(CutOutcome::NoEvents {
                next_revision: self.buffer.next_revision(),
            }),
        }
    }

    async fn deliver(&mut self, batch: DeltaBatch) -> Result<(), CaptureError> {
        tracing::debug!(
            endpoint = %self.client.endpoint(),
            start = batch.start_revision,
            last = batch.last_revision,
            events = batch.events.len(),
            bytes = batch.encoded.len(),
            reason = ?batch.reason,
            "delta batch cut"
        );
        let start = batch.start_revision;
        self.batches
            .send(batch)
            .await
            .map_err(|_| CaptureError::ConsumerGone {
                next_revision: start,
            })?;
        self.ticker.restart(self.catch_up_began);
        Ok(())
    }
}

impl KeyValueFields for etcd_client::KeyValue {
    fn key(&self) -> &[u8] {
        self.key()
    }
    fn create_revision(&self) -> i64 {
        self.create_revision()
    }
    fn mod_revision(&self) -> i64 {
        self.mod_revision()
    }
    fn version(&self) -> i64 {
        self.version()
    }
    fn value(&self) -> &[u8] {
        self.value()
    }
    fn lease(&self) -> i64 {
        self.lease()
    }
}

enum Step {
    Control(Option<Control>),
    Tick,
    CatchUp,
}

enum Absorb {
    /// This catch-up failed; the next one starts where capture stands.
    Broken(String),
    /// Capture cannot go on.
    Fatal(CaptureError),
}

/// The delta period timer.
enum Ticker {
    Every(Interval),
    Ticks(Option<mpsc::Receiver<()>>),
}

impl Ticker {
    fn new(schedule: CutSchedule) -> Ticker {
        match schedule {
            CutSchedule::Every(period) => {
                let period = period.max(Duration::from_millis(1));
                let mut interval = tokio::time::interval_at(Instant::now() + period, period);
                interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
                Ticker::Every(interval)
            }
            CutSchedule::Ticks(rx) => Ticker::Ticks(Some(rx)),
        }
    }

    /// Completes when the period has elapsed. Cancel-safe.
    async fn tick(&mut self) {
        match self {
            Ticker::Every(interval) => {
                interval.tick().await;
            }
            Ticker::Ticks(rx) => {
                let closed = match rx.as_mut() {
                    Some(rx) => rx.recv().await.is_none(),
                    None => true,
                };
                if closed {
                    *rx = None;
                    pending::<()>().await;
                }
            }
        }
    }

    /// Starts the period over from `from` (after any cut).
    fn restart(&mut self, from: Instant) {
        if let Ticker::Every(interval) = self {
            interval.reset_at(from + interval.period());
        }
    }
}
