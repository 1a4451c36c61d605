//! The documentation checks that `cargo test` runs over the repository's Markdown (`README.md`
//! and `docs/**/*.md`), so a moved section or a renamed heading fails a test instead of leaving
//! a reader at a dead link:
//!
//! - every relative link names a file that exists inside the repository (never above its root,
//!   never an absolute or `file://` path: a fresh clone must hold every document it links to);
//! - every `#anchor` names a heading of its Markdown target, with the ids GitHub and mdBook give
//!   headings (lowercased; letters, digits, `-` and `_` kept; spaces become `-`; repeats get
//!   `-1`, `-2`, ...);
//! - the book's `docs/SUMMARY.md` lists every page under `docs/`, so `mdbook build` renders
//!   every document, and a page under `docs/` links only inside `docs/`: the rendered book holds
//!   nothing else, so a link from it to `README.md` or `examples/` would be dead there (name
//!   such files in code spans instead).
//!
//! Web links (`http://`, `https://`, `mailto:`) are left alone: they are not part of a clone.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// A file the checks could not read: the check cannot vouch for links it did not see.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a file or listing a directory failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// One broken link or unlisted page, located so it can be fixed in one edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The Markdown file, relative to the repository root.
    pub file: PathBuf,
    /// The 1-based line of the link (0 for a problem of the whole file).
    pub line: usize,
    /// What is wrong and what to do.
    pub kind: ProblemKind,
}

/// The kinds of problem, each with what a reader would hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProblemKind {
    /// The link's file does not exist.
    MissingFile {
        /// The link as written.
        link: String,
        /// Where it resolves to, relative to the repository root.
        resolved: PathBuf,
    },
    /// The link's `#anchor` is no heading of its target.
    MissingAnchor {
        /// The link as written.
        link: String,
        /// The Markdown file the anchor was looked up in.
        target: PathBuf,
    },
    /// The link leaves the repository (`../` above the root, an absolute path, `file://`, or a
    /// scheme other than http, https and mailto).
    LeavesRepository {
        /// The link as written.
        link: String,
    },
    /// A page under `docs/` that `docs/SUMMARY.md` does not list, so the book leaves it out.
    NotInSummary,
    /// A page under `docs/` links a file outside `docs/`, which the rendered book lacks.
    LeavesBook {
        /// The link as written.
        link: String,
        /// Where it resolves to, relative to the repository root.
        resolved: PathBuf,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.kind {
            ProblemKind::MissingFile { link, resolved } => write!(
                f,
                "{file}:{}: link `{link}`: {} does not exist; fix the path or restore the file",
                self.line,
                resolved.display()
            ),
            ProblemKind::MissingAnchor { link, target } => write!(
                f,
                "{file}:{}: link `{link}`: {} has no heading with that id; link to an existing \
                 heading (ids are the heading lowercased, spaces as `-`, punctuation dropped)",
                self.line,
                target.display()
            ),
            ProblemKind::LeavesRepository { link } => write!(
                f,
                "{file}:{}: link `{link}` leaves the repository; a fresh clone would not have \
                 it: link a file inside the repository with a relative path, or a web address",
                self.line
            ),
            ProblemKind::LeavesBook { link, resolved } => write!(
                f,
                "{file}:{}: link `{link}` points at {}, outside docs/, which the rendered book \
                 does not hold; link a page under docs/, or name the file in a code span",
                self.line,
                resolved.display()
            ),
            ProblemKind::NotInSummary => write!(
                f,
                "{file}: not listed in docs/SUMMARY.md, so the book leaves it out; add it there"
            ),
        }
    }
}

/// The Markdown files the checks cover, relative to `root`: `README.md` (when present) and
/// every `*.md` under `docs/`, sorted.
pub fn markdown_files(root: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    if root.join("README.md").is_file() {
        files.push(PathBuf::from("README.md"));
    }
    let docs = root.join("docs");
    if docs.is_dir() {
        collect_markdown(root, &docs, &mut files)?;
    }
    files.sort();
    Ok(files)
}

fn collect_markdown(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let read_err = |source| Error::Read {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        if path.is_dir() {
            collect_markdown(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            // Inside `root` by construction.
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// Runs every check over the repository at `root`: the links of each Markdown file, then the
/// book's coverage when `docs/SUMMARY.md` exists.
pub fn check_repository(root: &Path) -> Result<Vec<Problem>, Error> {
    let files = markdown_files(root)?;
    let mut checker = Checker::new(root);
    let mut problems = Vec::new();
    for file in &files {
        problems.extend(checker.check_file(file)?);
    }
    if root.join("docs/SUMMARY.md").is_file() {
        problems.extend(checker.unlisted_pages(&files)?);
    }
    Ok(problems)
}

/// Checks files of one repository, reading each target's headings once.
pub struct Checker {
    root: PathBuf,
    anchors: HashMap<PathBuf, BTreeSet<String>>,
}

impl Checker {
    /// A checker for the repository at `root`.
    pub fn new(root: &Path) -> Self {
        Checker {
            root: root.to_path_buf(),
            anchors: HashMap::new(),
        }
    }

    /// The broken links of `file` (relative to the root).
    pub fn check_file(&mut self, file: &Path) -> Result<Vec<Problem>, Error> {
        let text = self.read(file)?;
        let mut problems = Vec::new();
        for (line, link) in links(&text) {
            if let Some(kind) = self.check_link(file, &link)? {
                problems.push(Problem {
                    file: file.to_path_buf(),
                    line,
                    kind,
                });
            }
        }
        Ok(problems)
    }

    /// The pages among `files` under `docs/` that `docs/SUMMARY.md` does not link.
    pub fn unlisted_pages(&mut self, files: &[PathBuf]) -> Result<Vec<Problem>, Error> {
        let summary = Path::new("docs/SUMMARY.md");
        let text = self.read(summary)?;
        let listed: BTreeSet<PathBuf> = links(&text)
            .into_iter()
            .filter_map(|(_, link)| {
                let path = link.split('#').next().unwrap_or_default();
                normalize(&Path::new("docs").join(path))
            })
            .collect();
        Ok(files
            .iter()
            .filter(|f| f.starts_with("docs") && f.as_path() != summary && !listed.contains(*f))
            .map(|f| Problem {
                file: f.clone(),
                line: 0,
                kind: ProblemKind::NotInSummary,
            })
            .collect())
    }

    fn check_link(&mut self, file: &Path, link: &str) -> Result<Option<ProblemKind>, Error> {
        let leaves = || {
            Some(ProblemKind::LeavesRepository {
                link: link.to_string(),
            })
        };
        if let Some((scheme, _)) = link.split_once(':')
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return Ok(match scheme.to_ascii_lowercase().as_str() {
                "http" | "https" | "mailto" => None,
                _ => leaves(),
            });
        }
        let (path, anchor) = match link.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (link, None),
        };
        if path.starts_with('/') || path.starts_with('\\') {
            return Ok(leaves());
        }
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            let dir = file.parent().unwrap_or(Path::new(""));
            match normalize(&dir.join(path)) {
                Some(target) => target,
                None => return Ok(leaves()),
            }
        };
        if !self.root.join(&target).exists() {
            return Ok(Some(ProblemKind::MissingFile {
                link: link.to_string(),
                resolved: target,
            }));
        }
        if file.starts_with("docs")
            && !target.starts_with("docs")
            && self.root.join("docs/SUMMARY.md").is_file()
        {
            return Ok(Some(ProblemKind::LeavesBook {
                link: link.to_string(),
                resolved: target,
            }));
        }
        let Some(anchor) = anchor.filter(|a| !a.is_empty()) else {
            return Ok(None);
        };
        let known = target.extension().is_some_and(|e| e == "md")
            && self.anchors_of(&target)?.contains(anchor);
        Ok((!known).then(|| ProblemKind::MissingAnchor {
            link: link.to_string(),
            target,
        }))
    }

    fn anchors_of(&mut self, file: &Path) -> Result<&BTreeSet<String>, Error> {
        if !self.anchors.contains_key(file) {
            let text = self.read(file)?;
            self.anchors.insert(file.to_path_buf(), heading_ids(&text));
        }
        Ok(&self.anchors[file])
    }

    fn read(&self, file: &Path) -> Result<String, Error> {
        let path = self.root.join(file);
        std::fs::read_to_string(&path).map_err(|source| Error::Read { path, source })
    }
}

/// `path` with `.` and `..` resolved lexically, or `None` when it climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_HEADING_ATTRIBUTES | Options::ENABLE_FOOTNOTES
}

/// Every link and image destination of a Markdown text with its 1-based line (links inside
/// code are not links, so they are not reported).
pub fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
        if let Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) = event {
            let line = text[..range.start].matches('\n').count() + 1;
            out.push((line, dest_url.to_string()));
        }
    }
    out
}

/// The ids of a Markdown text's headings, as GitHub and mdBook make them (an explicit
/// `{#id}` wins); a repeated id gets `-1`, `-2`, ...
pub fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut current: Option<(Option<String>, String)> = None;
    for event in Parser::new_ext(text, options()) {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                current = Some((id.map(|i| i.to_string()), String::new()));
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, title)) = current.as_mut() {
                    title.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_level)) => {
                let Some((explicit, title)) = current.take() else {
                    continue;
                };
                let id = match explicit {
                    Some(id) => id,
                    None => {
                        let base = slug(&title);
                        let n = seen.entry(base.clone()).or_insert(0);
                        let id = if *n == 0 { base } else { format!("{base}-{n}") };
                        *n += 1;
                        id
                    }
                };
                ids.insert(id);
            }
            _ => {}
        }
    }
    ids
}

/// A heading's id: lowercased, letters, digits, `-` and `_` kept, whitespace as `-`, anything
/// else dropped.
pub fn slug(title: &str) -> String {
    title
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn kinds(dir: &tempfile::TempDir) -> Vec<(String, usize, ProblemKind)> {
        check_repository(dir.path())
            .unwrap()
            .into_iter()
            .map(|p| (p.file.display().to_string(), p.line, p.kind))
            .collect()
    }

    #[test]
    fn sound_links_pass() {
        let dir = repo(&[
            (
                "README.md",
                "# quorate\n\nSee [usage](docs/usage/local.md#scale-out-one-step-at-a-time), \
                 [the example](examples/e.yaml), [here](#quorate), [web](https://etcd.io).\n",
            ),
            ("examples/e.yaml", "kind: Etcd\n"),
            (
                "docs/usage/local.md",
                "# Local\n\n## Scale-out, one step at a time\n\n[design](../design.md#why)\n",
            ),
            ("docs/design.md", "# Design\n\n## Why?\n"),
            (
                "docs/SUMMARY.md",
                "# Summary\n\n- [Local](usage/local.md)\n- [Design](./design.md)\n",
            ),
        ]);
        assert_eq!(kinds(&dir), vec![]);
    }

    #[test]
    fn a_broken_link_is_caught_with_its_line() {
        let dir = repo(&[("README.md", "# quorate\n\ntext\n\n[gone](docs/moved.md)\n")]);
        assert_eq!(
            kinds(&dir),
            vec![(
                "README.md".into(),
                5,
                ProblemKind::MissingFile {
                    link: "docs/moved.md".into(),
                    resolved: "docs/moved.md".into()
                }
            )]
        );
    }

    #[test]
    fn an_anchor_that_does_not_exist_is_caught() {
        let dir = repo(&[
            (
                "README.md",
                "# quorate\n\n[a](docs/a.md#restore-speed) [b](#quorate-) [c](docs/a.md#Restore)\n",
            ),
            ("docs/a.md", "# Restore\n\n## Restore speed!\n"),
        ]);
        let problems = kinds(&dir);
        let links: Vec<_> = problems
            .iter()
            .map(|(_, _, k)| match k {
                ProblemKind::MissingAnchor { link, .. } => link.as_str(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        // `restore-speed` exists (punctuation dropped); ids are case-sensitive lowercase.
        assert_eq!(links, vec!["#quorate-", "docs/a.md#Restore"]);
    }

    #[test]
    fn links_that_leave_the_repository_are_caught() {
        let dir = repo(&[
            ("docs/x.md", "# X\n"),
            (
                "docs/a.md",
                "# A\n\n[up](../../shared/DESIGN.md) [abs](/etc/passwd) [f](file:///tmp/x) \
                 [ok](../README.md) [ok2](x.md)\n",
            ),
            ("README.md", "# R\n"),
        ]);
        let leaving: Vec<_> = kinds(&dir)
            .into_iter()
            .filter_map(|(_, _, k)| match k {
                ProblemKind::LeavesRepository { link } => Some(link),
                _ => None,
            })
            .collect();
        assert_eq!(
            leaving,
            vec!["../../shared/DESIGN.md", "/etc/passwd", "file:///tmp/x"]
        );
    }

    #[test]
    fn links_in_code_are_not_links() {
        let dir = repo(&[(
            "README.md",
            "# R\n\n`[x](gone.md)`\n\n```md\n[y](gone.md)\n```\n",
        )]);
        assert_eq!(kinds(&dir), vec![]);
    }

    #[test]
    fn a_book_page_linking_outside_docs_is_caught() {
        let dir = repo(&[
            ("README.md", "# R\n\n[ok](examples/e.yaml)\n"),
            ("examples/e.yaml", "kind: Etcd\n"),
            ("docs/SUMMARY.md", "# Summary\n\n- [A](a.md)\n"),
            (
                "docs/a.md",
                "# A\n\n[r](../README.md#r) [e](../examples/e.yaml)\n",
            ),
        ]);
        let outside: Vec<_> = kinds(&dir)
            .into_iter()
            .map(|(file, _, k)| match k {
                ProblemKind::LeavesBook { link, .. } => (file, link),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            outside,
            vec![
                ("docs/a.md".to_string(), "../README.md#r".to_string()),
                ("docs/a.md".to_string(), "../examples/e.yaml".to_string())
            ]
        );
    }

    #[test]
    fn a_page_missing_from_the_summary_is_caught() {
        let dir = repo(&[
            ("docs/SUMMARY.md", "# Summary\n\n- [A](a.md)\n"),
            ("docs/a.md", "# A\n"),
            ("docs/sub/b.md", "# B\n"),
        ]);
        assert_eq!(
            kinds(&dir),
            vec![("docs/sub/b.md".into(), 0, ProblemKind::NotInSummary)]
        );
    }

    #[test]
    fn repeated_headings_and_explicit_ids() {
        let ids = heading_ids(
            "# Tests\n\n## Tests\n\n## `quorate.io/recover` — by hand {#by-hand}\n\n### Tests\n",
        );
        assert_eq!(
            ids.into_iter().collect::<Vec<_>>(),
            vec!["by-hand", "tests", "tests-1", "tests-2"]
        );
        assert_eq!(
            slug("What quorate does when members lose data"),
            "what-quorate-does-when-members-lose-data"
        );
        assert_eq!(
            slug("Task resources: EtcdOpsTask and EtcdCopyBackupsTask"),
            "task-resources-etcdopstask-and-etcdcopybackupstask"
        );
    }

    #[test]
    fn problems_say_where_and_what_to_do() {
        let p = Problem {
            file: "README.md".into(),
            line: 3,
            kind: ProblemKind::MissingAnchor {
                link: "docs/a.md#x".into(),
                target: "docs/a.md".into(),
            },
        };
        let text = p.to_string();
        assert!(
            text.starts_with("README.md:3: link `docs/a.md#x`: docs/a.md has no heading"),
            "{text}"
        );
    }
}
