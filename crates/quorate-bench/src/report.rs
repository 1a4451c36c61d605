//! The one markdown renderer of every benchmark report: a document of blocks (headings,
//! paragraphs, tables, lists) separated by one blank line, tables with a declared alignment
//! per column, and the "Machine" section from one [`MachineFacts`]. The reports say what to
//! write; how it is laid out is decided here, once.

use std::fmt::Write as _;
use std::path::Path;

/// How a table column's cells are aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A markdown table: a header with one alignment per column, then rows of cells. A `|` in a
/// cell is escaped, so no cell can split a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    header: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = (S, Align)>) -> Table {
        Table {
            header: columns
                .into_iter()
                .map(|(name, align)| (name.into(), align))
                .collect(),
            rows: Vec::new(),
        }
    }

    /// A table whose first column is text and every other one a number: most of the reports'.
    pub fn numeric<S: Into<String>>(first: S, rest: impl IntoIterator<Item = S>) -> Table {
        Table::new(
            std::iter::once((first, Align::Left))
                .chain(rest.into_iter().map(|c| (c, Align::Right))),
        )
    }

    /// Adds a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    fn write(&self, out: &mut String) {
        let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
            out.push('|');
            for cell in cells {
                match cell {
                    "" => out.push_str(" |"),
                    cell => {
                        let _ = write!(out, " {} |", cell.replace('|', "\\|"));
                    }
                }
            }
            out.push('\n');
        };
        line(out, &mut self.header.iter().map(|(name, _)| name.as_str()));
        out.push('|');
        for (_, align) in &self.header {
            out.push_str(match align {
                Align::Left => "---|",
                Align::Right => "---:|",
            });
        }
        out.push('\n');
        for row in &self.rows {
            line(out, &mut row.iter().map(String::as_str));
        }
    }
}

/// A markdown document built block by block.
#[derive(Debug, Default)]
pub struct Markdown {
    text: String,
}

impl Markdown {
    /// An empty document.
    pub fn new() -> Markdown {
        Markdown::default()
    }

    /// Starts a block: a blank line after the previous one.
    fn block(&mut self) -> &mut String {
        if !self.text.is_empty() {
            while !self.text.ends_with("\n\n") {
                self.text.push('\n');
            }
        }
        &mut self.text
    }

    /// A heading of `level` (1 = `#`).
    pub fn heading(&mut self, level: usize, title: &str) {
        let out = self.block();
        let _ = writeln!(out, "{} {title}", "#".repeat(level.max(1)));
    }

    /// A paragraph (its lines are joined by markdown, so one may carry several sentences or
    /// lines).
    pub fn paragraph(&mut self, text: impl AsRef<str>) {
        let out = self.block();
        let _ = writeln!(out, "{}", text.as_ref().trim_end());
    }

    /// A table.
    pub fn table(&mut self, table: &Table) {
        table.write(self.block());
    }

    /// A bulleted list; nothing for no items. A `|` is escaped as in tables.
    pub fn bullets<S: AsRef<str>>(&mut self, items: impl IntoIterator<Item = S>) {
        let items: Vec<S> = items.into_iter().collect();
        if items.is_empty() {
            return;
        }
        let out = self.block();
        for item in items {
            let _ = writeln!(out, "- {}", item.as_ref().replace('|', "\\|"));
        }
    }

    /// The "Machine" section, then how to reproduce the run (`reproduce`, a shell command).
    pub fn machine(&mut self, facts: &MachineFacts, reproduce: &str) {
        self.heading(2, "Machine");
        let mut rows = vec![format!("CPUs (nproc): {}", facts.cpus)];
        let optional = [
            ("etcd", facts.etcd_version.clone()),
            ("kube-apiserver", facts.apiserver_version.clone()),
            (
                "quorate",
                facts
                    .quorate
                    .as_ref()
                    .map(|q| format!("{} (`{}`)", q.version, q.path)),
            ),
        ];
        rows.extend(
            optional
                .into_iter()
                .filter_map(|(what, value)| Some(format!("{what}: {}", value?))),
        );
        rows.extend([
            format!(
                "load average (1/5/15 min): {} at start, {} at end",
                facts.load_before, facts.load_after
            ),
            format!("date: {}", facts.started),
            format!("command: `{}`", facts.command),
        ]);
        // Not `bullets`: a command line keeps its pipes.
        let out = self.block();
        for row in rows {
            let _ = writeln!(out, "- {row}");
        }
        self.paragraph(format!("Reproduce: `{reproduce}`"));
    }

    /// The document's text.
    pub fn into_string(self) -> String {
        self.text
    }
}

/// A quorate binary a benchmark ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuorateBinary {
    /// `quorate --version`.
    pub version: String,
    /// Where it is.
    pub path: String,
}

/// Where a benchmark ran: what every report's "Machine" section shows, with the rows that
/// only some benchmarks have (the versions of what they ran) optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// CPUs available to the process (what `nproc` prints).
    pub cpus: usize,
    /// `etcd --version`, version only.
    pub etcd_version: Option<String>,
    /// `kube-apiserver --version`.
    pub apiserver_version: Option<String>,
    /// The quorate binary benchmarked.
    pub quorate: Option<QuorateBinary>,
    /// `/proc/loadavg` (1, 5, 15 min) when the run started.
    pub load_before: String,
    /// The same when it ended.
    pub load_after: String,
    /// When the run started (UTC).
    pub started: String,
    /// The command line.
    pub command: String,
}

impl MachineFacts {
    /// The facts of every run, as the run starts: CPUs, load, date and command line.
    pub fn at_start() -> MachineFacts {
        MachineFacts {
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            load_before: load_average(),
            started: jiff::Timestamp::now()
                .strftime("%Y-%m-%d %H:%M UTC")
                .to_string(),
            command: command_line(),
            ..MachineFacts::default()
        }
    }

    /// Records the load as the run ends.
    pub fn finish(&mut self) {
        self.load_after = load_average();
    }

    /// `etcd`'s version, as the run starts.
    pub fn etcd_version(&self) -> &str {
        self.etcd_version.as_deref().unwrap_or("(unknown)")
    }
}

/// This run's command line, with the executable's directory left out.
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            Path::new(&a)
                .file_name()
                .filter(|_| a.contains('/') && a.ends_with("quorate-bench"))
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or(a)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `/proc/loadavg`'s 1, 5 and 15 minute averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_string())
}

/// `met` or `**missed**`, for a target in a verdict.
pub fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// `PASS` or `FAIL`, for a verdict.
pub fn pass(ok: bool) -> &'static str {
    if ok { "PASS" } else { "FAIL" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_declares_its_alignment_and_escapes_pipes() {
        let mut table = Table::numeric("method", ["median", "notes"]);
        table.row(["a", "1.00 s", "x | y"]);
        let mut doc = Markdown::new();
        doc.table(&table);
        assert_eq!(
            doc.into_string(),
            "| method | median | notes |\n|---|---:|---:|\n| a | 1.00 s | x \\| y |\n"
        );
    }

    #[test]
    fn blocks_are_separated_by_one_blank_line() {
        let mut doc = Markdown::new();
        doc.heading(1, "Title");
        doc.paragraph("One.\n");
        doc.paragraph("Two.");
        doc.bullets(["a", "b"]);
        doc.bullets(Vec::<String>::new());
        assert_eq!(doc.into_string(), "# Title\n\nOne.\n\nTwo.\n\n- a\n- b\n");
    }

    #[test]
    fn the_machine_section_shows_only_the_versions_a_run_has() {
        let facts = MachineFacts {
            cpus: 2,
            apiserver_version: Some("Kubernetes v1.37.2".into()),
            quorate: Some(QuorateBinary {
                version: "quorate 0.1".into(),
                path: "/bin/quorate".into(),
            }),
            load_before: "1 2 3".into(),
            load_after: "4 5 6".into(),
            started: "today".into(),
            command: "quorate-bench operator".into(),
            ..MachineFacts::default()
        };
        let mut doc = Markdown::new();
        doc.machine(&facts, "cargo run");
        assert_eq!(
            doc.into_string(),
            "## Machine\n\n\
             - CPUs (nproc): 2\n\
             - kube-apiserver: Kubernetes v1.37.2\n\
             - quorate: quorate 0.1 (`/bin/quorate`)\n\
             - load average (1/5/15 min): 1 2 3 at start, 4 5 6 at end\n\
             - date: today\n\
             - command: `quorate-bench operator`\n\
             \n\
             Reproduce: `cargo run`\n"
        );
    }
}
