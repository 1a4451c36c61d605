//! Micro-benchmark of quorate's own part of delta capture: from watch events already received
//! to batches cut (JSON, base64, SHA-256) and handed over, without etcd or gRPC.
//! `cargo test --release -p quorate-backup --lib capture_cost -- --ignored --nocapture`

use std::time::Instant;

use super::buffer::{CutReason, DeltaBuffer};
use super::clock::JsonTimes;
use crate::delta::{EVENT_PUT, KeyValue, write_event_json};

/// Responses as the benchmark's load makes them: one PUT per revision, 1 KiB alphanumeric
/// values, keys `bench/load/cNN/kNNNN`.
fn responses(count: usize, per_response: usize) -> Vec<Vec<KeyValue>> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rev = 1000;
    (0..count)
        .map(|_| {
            (0..per_response)
                .map(|_| {
                    rev += 1;
                    let n = next();
                    KeyValue {
                        key: format!("bench/load/c{:02}/k{:04}", n % 8, (n >> 8) % 1000)
                            .into_bytes(),
                        create_revision: 900,
                        mod_revision: rev,
                        version: (n >> 20) as i64 % 500 + 1,
                        value: (0..1024)
                            .map(|_| ALNUM[(next() % ALNUM.len() as u64) as usize])
                            .collect(),
                        lease: 0,
                    }
                })
                .collect()
        })
        .collect()
}

/// One pass of the capture path over `responses` as `DeltaWatcher::absorb` takes them in,
/// cutting every `per_cut` events and dropping each batch as an uploader would; returns the
/// encoded bytes (so nothing is optimized away).
fn capture(responses: &[Vec<KeyValue>], per_cut: usize) -> usize {
    let mut buffer = DeltaBuffer::new(1001, 10 * 1024 * 1024);
    let mut times = JsonTimes::default();
    let mut since_cut = 0;
    let mut bytes = 0;
    for response in responses {
        let time = times.render(jiff::Timestamp::now());
        for kv in response {
            let revision = kv.mod_revision;
            if buffer.open_revision() != Some(revision) {
                for batch in buffer.end_revision() {
                    bytes += batch.encoded.len();
                }
                buffer.begin_revision(revision).unwrap();
            }
            buffer.push_event(|out| {
                write_event_json(out, EVENT_PUT, Some(kv), None::<&KeyValue>, &time, None)
            });
            since_cut += 1;
        }
        for batch in buffer.end_revision() {
            bytes += batch.encoded.len();
        }
        if since_cut >= per_cut {
            since_cut = 0;
            let batch = buffer.cut(CutReason::Period).unwrap();
            bytes += batch.encoded.len();
            drop(std::hint::black_box(batch));
        }
    }
    if let Some(batch) = buffer.cut(CutReason::Stop) {
        bytes += batch.encoded.len();
    }
    bytes
}

#[test]
#[ignore = "micro-benchmark; run in release with --nocapture"]
fn capture_cost() {
    const EVENTS: usize = 60_000;
    for per_response in [1, 8] {
        let input = responses(EVENTS / per_response, per_response);
        let mut best = f64::MAX;
        for _ in 0..7 {
            let t = Instant::now();
            std::hint::black_box(capture(&input, 5600));
            best = best.min(t.elapsed().as_secs_f64() * 1e6 / EVENTS as f64);
        }
        println!("capture_cost: {per_response} event(s) per response: {best:.2} µs/event");
    }
}
