//! Waiting for something a test cannot be told about, only observe: poll until it shows,
//! or fail naming what never came.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every 100 ms until it returns `Some`, panicking with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
