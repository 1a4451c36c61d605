//! Progress of long transfers on the terminal: the size of the file being written, its rate
//! and the elapsed time, read from the file itself so the transfer code needs no hooks. Hidden
//! when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Duration;

/// A running progress display; stops when dropped.
pub struct FileProgress {
    bar: ProgressBar,
    watcher: tokio::task::JoinHandle<()>,
}

impl FileProgress {
    /// Shows `message` with the growing size of the first of `files` that exists.
    pub fn start(message: &str, files: Vec<PathBuf>) -> FileProgress {
        let bar = ProgressBar::new_spinner();
        let style =
            ProgressStyle::with_template("{spinner} {msg} {bytes} ({bytes_per_sec}) {elapsed}")
                .expect("valid progress template");
        bar.set_style(style);
        bar.set_message(message.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        let watched = bar.clone();
        let watcher = tokio::spawn(async move {
            loop {
                if let Some(size) = files
                    .iter()
                    .find_map(|f| std::fs::metadata(f).ok())
                    .map(|m| m.len())
                {
                    watched.set_position(size);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        FileProgress { bar, watcher }
    }
}

impl Drop for FileProgress {
    fn drop(&mut self) {
        self.watcher.abort();
        self.bar.finish_and_clear();
    }
}
