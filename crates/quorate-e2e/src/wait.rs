//! Polling with a deadline, printing each new state as it is seen (the run's log then shows how
//! a cluster got to where it is, with times).

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `probe` every `interval` until it returns `Ok`, printing each distinct `Err` state with
/// the time since the start. Panics after `timeout` with the last state.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match probe().await {
            Ok(value) => {
                println!("  [{:>6.1}s] {what}: done", start.elapsed().as_secs_f64());
                return value;
            }
            Err(state) => {
                if state != last {
                    println!(
                        "  [{:>6.1}s] {what}: {state}",
                        start.elapsed().as_secs_f64()
                    );
                    last = state;
                }
            }
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}; last state: {last}");
        }
        tokio::time::sleep(interval).await;
    }
}
