//! The load the backup benchmark puts on etcd: filling the database to the wanted size, and
//! concurrent clients writing 1 KiB values for a fixed time or a fixed number of writes.
//!
//! Values are slices of a 1 MiB pool of pseudo-random alphanumeric text (about 6 bits of
//! entropy per byte, so gzip shrinks them to roughly three quarters): cheap to make, not
//! trivially compressible, the same in every run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, Txn, TxnOp};
use quorate_etcd::{MemberClient, MemberStatus};
use tokio::task::JoinSet;

use crate::error::{BenchError, Result};

/// Bound on one write (a put, or one fill transaction).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Concurrent transactions while filling.
const FILL_WORKERS: usize = 8;
/// Puts per fill transaction (etcd's default `--max-txn-ops` is 128; 32 × ≤ 4 KiB stays far
/// below the default 1.5 MiB request limit).
const FILL_PER_TXN: u64 = 32;
/// Smallest and largest fill value.
const FILL_MIN_VALUE: usize = 1024;
const FILL_MAX_VALUE: usize = 4096;
/// Distinct keys each load client cycles through.
const LOAD_KEYS_PER_CLIENT: u64 = 1000;
/// Distinct write errors kept for the report.
const KEPT_ERRORS: usize = 3;

/// A deterministic 64-bit mix (splitmix64).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Pseudo-random alphanumeric text that values are cut from.
#[derive(Clone, Debug)]
pub struct ValuePool {
    pool: Arc<[u8]>,
}

const POOL_SIZE: usize = 1 << 20;
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

impl ValuePool {
    /// The pool for `seed`.
    pub fn new(seed: u64) -> ValuePool {
        let pool: Vec<u8> = (0..POOL_SIZE as u64)
            .map(|i| ALPHABET[(mix(seed ^ mix(i)) % ALPHABET.len() as u64) as usize])
            .collect();
        ValuePool { pool: pool.into() }
    }

    /// Value number `n`, `len` bytes long (at most the pool's size).
    pub fn value(&self, n: u64, len: usize) -> Vec<u8> {
        let len = len.min(self.pool.len());
        let start = (mix(n) as usize) % (self.pool.len() - len + 1);
        self.pool[start..start + len].to_vec()
    }
}

/// A client connected to `url` with a bound on every call.
pub async fn connect(url: &str) -> Result<Client> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(WRITE_TIMEOUT);
    Ok(Client::connect([url], Some(options)).await?)
}

/// How the database was filled.
#[derive(Clone, Debug)]
pub struct Filled {
    /// Keys written.
    pub keys: u64,
    /// Value bytes written.
    pub value_bytes: u64,
    /// Start of the first transaction until the database had reached its size.
    pub elapsed: Duration,
    /// The member's status afterwards (database size, revision).
    pub status: MemberStatus,
}

/// Writes keys with 1–4 KiB values, [`FILL_PER_TXN`] per transaction and [`FILL_WORKERS`]
/// transactions at a time, until the member reports a database of at least `target_bytes`.
pub async fn fill(url: &str, member: &MemberClient, target_bytes: u64) -> Result<Filled> {
    let client = connect(url).await?;
    let pool = ValuePool::new(1);
    let done = Arc::new(AtomicBool::new(false));
    let next_key = Arc::new(AtomicU64::new(0));
    let keys = Arc::new(AtomicU64::new(0));
    let value_bytes = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for _ in 0..FILL_WORKERS {
        let (mut client, pool) = (client.clone(), pool.clone());
        let (done, next_key, keys, value_bytes) = (
            done.clone(),
            next_key.clone(),
            keys.clone(),
            value_bytes.clone(),
        );
        workers.spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let first = next_key.fetch_add(FILL_PER_TXN, Ordering::SeqCst);
                let mut bytes = 0;
                let ops: Vec<TxnOp> = (first..first + FILL_PER_TXN)
                    .map(|k| {
                        let span = (FILL_MAX_VALUE - FILL_MIN_VALUE + 1) as u64;
                        let len = FILL_MIN_VALUE + (mix(k ^ 0x5eed) % span) as usize;
                        bytes += len as u64;
                        TxnOp::put(format!("bench/fill/{k:010}"), pool.value(k, len), None)
                    })
                    .collect();
                match tokio::time::timeout(WRITE_TIMEOUT, client.txn(Txn::new().and_then(ops)))
                    .await
                {
                    Ok(Ok(_)) => {
                        keys.fetch_add(FILL_PER_TXN, Ordering::SeqCst);
                        value_bytes.fetch_add(bytes, Ordering::SeqCst);
                    }
                    Ok(Err(e)) => {
                        return Err(BenchError::failed(format!("fill transaction: {e}")));
                    }
                    Err(_) => {
                        return Err(BenchError::failed(format!(
                            "a fill transaction got no answer within {WRITE_TIMEOUT:?}"
                        )));
                    }
                }
            }
            Ok(())
        });
    }
    let mut last_progress = Instant::now();
    loop {
        tokio::select! {
            finished = workers.join_next() => {
                // A worker only ends early on an error.
                done.store(true, Ordering::SeqCst);
                if let Some(Ok(Err(e))) = finished {
                    return Err(e);
                }
                return Err(BenchError::failed("a fill worker ended before the database was full"));
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let status = member.status().await?;
        if status.db_size as u64 >= target_bytes {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(5) {
            last_progress = Instant::now();
            eprintln!(
                "  fill: {} keys, database {:.1} MB after {:.0} s",
                keys.load(Ordering::SeqCst),
                status.db_size as f64 / 1e6,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let elapsed = started.elapsed();
    done.store(true, Ordering::SeqCst);
    while let Some(finished) = workers.join_next().await {
        if let Ok(Err(e)) = finished {
            return Err(e);
        }
    }
    Ok(Filled {
        keys: keys.load(Ordering::SeqCst),
        value_bytes: value_bytes.load(Ordering::SeqCst),
        elapsed,
        status: member.status().await?,
    })
}

/// When a put load ends.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// No put is started after this long.
    After(Duration),
    /// After this many puts in total (over all clients).
    Writes(u64),
}

/// What a put load achieved.
#[derive(Clone, Debug, Default)]
pub struct LoadResult {
    /// Puts etcd acknowledged.
    pub ok: u64,
    /// Puts that failed or timed out.
    pub failed: u64,
    /// Start until the last client finished.
    pub elapsed: Duration,
    /// Latency of every acknowledged put, in microseconds, sorted.
    pub latencies_us: Vec<u32>,
    /// The first distinct errors.
    pub errors: Vec<String>,
}

impl LoadResult {
    /// Acknowledged puts per second.
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `p`-th percentile latency (0 < p ≤ 100).
    pub fn percentile(&self, p: f64) -> Duration {
        percentile_us(&self.latencies_us, p)
    }
}

/// The `p`-th percentile (nearest rank) of sorted microsecond values.
pub fn percentile_us(sorted: &[u32], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    Duration::from_micros(u64::from(sorted[index]))
}

/// `clients` clients, each on its own connection, putting `value_len`-byte values one after
/// the other under `bench/load/<tag>/<client>/<n>` until `stop`.
pub async fn put_load(
    url: &str,
    clients: usize,
    value_len: usize,
    tag: &str,
    stop: Stop,
) -> Result<LoadResult> {
    let pool = ValuePool::new(2);
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(connect(url).await?);
    }
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (index, mut client) in connections.into_iter().enumerate() {
        let (pool, issued) = (pool.clone(), issued.clone());
        let prefix = format!("bench/load/{tag}/{index:02}/");
        tasks.spawn(async move {
            let mut result = LoadResult::default();
            let mut i: u64 = 0;
            loop {
                let go = match stop {
                    Stop::After(d) => started.elapsed() < d,
                    Stop::Writes(n) => issued.fetch_add(1, Ordering::SeqCst) < n,
                };
                if !go {
                    break;
                }
                let key = format!("{prefix}{:04}", i % LOAD_KEYS_PER_CLIENT);
                let value = pool.value(mix(index as u64) ^ i, value_len);
                i += 1;
                let t = Instant::now();
                let error =
                    match tokio::time::timeout(WRITE_TIMEOUT, client.put(key, value, None)).await {
                        Ok(Ok(_)) => {
                            result.ok += 1;
                            let us = t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                            result.latencies_us.push(us);
                            continue;
                        }
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => format!("no answer within {WRITE_TIMEOUT:?}"),
                    };
                result.failed += 1;
                if result.errors.len() < KEPT_ERRORS && !result.errors.contains(&error) {
                    result.errors.push(error);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            result
        });
    }
    let mut total = LoadResult::default();
    while let Some(done) = tasks.join_next().await {
        let part = done.map_err(|e| BenchError::failed(format!("a load client failed: {e}")))?;
        total.ok += part.ok;
        total.failed += part.failed;
        total.latencies_us.extend(part.latencies_us);
        for e in part.errors {
            if total.errors.len() < KEPT_ERRORS && !total.errors.contains(&e) {
                total.errors.push(e);
            }
        }
    }
    total.elapsed = started.elapsed();
    total.latencies_us.sort_unstable();
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_alphanumeric_and_sized() {
        let pool = ValuePool::new(7);
        let a = pool.value(42, 1024);
        assert_eq!(a.len(), 1024);
        assert_eq!(a, ValuePool::new(7).value(42, 1024));
        assert!(a.iter().all(u8::is_ascii_alphanumeric));
        assert_ne!(a, pool.value(43, 1024));
        assert_eq!(pool.value(1, POOL_SIZE + 5).len(), POOL_SIZE);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile_us(&values, 50.0), Duration::from_micros(50));
        assert_eq!(percentile_us(&values, 99.0), Duration::from_micros(99));
        assert_eq!(percentile_us(&values, 100.0), Duration::from_micros(100));
        assert_eq!(percentile_us(&[], 50.0), Duration::ZERO);
        assert_eq!(percentile_us(&[7], 1.0), Duration::from_micros(7));
    }
}
