//! What the benchmark watches while a scale-out runs, identically for both methods:
//!
//! - [`Writer`]: one client putting keys without pause against the initial member;
//! - [`LeaderMonitor`]: the leader ID and raft term every member reports, every 100 ms;
//! - [`wait_for_voters`]: the member list, every 50 ms, until it shows the wanted number of
//!   started voting members; it also notes when each new member was added, started and
//!   promoted, which shows where the time went.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use quorate_etcd::{EtcdTimeouts, Member, MemberClient, MemberStatus};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::error::{BenchError, Result};

/// Bound on one write, retries included; a put not acknowledged within it counts as failed.
pub const PUT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one attempt of a write, after which it is retried (as `quorate canary` does): etcd
/// drops a proposal that reaches a leader while it hands leadership over, without telling the
/// member that forwarded it, so that attempt would otherwise wait out etcd's request timeout.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the leader monitor asks every member for its status.
pub const LEADER_POLL: Duration = Duration::from_millis(100);
/// How often the member list is read to decide when the scale-out is done.
pub const MEMBER_POLL: Duration = Duration::from_millis(50);
/// How many distinct write errors are kept for the report.
const KEPT_ERRORS: usize = 3;

/// Short bounds for the observers' own calls, so a slow member never stalls a poll round.
fn probe_timeouts() -> EtcdTimeouts {
    EtcdTimeouts {
        connect: Duration::from_millis(500),
        request: Duration::from_secs(1),
        long_request: Duration::from_secs(5),
    }
}

/// Writes counted so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Puts etcd acknowledged.
    pub ok: u64,
    /// Puts not acknowledged within [`PUT_TIMEOUT`], retries included.
    pub failed: u64,
    /// Attempts that failed or timed out and were retried.
    pub retried: u64,
    /// The longest time one acknowledged put took from its first attempt, in milliseconds,
    /// since the writer started.
    pub longest_wait_ms: u64,
}

impl std::ops::Sub for WriteCounts {
    type Output = WriteCounts;
    fn sub(self, earlier: WriteCounts) -> WriteCounts {
        WriteCounts {
            ok: self.ok - earlier.ok,
            failed: self.failed - earlier.failed,
            retried: self.retried - earlier.retried,
            longest_wait_ms: self.longest_wait_ms,
        }
    }
}

/// One client writing as fast as etcd acknowledges, counting successes and failures.
pub struct Writer {
    stop: Arc<AtomicBool>,
    counters: Arc<WriteCounters>,
    errors: Arc<Mutex<Vec<String>>>,
    task: Option<JoinHandle<()>>,
}

/// The writer task's counters, read while it runs.
#[derive(Default)]
struct WriteCounters {
    ok: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    longest_wait_ms: AtomicU64,
}

impl Writer {
    /// Connects to `url`, makes sure a first put succeeds, then writes until stopped.
    pub async fn start(url: &str) -> Result<Writer> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(ATTEMPT_TIMEOUT);
        let mut client = Client::connect([url], Some(options)).await?;
        tokio::time::timeout(PUT_TIMEOUT, client.put("bench/warm-up", "x", None))
            .await
            .map_err(|_| BenchError::failed(format!("the first write to {url} timed out")))??;

        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(WriteCounters::default());
        let errors = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(write_loop(
            client,
            stop.clone(),
            counters.clone(),
            errors.clone(),
        ));
        Ok(Writer {
            stop,
            counters,
            errors,
            task: Some(task),
        })
    }

    /// The counts so far.
    pub fn counts(&self) -> WriteCounts {
        let c = &self.counters;
        WriteCounts {
            ok: c.ok.load(Ordering::SeqCst),
            failed: c.failed.load(Ordering::SeqCst),
            retried: c.retried.load(Ordering::SeqCst),
            longest_wait_ms: c.longest_wait_ms.load(Ordering::SeqCst),
        }
    }

    /// Stops writing (a put in flight completes) and returns the final counts and the first
    /// distinct errors.
    pub async fn stop(mut self) -> (WriteCounts, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let counts = self.counts();
        let errors = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        (counts, errors)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

async fn write_loop(
    mut client: Client,
    stop: Arc<AtomicBool>,
    counters: Arc<WriteCounters>,
    errors: Arc<Mutex<Vec<String>>>,
) {
    let value = vec![b'v'; 128];
    let mut i: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let key = format!("bench/{:04}", i % 1000);
        i += 1;
        let started = Instant::now();
        loop {
            let error = match tokio::time::timeout(
                ATTEMPT_TIMEOUT,
                client.put(key.clone(), value.clone(), None),
            )
            .await
            {
                Ok(Ok(_)) => {
                    counters.ok.fetch_add(1, Ordering::SeqCst);
                    let waited = started.elapsed().as_millis() as u64;
                    counters.longest_wait_ms.fetch_max(waited, Ordering::SeqCst);
                    break;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {ATTEMPT_TIMEOUT:?}"),
            };
            keep_error(&errors, error);
            // Do not spin on an error that comes back at once (e.g. connection refused).
            tokio::time::sleep(Duration::from_millis(10)).await;
            // A write in flight when the writer is told to stop is finished, not abandoned: an
            // abandoned retry would count as a failure no client saw.
            if started.elapsed() >= PUT_TIMEOUT {
                counters.failed.fetch_add(1, Ordering::SeqCst);
                break;
            }
            counters.retried.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Keeps the first few distinct errors for the report.
fn keep_error(errors: &Mutex<Vec<String>>, error: String) {
    if let Ok(mut kept) = errors.lock()
        && kept.len() < KEPT_ERRORS
        && !kept.contains(&error)
    {
        kept.push(error);
    }
}

/// What the leader monitor saw.
#[derive(Clone, Debug, Default)]
pub struct LeaderReport {
    /// Times the leader ID changed (a different member became leader).
    pub leader_changes: u32,
    /// How far the highest raft term rose (each rise is at least one election).
    pub term_increases: u64,
    /// One line per change, with the time it was seen.
    pub events: Vec<(Instant, String)>,
    /// Status calls that failed (members starting or busy); informational only.
    pub failed_probes: u64,
}

#[derive(Default)]
struct LeaderState {
    leader: Option<u64>,
    max_term: u64,
    report: LeaderReport,
}

impl LeaderState {
    /// Folds one member's answer into the state. Answers without a leader, or from a term
    /// older than one already seen (a member that has not caught up), say nothing new.
    fn observe(&mut self, at: Instant, status: &MemberStatus) {
        if status.leader_id == 0 || status.raft_term < self.max_term {
            return;
        }
        if status.raft_term > self.max_term {
            if self.max_term != 0 {
                self.report.term_increases += status.raft_term - self.max_term;
                self.report.events.push((
                    at,
                    format!(
                        "raft term {} -> {} (seen by {})",
                        self.max_term, status.raft_term, status.endpoint
                    ),
                ));
            }
            self.max_term = status.raft_term;
        }
        if self.leader != Some(status.leader_id) {
            if let Some(before) = self.leader {
                self.report.leader_changes += 1;
                self.report.events.push((
                    at,
                    format!(
                        "leader {before:x} -> {:x} (seen by {})",
                        status.leader_id, status.endpoint
                    ),
                ));
            }
            self.leader = Some(status.leader_id);
        }
    }
}

/// Polls the status of every current member and counts leader changes and term increases
/// relative to what it saw when it started.
pub struct LeaderMonitor {
    stop: Arc<AtomicBool>,
    task: Option<JoinHandle<LeaderReport>>,
}

impl LeaderMonitor {
    /// Starts monitoring the cluster whose initial member serves `url`; returns once a baseline
    /// (a leader and a term) is known, so nothing before the start is counted.
    pub async fn start(url: &str) -> Result<LeaderMonitor> {
        let initial = MemberClient::connect(url, None, probe_timeouts()).await?;
        let mut state = LeaderState::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match initial.status().await {
                Ok(status) if status.has_leader() => {
                    state.observe(Instant::now(), &status);
                    break;
                }
                Ok(_) if Instant::now() < deadline => {}
                Err(_) if Instant::now() < deadline => {}
                Ok(_) => return Err(BenchError::failed(format!("{url} reports no leader"))),
                Err(e) => return Err(e.into()),
            }
            tokio::time::sleep(LEADER_POLL).await;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(monitor_loop(initial, state, stop.clone()));
        Ok(LeaderMonitor {
            stop,
            task: Some(task),
        })
    }

    /// Stops monitoring and returns what was seen.
    pub async fn stop(mut self) -> LeaderReport {
        self.stop.store(true, Ordering::SeqCst);
        match self.task.take() {
            Some(task) => task.await.unwrap_or_default(),
            None => LeaderReport::default(),
        }
    }
}

impl Drop for LeaderMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

async fn monitor_loop(
    initial: MemberClient,
    mut state: LeaderState,
    stop: Arc<AtomicBool>,
) -> LeaderReport {
    let mut clients: HashMap<String, MemberClient> = HashMap::new();
    clients.insert(initial.endpoint().to_string(), initial.clone());
    let mut tick = tokio::time::interval(LEADER_POLL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        if let Ok(members) = initial.member_list().await {
            for url in members.iter().filter_map(|m| m.client_urls.first()) {
                if !clients.contains_key(url)
                    && let Ok(client) = MemberClient::connect(url, None, probe_timeouts()).await
                {
                    clients.insert(url.clone(), client);
                }
            }
        }
        let answers =
            futures::future::join_all(clients.values().map(|client| client.status())).await;
        let at = Instant::now();
        for answer in answers {
            match answer {
                Ok(status) => state.observe(at, &status),
                Err(_) => state.report.failed_probes += 1,
            }
        }
    }
    state.report
}

/// When one new member reached each step, measured from the start of the scale-out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberTimeline {
    /// Member ID.
    pub id: u64,
    /// Its name, once started.
    pub name: String,
    /// First seen in the member list (added as a learner, or as a voter if added so).
    pub added: Duration,
    /// First seen with a name: its etcd started and published itself.
    pub started: Option<Duration>,
    /// First seen as a voting member.
    pub voter: Option<Duration>,
}

/// The result of [`wait_for_voters`].
#[derive(Clone, Debug)]
pub struct Converged {
    /// From the start until the member list showed the wanted voters.
    pub elapsed: Duration,
    /// The members that joined after the start, in the order they were added.
    pub joined: Vec<MemberTimeline>,
}

/// True when `members` are exactly `want` started voting members.
pub fn is_converged(members: &[Member], want: usize) -> bool {
    members.len() == want && members.iter().all(|m| !m.is_learner && m.is_started())
}

/// Reads the member list from `url` every [`MEMBER_POLL`] until it shows `want` started voting
/// members; times are measured from `t0`. Members present at the first read are the old ones.
pub async fn wait_for_voters(
    url: &str,
    t0: Instant,
    want: usize,
    timeout: Duration,
) -> Result<Converged> {
    let client = MemberClient::connect(url, None, probe_timeouts()).await?;
    let mut known: Option<Vec<u64>> = None;
    let mut joined: BTreeMap<u64, MemberTimeline> = BTreeMap::new();
    let mut tick = tokio::time::interval(MEMBER_POLL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let members = match client.member_list().await {
            Ok(members) => members,
            Err(e) if t0.elapsed() > timeout => {
                return Err(BenchError::failed(format!(
                    "the member list never showed {want} started voters within {timeout:?}; \
                     last error: {e}"
                )));
            }
            Err(_) => continue,
        };
        let now = t0.elapsed();
        let old = known.get_or_insert_with(|| members.iter().map(|m| m.id).collect());
        for m in members.iter().filter(|m| !old.contains(&m.id)) {
            let entry = joined.entry(m.id).or_insert_with(|| MemberTimeline {
                id: m.id,
                added: now,
                ..MemberTimeline::default()
            });
            if m.is_started() && entry.started.is_none() {
                entry.started = Some(now);
                entry.name = m.name.clone();
            }
            if !m.is_learner && entry.voter.is_none() {
                entry.voter = Some(now);
            }
        }
        if is_converged(&members, want) {
            let mut joined: Vec<MemberTimeline> = joined.into_values().collect();
            joined.sort_by_key(|m| m.added);
            return Ok(Converged {
                elapsed: now,
                joined,
            });
        }
        if now > timeout {
            let shown: Vec<String> = members
                .iter()
                .map(|m| {
                    format!(
                        "{}{}{}",
                        if m.name.is_empty() {
                            "(unstarted)"
                        } else {
                            &m.name
                        },
                        if m.is_learner { " learner" } else { "" },
                        format_args!(" {:x}", m.id)
                    )
                })
                .collect();
            return Err(BenchError::failed(format!(
                "the member list never showed {want} started voters within {timeout:?}; \
                 last seen: {}",
                shown.join(", ")
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(leader: u64, term: u64) -> MemberStatus {
        MemberStatus {
            endpoint: "http://127.0.0.1:1".into(),
            member_id: 1,
            cluster_id: 9,
            leader_id: leader,
            raft_term: term,
            raft_index: 0,
            raft_applied_index: 0,
            revision: 0,
            db_size: 0,
            db_size_in_use: 0,
            is_learner: false,
            version: "3.4.23".into(),
            errors: Vec::new(),
            storage_version: String::new(),
            downgrade_target: None,
        }
    }

    fn member(id: u64, name: &str, learner: bool) -> Member {
        Member {
            id,
            name: name.into(),
            peer_urls: vec![],
            client_urls: vec![],
            is_learner: learner,
        }
    }

    #[test]
    fn baseline_is_not_a_change() {
        let mut s = LeaderState::default();
        let now = Instant::now();
        s.observe(now, &status(1, 2));
        s.observe(now, &status(1, 2));
        assert_eq!(s.report.leader_changes, 0);
        assert_eq!(s.report.term_increases, 0);
    }

    #[test]
    fn new_leader_and_terms_are_counted() {
        let mut s = LeaderState::default();
        let now = Instant::now();
        s.observe(now, &status(1, 2));
        s.observe(now, &status(3, 4));
        assert_eq!(s.report.leader_changes, 1);
        assert_eq!(s.report.term_increases, 2);
        assert_eq!(s.report.events.len(), 2);
    }

    #[test]
    fn lagging_and_leaderless_answers_are_ignored() {
        let mut s = LeaderState::default();
        let now = Instant::now();
        s.observe(now, &status(1, 5));
        s.observe(now, &status(0, 6)); // a fresh member without a leader yet
        s.observe(now, &status(2, 3)); // an old term from a member catching up
        assert_eq!(s.report.leader_changes, 0);
        assert_eq!(s.report.term_increases, 0);
    }

    #[test]
    fn converged_needs_started_voters_only() {
        let voters = [member(1, "a", false), member(2, "b", false)];
        assert!(is_converged(&voters, 2));
        assert!(!is_converged(&voters, 3));
        assert!(!is_converged(
            &[member(1, "a", false), member(2, "b", true)],
            2
        ));
        assert!(!is_converged(
            &[member(1, "a", false), member(2, "", false)],
            2
        ));
    }

    #[test]
    fn write_counts_subtract() {
        let later = WriteCounts {
            ok: 10,
            failed: 2,
            retried: 5,
            longest_wait_ms: 2100,
        };
        let earlier = WriteCounts {
            ok: 4,
            failed: 1,
            retried: 1,
            longest_wait_ms: 30,
        };
        assert_eq!(
            later - earlier,
            WriteCounts {
                ok: 6,
                failed: 1,
                retried: 4,
                longest_wait_ms: 2100,
            }
        );
    }
}
