//! Applies replayed revisions by writing them into the temporary member's WAL as committed
//! entries and letting etcd apply them when it starts ([`super::wal`] has the format).
//!
//! Why: through etcd's API every source revision is one txn and one round trip (and, before
//! etcd 3.5's `--unsafe-no-fsync`, one fsync), which held the replay at about 1,900 events/s
//! whatever the machine. etcd applies committed log entries at start-up in one loop, batching
//! its database commits, with the same code that applies a txn received through its API, so
//! the restored revisions, versions, create revisions and leases are what the API path gives.
//! `docs/benchmarks/backup.md` has the measured rates.
//!
//! How, per chunk (a bounded number of WAL bytes, so neither quorate nor etcd holds more than
//! a chunk in memory):
//! 1. Append one entry per source revision: an `InternalRaftRequest` txn with all of the
//!    revision's PUTs and DELETEs; before a PUT whose lease this replay has not granted yet, a
//!    lease grant entry with the recorded ID and TTL (a lease the full snapshot already has
//!    stays as it is: etcd refuses the grant without changing anything). Then a hard state
//!    that commits them.
//! 2. Start etcd on the directory, wait until its applied index (metrics listener) reaches the
//!    last entry, check its revision is exactly the last source revision of the chunk, stop
//!    it cleanly.
//!
//! The member restores as one of two (the other is never started), so it cannot elect itself:
//! it applies what is committed and proposes nothing (no lease expiry, no publish), and nothing
//! but the written entries lands in the log.

use std::collections::HashSet;
use std::path::PathBuf;

use super::proto::{self, TxnOp};
use super::replay::{Pending, ReplayError};
use super::temp_etcd::{TempEtcd, TempEtcdConfig};
use super::tools::{self, EtcdTools};
use super::wal::{self, WalAppender};
use crate::delta::EVENT_DELETE;

/// WAL bytes written before etcd is run on them: bounds what etcd loads into memory at once.
pub const DEFAULT_CHUNK_BYTES: u64 = 64 * 1024 * 1024;

/// Runs of etcd on the last chunk before a database file still behind it is an error.
const FINISH_ATTEMPTS: usize = 5;

/// The revisions of the chunk being written.
#[derive(Debug)]
struct Chunk {
    appender: WalAppender,
    first_object: String,
    last_object: String,
    last_revision: i64,
}

/// Writes revisions into a stopped temporary member's WAL, chunk by chunk.
#[derive(Debug)]
pub struct WalApplier {
    etcd: TempEtcdConfig,
    tools: EtcdTools,
    wal_dir: PathBuf,
    chunk_bytes: u64,
    default_lease_ttl: i64,
    granted: HashSet<i64>,
    chunk: Option<Chunk>,
    head: i64,
    next_request_id: u64,
}

impl WalApplier {
    /// Prepares to write into the member `etcd` describes (restored as one of two members and
    /// not running); starts it once with an empty entry to learn its head revision.
    pub async fn start(
        etcd: TempEtcdConfig,
        tools: EtcdTools,
        chunk_bytes: u64,
        default_lease_ttl: i64,
    ) -> Result<WalApplier, ReplayError> {
        let wal_dir = etcd.data_dir.join("member").join("wal");
        let mut applier = WalApplier {
            etcd,
            tools,
            wal_dir,
            chunk_bytes: chunk_bytes.max(1),
            default_lease_ttl,
            granted: HashSet::new(),
            chunk: None,
            head: 0,
            next_request_id: 1,
        };
        // An empty normal entry changes nothing (etcd applies it as a no-op) but gives the
        // applied index something to reach.
        let end = wal::read_end(&applier.wal_dir).map_err(|e| wal_err("", 0, e))?;
        let mut appender = WalAppender::open(&end).map_err(|e| wal_err("", 0, e))?;
        appender.append_entry(&[]).map_err(|e| wal_err("", 0, e))?;
        let last = appender.commit().map_err(|e| wal_err("", 0, e))?;
        applier.head = TempEtcd::apply_committed(applier.etcd.clone(), last)
            .await
            .map_err(|e| ReplayError::Etcd {
                operation: "starting the restored member to read its revision",
                object: String::new(),
                revision: 0,
                message: e.to_string(),
            })?;
        Ok(applier)
    }

    /// The member's revision after the last run of etcd.
    pub fn head(&self) -> i64 {
        self.head
    }

    /// Writes one source revision (and any lease grants it needs); runs a full chunk. Returns
    /// the lease grants written.
    pub(crate) async fn apply(&mut self, pending: &Pending) -> Result<u64, ReplayError> {
        let mut grants = 0;
        let err = |e| wal_err(&pending.object, pending.revision, e);
        if self.chunk.is_none() {
            let end = wal::read_end(&self.wal_dir).map_err(err)?;
            self.chunk = Some(Chunk {
                appender: WalAppender::open(&end).map_err(err)?,
                first_object: pending.object.clone(),
                last_object: pending.object.clone(),
                last_revision: 0,
            });
        }
        let mut ops = Vec::with_capacity(pending.events.len());
        for event in &pending.events {
            let kv = event.etcd_event.kv.as_ref().expect("validated");
            if event.etcd_event.kind == EVENT_DELETE {
                ops.push(TxnOp::Delete { key: &kv.key });
                continue;
            }
            if kv.lease != 0 && self.granted.insert(kv.lease) {
                let ttl = event
                    .lease_ttl
                    .filter(|t| *t > 0)
                    .unwrap_or(self.default_lease_ttl);
                let id = self.request_id();
                let grant = proto::lease_grant_request(id, kv.lease, ttl);
                let chunk = self.chunk.as_mut().expect("opened above");
                chunk.appender.append_entry(&grant).map_err(err)?;
                grants += 1;
            }
            ops.push(TxnOp::Put {
                key: &kv.key,
                value: &kv.value,
                lease: kv.lease,
            });
        }
        let id = self.request_id();
        let chunk = self.chunk.as_mut().expect("opened above");
        chunk
            .appender
            .append_entry(&proto::txn_request(id, &ops))
            .map_err(err)?;
        chunk.last_object.clone_from(&pending.object);
        chunk.last_revision = pending.revision;
        if chunk.appender.bytes_written() >= self.chunk_bytes {
            self.run_chunk().await?;
        }
        Ok(grants)
    }

    /// Runs etcd on what was written and checks it reached the last written revision.
    pub(crate) async fn run_chunk(&mut self) -> Result<(), ReplayError> {
        let Some(chunk) = self.chunk.take() else {
            return Ok(());
        };
        let bytes = chunk.appender.bytes_written();
        let last_index = chunk
            .appender
            .commit()
            .map_err(|e| wal_err(&chunk.last_object, chunk.last_revision, e))?;
        let objects = if chunk.first_object == chunk.last_object {
            chunk.first_object.clone()
        } else {
            format!("{} … {}", chunk.first_object, chunk.last_object)
        };
        let started = std::time::Instant::now();
        let actual = TempEtcd::apply_committed(self.etcd.clone(), last_index)
            .await
            .map_err(|e| ReplayError::Etcd {
                operation: "applying the replayed revisions",
                object: objects.clone(),
                revision: chunk.last_revision,
                message: e.to_string(),
            })?;
        tracing::info!(
            revision = actual,
            wal_bytes = bytes,
            seconds = started.elapsed().as_secs_f64(),
            "restore: etcd applied a chunk of replayed revisions"
        );
        if actual != chunk.last_revision {
            return Err(ReplayError::RevisionMismatch {
                object: objects,
                expected: chunk.last_revision,
                actual,
            });
        }
        self.head = actual;
        Ok(())
    }

    /// Runs the last chunk, then makes sure the member's database file holds the last
    /// revision: etcd is killed after applying (see [`TempEtcd::apply_committed`]), and runs
    /// again (applying what its database lacks from the WAL) until the file shows it.
    pub(crate) async fn finish(&mut self) -> Result<(), ReplayError> {
        let last_object = self
            .chunk
            .as_ref()
            .map(|c| c.last_object.clone())
            .unwrap_or_default();
        self.run_chunk().await?;
        let db = self.etcd.data_dir.join("member").join("snap").join("db");
        let last_index = wal::read_end(&self.wal_dir)
            .map_err(|e| wal_err(&last_object, self.head, e))?
            .hard_state
            .commit;
        let mut on_disk = 0;
        for _ in 0..FINISH_ATTEMPTS {
            on_disk = tools::snapshot_revision(&self.tools, &db, "the replayed database")
                .await
                .map_err(|e| ReplayError::Etcd {
                    operation: "reading the replayed database's revision",
                    object: last_object.clone(),
                    revision: self.head,
                    message: e.to_string(),
                })?;
            if on_disk >= self.head {
                return Ok(());
            }
            TempEtcd::apply_committed(self.etcd.clone(), last_index)
                .await
                .map_err(|e| ReplayError::Etcd {
                    operation: "applying the replayed revisions again",
                    object: last_object.clone(),
                    revision: self.head,
                    message: e.to_string(),
                })?;
        }
        Err(ReplayError::RevisionMismatch {
            object: format!("{last_object} (the database file after {FINISH_ATTEMPTS} runs)"),
            expected: self.head,
            actual: on_disk,
        })
    }

    fn request_id(&mut self) -> u64 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }
}

fn wal_err(object: &str, revision: i64, e: wal::WalError) -> ReplayError {
    ReplayError::Etcd {
        operation: "writing the restored member's log",
        object: object.to_string(),
        revision,
        message: e.to_string(),
    }
}
