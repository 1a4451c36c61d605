//! Free TCP ports, never handed out twice within one test process.
//!
//! Tests run in parallel threads of one process; the OS may return a port again as soon as the
//! probe socket is closed, so every port given out is remembered and skipped afterwards.
//!
//! Test binaries run side by side too (`scripts/run-tests.sh`), and one process's released port
//! could be bound by another before its child binds it. So the runner gives each lane its own
//! range in [`PORT_RANGE_ENV`], below the OS's ephemeral range; ports are then taken from that
//! range in turn, and from the OS only when it is used up.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};

/// The environment variable naming this process's port range, `LOW-HIGH` (HIGH excluded).
pub const PORT_RANGE_ENV: &str = "QUORATE_TEST_PORTS";

/// The range from [`PORT_RANGE_ENV`], if it is set and well-formed.
fn lane_range() -> Option<std::ops::Range<u16>> {
    static RANGE: OnceLock<Option<std::ops::Range<u16>>> = OnceLock::new();
    RANGE
        .get_or_init(|| {
            let text = std::env::var(PORT_RANGE_ENV).ok()?;
            let (low, high) = text.split_once('-')?;
            let range = low.trim().parse().ok()?..high.trim().parse().ok()?;
            (!range.is_empty()).then_some(range)
        })
        .clone()
}

/// Binds the first port of `range` from offset `next` on that is free and not handed out yet,
/// moving `next` past it; `None` once the whole range has been tried.
fn bind_in_range(
    range: std::ops::Range<u16>,
    next: &mut u16,
    seen: &HashSet<u16>,
) -> Option<TcpListener> {
    while let Some(port) = range.start.checked_add(*next).filter(|p| range.contains(p)) {
        *next += 1;
        if !seen.contains(&port)
            && let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        {
            return Some(listener);
        }
    }
    None
}

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// One free loopback port (bound on 127.0.0.1:0, then released) that no other caller in this
/// process has received.
pub fn free_port() -> u16 {
    PortBlock::reserve(1).ports()[0]
}

/// Several distinct free loopback ports reserved together.
///
/// The listening sockets stay open until [`PortBlock::release`] (or drop), so the OS cannot give
/// the same port to anyone else in the meantime; release right before starting the process that
/// binds them.
#[derive(Debug)]
pub struct PortBlock {
    ports: Vec<u16>,
    listeners: Vec<TcpListener>,
}

impl PortBlock {
    /// Reserves `count` distinct ports; panics if the OS cannot provide them.
    pub fn reserve(count: usize) -> PortBlock {
        let mut ports = Vec::with_capacity(count);
        let mut listeners = Vec::with_capacity(count);
        let mut seen = handed_out().lock().unwrap_or_else(|e| e.into_inner());
        let mut attempts = 0;
        while ports.len() < count {
            attempts += 1;
            assert!(
                attempts < count * 100 + 100,
                "could not find {count} free loopback ports after {attempts} attempts"
            );
            let listener = lane_range()
                .and_then(|range| {
                    static NEXT: Mutex<u16> = Mutex::new(0);
                    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
                    bind_in_range(range, &mut next, &seen)
                })
                .unwrap_or_else(|| {
                    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap_or_else(|e| {
                        panic!("cannot bind 127.0.0.1:0 to find a free port: {e}")
                    })
                });
            let port = listener
                .local_addr()
                .expect("bound listener has an address")
                .port();
            if seen.insert(port) {
                ports.push(port);
                listeners.push(listener);
            }
            // A port seen before is skipped; its probe listener closes here.
        }
        PortBlock { ports, listeners }
    }

    /// The reserved ports, in reservation order.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Closes the probe sockets so a child process can bind the ports; returns them.
    pub fn release(self) -> Vec<u16> {
        let PortBlock { ports, listeners } = self;
        drop(listeners);
        ports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_across_blocks_and_calls() {
        let a = PortBlock::reserve(8).release();
        let b = PortBlock::reserve(8).release();
        let c: Vec<u16> = (0..8).map(|_| free_port()).collect();
        let all: HashSet<u16> = a.iter().chain(&b).chain(&c).copied().collect();
        assert_eq!(all.len(), 24, "duplicate port in {a:?} {b:?} {c:?}");
    }

    #[test]
    fn a_lane_range_is_used_in_turn_skipping_ports_in_use_and_then_runs_out() {
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let busy = held.local_addr().unwrap().port();
        let range = busy - 1..busy + 2;
        let seen = HashSet::from([busy + 1]);
        let mut next = 0;
        let port = |l: Option<TcpListener>| l.map(|l| l.local_addr().unwrap().port());
        // busy - 1 may be taken by someone else on this machine; the rest is certain.
        let first = port(bind_in_range(range.clone(), &mut next, &seen));
        assert!(first.is_none() || first == Some(busy - 1), "{first:?}");
        assert_eq!(port(bind_in_range(range.clone(), &mut next, &seen)), None);
        assert_eq!(next, 3, "every port of the range was tried once");
    }

    #[test]
    fn released_ports_are_bindable() {
        let ports = PortBlock::reserve(3).release();
        for port in ports {
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("released port binds");
        }
    }

    #[test]
    fn reserved_ports_are_held_until_release() {
        let block = PortBlock::reserve(2);
        for &port in block.ports() {
            assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err());
        }
    }
}
