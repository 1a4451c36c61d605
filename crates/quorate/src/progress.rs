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

/// A restore's progress bar: the plan's stored bytes done, objects and events with their rate,
/// and the time left; fed by the restore's [`ProgressSink`]. Hidden when stderr is not a
/// terminal.
pub struct RestoreBar {
    bar: ProgressBar,
}

impl RestoreBar {
    /// Shows the bar, empty until the first report.
    pub fn start() -> RestoreBar {
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template(
            "{spinner} {msg} [{bar:24}] {percent:>3}% {bytes}/{total_bytes} ETA {eta} ({elapsed})",
        )
        .expect("valid progress template")
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message("downloading and restoring the full snapshot");
        bar.enable_steady_tick(Duration::from_millis(120));
        RestoreBar { bar }
    }

    /// Prints `line` on stdout above the bar (also when the bar is hidden).
    pub fn say(&self, line: &str) {
        self.bar.suspend(|| println!("{line}"));
    }

    /// The sink the restore reports to.
    pub fn sink(&self) -> quorate_backup::restore::progress::ProgressSink {
        let bar = self.bar.clone();
        quorate_backup::restore::progress::ProgressSink::new(move |p| {
            bar.set_length(p.bytes_total);
            bar.set_position(p.bytes_done);
            bar.set_message(format!(
                "objects {}/{}, {} events ({:.0}/s)",
                p.objects_done,
                p.objects_total,
                p.events_done,
                p.events_per_second()
            ));
        })
    }
}

impl Drop for RestoreBar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
