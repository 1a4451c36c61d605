//! The clients: each runs one operation at a time against the cluster (puts, deletes,
//! compare-and-put txns, linearizable and serializable gets on a few shared keys) and records
//! each with its call and return time and what came back. A write without an answer within the
//! write timeout is recorded as unknown, never as failed: it may still have applied.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{Event, Op, Outcome, Versioned};

/// Prefix of every key the workload touches.
pub const PREFIX: &str = "chaos/";

/// How the clients behave.
#[derive(Clone, Debug)]
pub struct WorkloadPlan {
    /// Client URLs, as the run last read them (they grow with a scale-out); a client picks
    /// them up whenever it connects.
    pub endpoints: Arc<std::sync::Mutex<Vec<String>>>,
    /// Number of shared keys.
    pub keys: u32,
    /// How long an operation may take before it counts as unknown.
    pub op_timeout: Duration,
    /// Pause between one client's operations.
    pub think: Duration,
    /// Seed of the operation mix.
    pub seed: u64,
}

/// What one client recorded.
#[derive(Debug, Default)]
pub struct ClientRecord {
    /// Its operations.
    pub events: Vec<Event>,
    /// Gets that failed (they change nothing, so they are not part of the history).
    pub failed_reads: u64,
    /// The longest time one acknowledged write took.
    pub longest_write: Duration,
}

/// Runs client `id` until `stop` is set, idle while `paused` is; `origin` is the run's time
/// zero.
pub async fn run_client(
    plan: WorkloadPlan,
    id: u32,
    origin: Instant,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
) -> ClientRecord {
    let mut rng = StdRng::seed_from_u64(plan.seed.wrapping_mul(1_000_003).wrapping_add(id.into()));
    let mut record = ClientRecord::default();
    let mut client = None;
    // The mod_revision this client last saw per key, for its compare-and-puts.
    let mut seen = vec![0i64; plan.keys as usize];
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = connection(&mut client, &plan, &paused).await else {
            continue;
        };
        let k = rng.random_range(0..plan.keys) as usize;
        let key = format!("{PREFIX}k{k}");
        seq += 1;
        let value = format!("c{id}-{seq}");
        let op = match rng.random_range(0..100) {
            0..35 => Op::Put { key, value },
            35..45 => Op::Delete { key },
            45..65 => Op::CompareAndPut {
                key,
                expected_mod_revision: seen[k],
                value,
            },
            65..85 => Op::Get {
                key,
                serializable: false,
            },
            _ => Op::Get {
                key,
                serializable: true,
            },
        };
        let call = Instant::now();
        let call_ns = call.duration_since(origin).as_nanos() as u64;
        let outcome = match tokio::time::timeout(plan.op_timeout, perform(c, &op)).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => Outcome::Unknown {
                error: e.to_string(),
            },
            Err(_) => Outcome::Unknown {
                error: format!("no answer within {:?}", plan.op_timeout),
            },
        };
        let return_ns = origin.elapsed().as_nanos() as u64;
        match &outcome {
            Outcome::Get { found, .. } | Outcome::CompareAndPut { current: found, .. } => {
                if let Some(v) = found {
                    seen[k] = v.mod_revision;
                } else if matches!(outcome, Outcome::Get { .. }) {
                    seen[k] = 0;
                }
            }
            _ => {}
        }
        match (&op, &outcome) {
            (Op::Put { .. }, Outcome::Put { revision })
            | (
                Op::CompareAndPut { .. },
                Outcome::CompareAndPut {
                    revision,
                    succeeded: true,
                    ..
                },
            ) => seen[k] = *revision,
            (Op::Delete { .. }, Outcome::Delete { .. }) => seen[k] = 0,
            _ => {}
        }
        if op.writes() && outcome.acknowledged() {
            record.longest_write = record.longest_write.max(call.elapsed());
        }
        if !op.writes() && !outcome.acknowledged() {
            // A failed read changes nothing; reconnect in case the connection is stuck.
            record.failed_reads += 1;
            client = None;
        } else {
            if !outcome.acknowledged() {
                client = None;
            }
            record.events.push(Event {
                client: id,
                op,
                call_ns,
                return_ns,
                outcome,
            });
        }
        if !plan.think.is_zero() {
            tokio::time::sleep(plan.think).await;
        }
    }
    record
}

/// Sends `op` and reads etcd's answer.
/// A client's connection, made again when there is none; `None`, after a short sleep, while the
/// run pauses the clients or no member answers. While paused no connection is left open to
/// reconnect in the background while the cluster is down (a reconnect to a free ephemeral port
/// can connect to itself and hold it).
pub(crate) async fn connection<'a>(
    client: &'a mut Option<Client>,
    plan: &WorkloadPlan,
    paused: &AtomicBool,
) -> Option<&'a mut Client> {
    if paused.load(Ordering::Relaxed) {
        *client = None;
        tokio::time::sleep(Duration::from_millis(50)).await;
        return None;
    }
    if client.is_none() {
        let endpoints = plan.endpoints.lock().expect("endpoints").clone();
        *client = tokio::time::timeout(plan.op_timeout, Client::connect(endpoints, None))
            .await
            .ok()
            .and_then(Result::ok);
        if client.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    client.as_mut()
}

async fn perform(client: &mut Client, op: &Op) -> Result<Outcome, etcd_client::Error> {
    Ok(match op {
        Op::Put { key, value } => {
            let r = client.put(key.as_str(), value.as_str(), None).await?;
            Outcome::Put {
                revision: header_revision(r.header()),
            }
        }
        Op::Delete { key } => {
            let r = client.delete(key.as_str(), None).await?;
            Outcome::Delete {
                revision: header_revision(r.header()),
                deleted: r.deleted(),
            }
        }
        Op::Get { key, serializable } => {
            let options = serializable.then(|| GetOptions::new().with_serializable());
            let r = client.get(key.as_str(), options).await?;
            Outcome::Get {
                revision: header_revision(r.header()),
                found: r.kvs().first().map(versioned),
            }
        }
        Op::CompareAndPut {
            key,
            expected_mod_revision,
            value,
        } => {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    *expected_mod_revision,
                )])
                .and_then([TxnOp::put(key.as_str(), value.as_str(), None)])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let r = client.txn(txn).await?;
            let current = r.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get.kvs().first().map(versioned)),
                _ => None,
            });
            Outcome::CompareAndPut {
                revision: header_revision(r.header()),
                succeeded: r.succeeded(),
                current: current.flatten(),
            }
        }
    })
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map_or(0, |h| h.revision())
}

fn versioned(kv: &etcd_client::KeyValue) -> Versioned {
    Versioned {
        value: String::from_utf8_lossy(kv.value()).into_owned(),
        mod_revision: kv.mod_revision(),
    }
}
