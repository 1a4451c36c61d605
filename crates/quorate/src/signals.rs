//! Shutdown on SIGINT or SIGTERM, shared by every long-running subcommand (local supervisor,
//! agent, operator) so each stops the same way.

use tokio::sync::watch;

/// A flag that turns true on SIGINT or SIGTERM. The handlers are installed before this returns
/// (not inside the spawned task): a signal that arrives before that task first runs would
/// otherwise still kill the process with the default action.
pub fn shutdown_on_signals() -> watch::Receiver<bool> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = watch::channel(false);
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(true);
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CI failure of stop 37: `logs -f` died of a SIGTERM sent right after it started,
    /// because the handler was installed only once the spawned task first ran. On a
    /// current-thread runtime that task cannot run before the signal is raised here.
    #[test]
    fn a_signal_raised_right_after_the_call_is_caught_not_fatal() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut stopped = shutdown_on_signals();
            nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
            stopped.wait_for(|s| *s).await.unwrap();
        });
    }
}
