//! Free TCP ports from the OS, never handed out twice within one test process.
//!
//! Tests run in parallel threads of one process; the OS may return a port again as soon as the
//! probe socket is closed, so every port given out is remembered and skipped afterwards.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};

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
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to find a free port: {e}"));
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
