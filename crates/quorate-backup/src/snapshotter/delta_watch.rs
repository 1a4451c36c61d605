//! Delta capture: a watch over the whole keyspace from a given revision, cut into
//! [`DeltaBatch`]es when the delta period elapses, when the encoded batch reaches the memory
//! limit, or on request.
//!
//! Guarantees, for the caller that uploads the batches:
//! - **No gap, no overlap.** The first batch starts at the configured start revision, every
//!   next one at the previous `last_revision + 1`. When the watch breaks (member restart,
//!   network, lost leader) it is re-opened at the first revision not captured yet; events
//!   etcd sends again are never taken twice.
//! - **Transactions stay whole.** Cuts happen only between revisions.
//! - **Compaction is reported, not skipped.** If the revision to continue from has been
//!   compacted, the capture ends with [`CaptureError::Compacted`]: only a full snapshot can
//!   cover the lost events.
//! - **Bounded memory.** One buffer up to the memory limit plus the batches queued in the
//!   channel; while the channel is full the watch is not read, and etcd holds the events.
//!
//! Whatever ends the capture (stop, failure), the events already captured are delivered as a
//! last batch first, so a successor capture continues at [`CaptureEnd::next_revision`] (or at
//! the revision in the error).

use std::future::pending;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{EventType, WatchResponse, WatchStream};
use quorate_etcd::{EtcdError, MemberClient};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior, Sleep};

use super::buffer::{CutReason, DeltaBatch, DeltaBatchInfo, DeltaBuffer};
use super::clock::{Clock, JsonTimes, SystemClock};
use super::error::CaptureError;
use super::lease_ttl::LeaseTtlCache;
use crate::delta::{EVENT_DELETE, EVENT_PUT, KeyValueFields, write_event_json};

/// etcd-backup-restore's default delta period.
pub const DEFAULT_DELTA_PERIOD: Duration = Duration::from_secs(20);
/// etcd-backup-restore's default delta memory limit (10 MiB).
pub const DEFAULT_DELTA_MEMORY_LIMIT: usize = 10 * 1024 * 1024;

/// First wait before re-opening a broken watch after the immediate retry failed; doubles up
/// to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);
/// Leases remembered before the TTL cache starts over.
const LEASE_CACHE_CAPACITY: usize = 4096;

/// When the delta period elapses.
#[derive(Debug)]
pub enum CutSchedule {
    /// Every this long after the previous cut (of any kind).
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
    /// Time stamps for events.
    pub clock: Arc<dyn Clock>,
    /// After this long without any message from etcd, ask it for a progress report; with no
    /// answer within another `idle_probe`, the watch counts as broken and is re-opened. This
    /// catches a member that hangs without closing the connection.
    pub idle_probe: Duration,
    /// Give up (with [`CaptureError::Unavailable`]) after the watch has not worked for this
    /// long.
    pub give_up_after: Duration,
    /// Batches queued for the consumer before capture waits for it.
    pub channel_capacity: usize,
}

impl DeltaConfig {
    /// etcd-backup-restore's defaults (20 s period, 10 MiB limit), starting at
    /// `start_revision`.
    pub fn new(start_revision: i64) -> DeltaConfig {
        DeltaConfig {
            start_revision,
            memory_limit: DEFAULT_DELTA_MEMORY_LIMIT,
            schedule: CutSchedule::Every(DEFAULT_DELTA_PERIOD),
            clock: Arc::new(SystemClock),
            idle_probe: Duration::from_secs(10),
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
            .field("idle_probe", &self.idle_probe)
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
    /// Cuts the events captured so far into a batch now. When this returns
    /// [`CutOutcome::Cut`], the batch is already in the channel, so the batch receiver must be
    /// drained by another task (or have room) while waiting here.
    pub async fn request_cut(&self) -> Result<CutOutcome, CaptureError> {
        let (reply, answer) = oneshot::channel();
        self.control
            .send(Control::Cut(reply))
            .await
            .map_err(|_| CaptureError::NotRunning)?;
        answer.await.map_err(|_| CaptureError::NotRunning)
    }

    /// Asks the capture to stop: it delivers what it has captured as a last batch, closes the
    /// batch channel and ends its task with [`CaptureEnd`]. Returns at once; keep draining the
    /// batch receiver until it closes. Does nothing when the capture has already ended.
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
    clock: Arc<dyn Clock>,
    /// Event time stamps, formatted once per second.
    times: JsonTimes,
    idle_probe: Duration,
    give_up_after: Duration,
    leases: LeaseTtlCache,
    control: mpsc::Receiver<Control>,
    batches: mpsc::Sender<DeltaBatch>,
    /// Shared with the handles: the last revision captured.
    captured_through: Arc<AtomicI64>,
    /// Since when the watch has not worked, and the last reason.
    outage: Option<(Instant, String)>,
    /// The wait before the next attempt to re-open the watch.
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
            clock: config.clock,
            times: JsonTimes::default(),
            idle_probe: config.idle_probe,
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

    /// The capture loop; returns `Ok` when asked to stop.
    async fn capture(&mut self) -> Result<(), CaptureError> {
        let mut conn = Conn::Down {
            retry_at: Instant::now(),
        };
        loop {
            let step = match &mut conn {
                Conn::Up { stream, quiet, .. } => tokio::select! {
                    biased;
                    // The period before messages: a busy watch must not starve period cuts.
                    c = self.control.recv() => Step::Control(c),
                    _ = self.ticker.tick() => Step::Tick,
                    m = stream.message() => Step::Message(m),
                    _ = quiet.as_mut() => Step::Quiet,
                },
                Conn::Down { retry_at, .. } => tokio::select! {
                    biased;
                    c = self.control.recv() => Step::Control(c),
                    _ = self.ticker.tick() => Step::Tick,
                    _ = tokio::time::sleep_until(*retry_at) => Step::Retry,
                },
            };
            match step {
                Step::Control(None | Some(Control::Stop)) => return Ok(()),
                Step::Control(Some(Control::Cut(reply))) => {
                    let outcome = self.cut(CutReason::Requested).await?;
                    let _ = reply.send(outcome);
                }
                Step::Tick => {
                    self.cut(CutReason::Period).await?;
                }
                Step::Message(Ok(Some(response))) => {
                    if let Conn::Up {
                        quiet_deadline,
                        probed,
                        ..
                    } = &mut conn
                    {
                        *quiet_deadline = Instant::now() + self.idle_probe;
                        *probed = false;
                    }
                    match self.absorb(response).await {
                        // Only a response that was taken in proves the watch works; one that
                        // cancels it (e.g. permission denied) keeps the outage, and its backoff.
                        Ok(()) => self.outage = None,
                        Err(Absorb::Broken(reason)) => conn = self.broken(reason),
                        Err(Absorb::Fatal(e)) => return Err(e),
                    }
                }
                Step::Message(Ok(None)) => {
                    conn = self.broken("etcd closed the watch stream".to_string());
                }
                Step::Message(Err(e)) => {
                    let e = EtcdError::from_client("watch", self.client.endpoint(), e);
                    conn = self.broken(e.to_string());
                }
                Step::Quiet => match &mut conn {
                    // Messages came since the timer was set: it fired early, set it again.
                    Conn::Up {
                        quiet,
                        quiet_deadline,
                        ..
                    } if Instant::now() < *quiet_deadline => quiet.as_mut().reset(*quiet_deadline),
                    _ => conn = self.probe(conn).await,
                },
                Step::Retry => conn = self.reopen(conn).await?,
            }
        }
    }

    /// After a quiet spell: ask etcd for progress once; if that went unanswered too, the
    /// watch is dead.
    async fn probe(&mut self, conn: Conn) -> Conn {
        let Conn::Up {
            mut stream, probed, ..
        } = conn
        else {
            return conn;
        };
        if probed {
            return self.broken(format!(
                "no message from etcd for {:?}, not even an answer to a progress request",
                self.idle_probe * 2
            ));
        }
        if let Err(e) = stream.request_progress().await {
            return self.broken(format!("could not ask etcd for watch progress: {e}"));
        }
        Conn::up(stream, self.idle_probe, true)
    }

    /// Opens the watch at the first revision not captured yet.
    async fn reopen(&mut self, conn: Conn) -> Result<Conn, CaptureError> {
        if let Conn::Up { .. } = conn {
            return Ok(conn);
        }
        if let Some((since, last_error)) = &self.outage
            && since.elapsed() >= self.give_up_after
        {
            return Err(CaptureError::Unavailable {
                endpoint: self.client.endpoint().to_string(),
                waited: since.elapsed(),
                last_error: last_error.clone(),
                next_revision: self.buffer.next_revision(),
            });
        }
        let from = self.buffer.next_revision();
        match self.client.watch_all_from(from).await {
            Ok(stream) => {
                tracing::debug!(endpoint = %self.client.endpoint(), from, "watching");
                Ok(Conn::up(Box::new(stream), self.idle_probe, false))
            }
            Err(e) => {
                self.record_outage(e.to_string());
                Ok(self.backoff())
            }
        }
    }

    /// The watch broke: after a working spell re-open it at once, otherwise after a growing
    /// delay (a watch etcd cancels right after creating it must not be re-opened in a loop).
    fn broken(&mut self, reason: String) -> Conn {
        tracing::warn!(
            endpoint = %self.client.endpoint(),
            resume_at = self.buffer.next_revision(),
            "delta watch broke, re-opening it: {reason}"
        );
        let was_working = self.outage.is_none();
        self.record_outage(reason);
        if was_working {
            self.retry_delay = FIRST_RETRY_DELAY;
            Conn::Down {
                retry_at: Instant::now(),
            }
        } else {
            self.backoff()
        }
    }

    /// The next attempt after the current delay, which then grows.
    fn backoff(&mut self) -> Conn {
        let retry_at = Instant::now() + self.retry_delay;
        self.retry_delay = (self.retry_delay * 2).min(MAX_RETRY_DELAY);
        Conn::Down { retry_at }
    }

    fn record_outage(&mut self, reason: String) {
        match &mut self.outage {
            Some((_, last)) => *last = reason,
            None => self.outage = Some((Instant::now(), reason)),
        }
    }

    /// Takes one watch response into the buffer, delivering any batches the memory limit cuts.
    async fn absorb(&mut self, response: WatchResponse) -> Result<(), Absorb> {
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
        let time = self.times.render(self.clock.now());
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
    /// it was and the re-opened watch brings the whole response again.
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
        self.ticker.reset();
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

enum Conn {
    Up {
        /// Boxed: the stream is large and `Down` is the other state.
        stream: Box<WatchStream>,
        /// When the next quiet-spell action (probe or give up on the stream) is due: moved
        /// on by every message.
        quiet_deadline: Instant,
        /// Fires at `quiet_deadline` or earlier: it is set when the stream opens and when it
        /// fires early, not for every message (each setting costs a timer registration).
        quiet: Pin<Box<Sleep>>,
        /// A progress request is outstanding.
        probed: bool,
    },
    Down {
        retry_at: Instant,
    },
}

impl Conn {
    fn up(stream: Box<WatchStream>, idle_probe: Duration, probed: bool) -> Conn {
        let quiet_deadline = Instant::now() + idle_probe;
        Conn::Up {
            stream,
            quiet_deadline,
            quiet: Box::pin(tokio::time::sleep_until(quiet_deadline)),
            probed,
        }
    }
}

enum Step {
    Control(Option<Control>),
    Message(Result<Option<WatchResponse>, etcd_client::Error>),
    Tick,
    Quiet,
    Retry,
}

enum Absorb {
    /// The watch is unusable; re-open it where capture stands.
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

    /// Starts the period over (after any cut).
    fn reset(&mut self) {
        if let Ticker::Every(interval) = self {
            interval.reset();
        }
    }
}
