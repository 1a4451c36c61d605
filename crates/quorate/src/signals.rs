//! Shutdown on SIGINT or SIGTERM, shared by every long-running subcommand (local supervisor,
//! agent, operator) so each stops the same way.

use tokio::sync::watch;

/// A flag that turns true on SIGINT or SIGTERM.
pub fn shutdown_on_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(true);
    });
    rx
}
