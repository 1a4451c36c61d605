//! Retrying etcd calls while the failure is a "wait and retry" condition, within a time bound.

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tokio::time::Instant;

use crate::error::EtcdError;

/// Delays between attempts, and the overall bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay after the first failure; doubles (with jitter) after each further one.
    pub first_delay: Duration,
    /// Longest delay between two attempts.
    pub max_delay: Duration,
    /// Give up once this much time has passed since the first attempt started; no attempt
    /// starts after it.
    pub max_elapsed: Duration,
}

impl RetryPolicy {
    /// 100 ms doubling up to 1 s: short enough to catch etcd's 5 s health window and a
    /// learner's catch-up promptly, long enough not to hammer the leader.
    pub fn within(max_elapsed: Duration) -> RetryPolicy {
        RetryPolicy {
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_elapsed,
        }
    }
}

/// Runs `op` until it succeeds, fails with a non-retryable error, or `max_elapsed` has passed
/// (then the last error is returned).
pub async fn retry_while_retryable<T, F, Fut>(op: F, max_elapsed: Duration) -> Result<T, EtcdError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EtcdError>>,
{
    retry_with(RetryPolicy::within(max_elapsed), op).await
}

/// [`retry_while_retryable`] with explicit delays.
pub async fn retry_with<T, F, Fut>(policy: RetryPolicy, op: F) -> Result<T, EtcdError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EtcdError>>,
{
    let deadline = Instant::now() + policy.max_elapsed;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(policy.first_delay)
        .with_max_delay(policy.max_delay)
        .with_jitter()
        .without_max_times();
    op.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e: &EtcdError| e.is_retryable() && Instant::now() < deadline)
        // Never sleep past the deadline: the last attempt starts at the deadline at the latest.
        .adjust(move |_, delay| {
            let left = deadline.saturating_duration_since(Instant::now());
            delay.map(|d| d.min(left))
        })
        .notify(|e: &EtcdError, delay| {
            tracing::debug!(kind = %e.kind(), ?delay, "retrying etcd call: {e}");
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn err(kind: ErrorKind) -> EtcdError {
        EtcdError::new(kind, "test op", "http://127.0.0.1:1", "synthetic")
    }

    #[tokio::test(start_paused = true)]
    async fn retries_retryable_errors_until_success() {
        let calls = AtomicUsize::new(0);
        let result = retry_while_retryable(
            || async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(err(ErrorKind::UnhealthyCluster)),
                    1 => Err(err(ErrorKind::LearnerNotInSync)),
                    _ => Ok(42),
                }
            },
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(result.unwrap(), 42);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_first_final_error() {
        let calls = AtomicUsize::new(0);
        let result: Result<(), _> = retry_while_retryable(
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(err(ErrorKind::MemberNotFound))
            },
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(result.unwrap_err().kind(), ErrorKind::MemberNotFound);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_elapsed_with_last_error() {
        let started = Instant::now();
        let calls = AtomicUsize::new(0);
        let result: Result<(), _> = retry_while_retryable(
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(err(ErrorKind::NoLeader))
            },
            Duration::from_secs(3),
        )
        .await;
        let elapsed = started.elapsed();
        assert_eq!(result.unwrap_err().kind(), ErrorKind::NoLeader);
        assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(3100), "{elapsed:?}");
        assert!(calls.load(Ordering::SeqCst) >= 4);
    }
}
