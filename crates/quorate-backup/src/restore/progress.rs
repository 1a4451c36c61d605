//! Where a restore from a bucket stands: objects and stored bytes done out of the plan's,
//! events replayed, and from them the fraction, rates and an estimate of the time left. The
//! store layer reports one after the full snapshot and after each delta snapshot is applied;
//! the terminal shows it (`quorate restore`), the agent logs it and exports it.

use std::sync::Arc;
use std::time::Duration;

/// One report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RestoreProgress {
    /// Objects (the full snapshot and deltas) applied.
    pub objects_done: u64,
    /// Objects the plan holds.
    pub objects_total: u64,
    /// Stored bytes of the objects applied.
    pub bytes_done: u64,
    /// Stored bytes of the plan's objects.
    pub bytes_total: u64,
    /// Delta events applied (or skipped as already in the data).
    pub events_done: u64,
    /// Since the restore started.
    pub elapsed: Duration,
}

impl RestoreProgress {
    /// The share of the plan's bytes done, 0..=1.
    pub fn fraction(&self) -> f64 {
        if self.bytes_total == 0 {
            return if self.objects_done >= self.objects_total {
                1.0
            } else {
                0.0
            };
        }
        (self.bytes_done as f64 / self.bytes_total as f64).clamp(0.0, 1.0)
    }

    /// Delta events per second so far.
    pub fn events_per_second(&self) -> f64 {
        self.events_done as f64 / self.elapsed.as_secs_f64().max(1e-3)
    }

    /// The time left at the rate so far; `None` before anything was done.
    pub fn eta(&self) -> Option<Duration> {
        let done = self.fraction();
        (done > 0.0).then(|| self.elapsed.mul_f64((1.0 - done) / done))
    }
}

/// Receives each [`RestoreProgress`]; cheap to clone.
#[derive(Clone)]
pub struct ProgressSink(Arc<dyn Fn(RestoreProgress) + Send + Sync>);

impl ProgressSink {
    /// A sink calling `report`.
    pub fn new(report: impl Fn(RestoreProgress) + Send + Sync + 'static) -> ProgressSink {
        ProgressSink(Arc::new(report))
    }

    /// Hands `progress` over.
    pub fn report(&self, progress: RestoreProgress) {
        (self.0)(progress)
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_rate_and_eta_follow_the_bytes() {
        let p = RestoreProgress {
            objects_done: 2,
            objects_total: 5,
            bytes_done: 250,
            bytes_total: 1000,
            events_done: 400,
            elapsed: Duration::from_secs(4),
        };
        assert_eq!(p.fraction(), 0.25);
        assert_eq!(p.events_per_second(), 100.0);
        assert_eq!(p.eta(), Some(Duration::from_secs(12)));
        let start = RestoreProgress {
            objects_total: 5,
            bytes_total: 1000,
            ..RestoreProgress::default()
        };
        assert_eq!(start.eta(), None);
    }
}
