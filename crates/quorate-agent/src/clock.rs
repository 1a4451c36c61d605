//! The agent's clock: the system's, unless a skew is injected. Leases, snapshot names and
//! garbage collection carry this agent's time, so one member with a wrong clock must not lead
//! anyone to a wrong decision about data; the fault suite proves it by telling one agent a
//! wrong time through [`CLOCK_SKEW_DIR_ENV`].

use std::path::PathBuf;
use std::sync::OnceLock;

use jiff::{SignedDuration, Timestamp};

/// Environment variable naming a directory where a file named after a member holds a skew in
/// seconds (e.g. `-3600`) that member's agent adds to the system clock, read at every use. Unset
/// (the normal case): the system clock.
pub const CLOCK_SKEW_DIR_ENV: &str = "QUORATE_CLOCK_SKEW_DIR";

static SKEW_FILE: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Binds the clock to `member`'s skew file, if [`CLOCK_SKEW_DIR_ENV`] is set.
pub fn init(member: &str) {
    let _ =
        SKEW_FILE.set(std::env::var_os(CLOCK_SKEW_DIR_ENV).map(|d| PathBuf::from(d).join(member)));
}

/// Now, as this agent believes it.
pub fn now() -> Timestamp {
    let now = Timestamp::now();
    let skew = SKEW_FILE
        .get()
        .and_then(Option::as_ref)
        .and_then(|file| std::fs::read_to_string(file).ok())
        .and_then(|text| text.trim().parse::<i64>().ok());
    match skew {
        Some(seconds) => now
            .checked_add(SignedDuration::from_secs(seconds))
            .unwrap_or(now),
        None => now,
    }
}

/// [`now`] for the delta capture's event time stamps.
#[derive(Clone, Copy, Debug)]
pub struct AgentClock;

impl quorate_backup::snapshotter::Clock for AgentClock {
    fn now(&self) -> Timestamp {
        now()
    }
}
