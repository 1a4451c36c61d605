//! Reading `Etcd` manifests from YAML or JSON text, as `kubectl apply -f` and `quorate up -f`
//! receive them: one or more documents (or a `List`), of which the `Etcd`s are picked.
//! Errors name the file, the line and column, and the field when the parser knows them.

use std::fmt;

use serde_json::Value;

use crate::etcd::{API_VERSION, Etcd, KIND};
use crate::unknown_fields::{UnknownField, unknown_fields};

/// Namespace given to an `Etcd` whose manifest has none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Where and why the text of a manifest could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// File name (or other source) as given by the caller.
    pub source_name: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
    /// Field path such as `spec.replicas`, when known.
    pub path: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The offending lines with a marker, when available.
    pub snippet: Option<String>,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source_name)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        write!(f, ": ")?;
        if let Some(path) = &self.path {
            write!(f, "{path}: ")?;
        }
        write!(f, "{}", self.message)?;
        if let Some(snippet) = &self.snippet {
            write!(f, "\n{snippet}")?;
        }
        Ok(())
    }
}

/// Why a manifest could not be turned into `Etcd` objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// The text is not valid YAML/JSON, or a field has the wrong type or is missing.
    Parse(Box<ParseError>),
    /// A document has `kind: Etcd` but another (or no) `apiVersion`.
    WrongApiVersion {
        /// File name.
        source_name: String,
        /// 1-based line where the document starts.
        line: u64,
        /// The `apiVersion` found, if any.
        found: Option<String>,
    },
    /// No document is an `Etcd`.
    NoEtcd {
        /// File name.
        source_name: String,
        /// What the documents are instead, e.g. `ConfigMap "x" (line 1)`.
        found: Vec<String>,
    },
    /// More than one `Etcd` where exactly one was expected.
    MultipleEtcds {
        /// File name.
        source_name: String,
        /// Names of the `Etcd`s found.
        names: Vec<String>,
    },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Parse(e) => e.fmt(f),
            ManifestError::WrongApiVersion {
                source_name,
                line,
                found,
            } => {
                let found = match found {
                    Some(v) => format!("apiVersion {v:?}"),
                    None => "no apiVersion".to_string(),
                };
                write!(
                    f,
                    "{source_name}:{line}: this Etcd has {found}; quorate reads apiVersion {API_VERSION:?} (etcd-druid's Etcd)"
                )
            }
            ManifestError::NoEtcd { source_name, found } => {
                if found.is_empty() {
                    write!(f, "{source_name}: no Etcd found, the file is empty")?;
                } else {
                    write!(
                        f,
                        "{source_name}: no Etcd found; the file holds {}",
                        found.join(", ")
                    )?;
                }
                write!(
                    f,
                    "; an Etcd manifest has \"apiVersion: {API_VERSION}\" and \"kind: {KIND}\""
                )
            }
            ManifestError::MultipleEtcds { source_name, names } => write!(
                f,
                "{source_name}: holds {} Etcd resources ({}) where one was expected; put each in its own file",
                names.len(),
                names.join(", ")
            ),
        }
    }
}

impl std::error::Error for ManifestError {}

/// An `Etcd` read from a manifest, with where it was and what was ignored.
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdManifest {
    /// The object, with `metadata.namespace` defaulted to [`DEFAULT_NAMESPACE`].
    pub etcd: Etcd,
    /// 1-based line where its document starts (1 for JSON input).
    pub line: u64,
    /// Fields the schema does not know; they were ignored.
    pub unknown_fields: Vec<UnknownField>,
}

/// Reads the single `Etcd` in `text` (YAML or JSON; other documents are skipped).
/// `source_name` (usually the file name) prefixes every error.
pub fn parse_etcd_manifest(text: &str, source_name: &str) -> Result<Etcd, ManifestError> {
    Ok(read_single_etcd_manifest(text, source_name)?.etcd)
}

/// Like [`parse_etcd_manifest`], keeping the line and the ignored unknown fields.
pub fn read_single_etcd_manifest(
    text: &str,
    source_name: &str,
) -> Result<EtcdManifest, ManifestError> {
    let mut all = read_etcd_manifests(text, source_name)?;
    if all.len() > 1 {
        return Err(ManifestError::MultipleEtcds {
            source_name: source_name.to_string(),
            names: all
                .iter()
                .map(|m| m.etcd.metadata.name.clone().unwrap_or_default())
                .collect(),
        });
    }
    Ok(all.remove(0))
}

/// Reads every `Etcd` in `text`; fails if there is none.
pub fn parse_etcd_manifests(text: &str, source_name: &str) -> Result<Vec<Etcd>, ManifestError> {
    Ok(read_etcd_manifests(text, source_name)?
        .into_iter()
        .map(|m| m.etcd)
        .collect())
}

/// Like [`parse_etcd_manifests`], keeping each `Etcd`'s line and ignored unknown fields.
pub fn read_etcd_manifests(
    text: &str,
    source_name: &str,
) -> Result<Vec<EtcdManifest>, ManifestError> {
    let reader = Reader { source_name };
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    let mut found = Vec::new();
    let mut etcds = Vec::new();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        reader.read_json(text, &mut etcds, &mut found)?;
    } else {
        let documents = split_yaml_documents(text);
        if documents.len() > MAX_YAML_DOCUMENTS {
            return Err(too_many_documents(source_name, documents.len()));
        }
        for doc in documents {
            reader.read_yaml_document(&doc, &mut etcds, &mut found)?;
        }
    }
    if etcds.is_empty() {
        return Err(ManifestError::NoEtcd {
            source_name: source_name.to_string(),
            found,
        });
    }
    for m in &mut etcds {
        if m.etcd
            .metadata
            .namespace
            .as_deref()
            .is_none_or(str::is_empty)
        {
            m.etcd.metadata.namespace = Some(DEFAULT_NAMESPACE.to_string());
        }
    }
    Ok(etcds)
}

/// One YAML document: the full text with every line of other documents blanked, so the
/// parser's line numbers are those of the file.
struct YamlDocument {
    text: String,
    first_line: u64,
}

/// The most YAML documents one manifest may hold (serde-saphyr's own limit for a stream).
/// Each document is parsed with the whole file's line numbering, so the work grows with the
/// number of documents times the file's length.
const MAX_YAML_DOCUMENTS: usize = 1024;

fn too_many_documents(source_name: &str, count: usize) -> ManifestError {
    ManifestError::Parse(Box::new(ParseError {
        source_name: source_name.to_string(),
        line: None,
        column: None,
        path: None,
        message: format!(
            "holds {count} YAML documents (separated by \"---\" or \"...\"), more than the \
             {MAX_YAML_DOCUMENTS} quorate reads; split the file"
        ),
        snippet: None,
    }))
}

/// Splits at `---` / `...` lines (YAML document markers always start at column 0). Each
/// document's text is made only when it is read, so at most one is held at a time.
fn split_yaml_documents(text: &str) -> impl ExactSizeIterator<Item = YamlDocument> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut owner = vec![usize::MAX; lines.len()];
    let mut rewritten: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut current = 0usize;
    let is_marker = |line: &str, marker: &str| {
        line.strip_prefix(marker)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
    };
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with('%') {
            rewritten[i].clear(); // directive
        } else if is_marker(line, "---") {
            current += 1;
            owner[i] = current;
            rewritten[i] = format!("   {}", &line[3..]);
        } else if is_marker(line, "...") {
            rewritten[i].clear();
            current += 1;
        } else {
            owner[i] = current;
        }
    }
    let firsts: Vec<Option<usize>> = {
        let mut firsts = vec![None; current + 1];
        for (i, o) in owner.iter().enumerate() {
            if let Some(first) = firsts.get_mut(*o)
                && first.is_none()
            {
                *first = Some(i);
            }
        }
        firsts
    };
    let documents: Vec<(usize, usize)> = firsts
        .into_iter()
        .enumerate()
        .filter_map(|(doc, first)| Some((doc, first?)))
        .collect();
    documents.into_iter().map(move |(doc, first)| {
        let text = rewritten
            .iter()
            .zip(&owner)
            .map(|(line, o)| if *o == doc { line.as_str() } else { "" })
            .collect::<Vec<_>>()
            .join("\n");
        YamlDocument {
            text,
            first_line: first as u64 + 1,
        }
    })
}

struct Reader<'a> {
    source_name: &'a str,
}

impl Reader<'_> {
    fn read_yaml_document(
        &self,
        doc: &YamlDocument,
        etcds: &mut Vec<EtcdManifest>,
        found: &mut Vec<String>,
    ) -> Result<(), ManifestError> {
        let value: Option<Value> =
            serde_saphyr::from_str(&doc.text).map_err(|e| self.yaml_error(&e, None))?;
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(()); // empty document
        };
        let first_line = first_content_line(&doc.text).unwrap_or(doc.first_line);
        match self.classify(&value, first_line, found)? {
            DocKind::Etcd => {
                // Decoded from the JSON the API server would see, so a quoted "2379" where the
                // schema says integer is refused as the API server (and druid) refuse it; YAML
                // readers would coerce it. Only when that fails is the text decoded again, for
                // an error that points at the line.
                let etcd = match self.etcd_from_value(&value, "") {
                    Ok(etcd) => etcd,
                    Err(mut strict) => {
                        if let ManifestError::Parse(p) = &mut strict {
                            p.line = Some(first_line);
                        }
                        let mut path = None;
                        serde_saphyr::with_deserializer_from_str(&doc.text, |de| {
                            serde_path_to_error::deserialize::<_, Etcd>(de).map_err(|e| {
                                path = Some(e.path().to_string());
                                e.into_inner()
                            })
                        })
                        .map_err(|e| self.yaml_error(&e, path.take()))?;
                        return Err(strict);
                    }
                };
                etcds.push(EtcdManifest {
                    unknown_fields: unknown_fields(&value),
                    etcd,
                    line: first_line,
                });
            }
            DocKind::List(items) => self.read_list_items(items, first_line, etcds, found)?,
            DocKind::Other => {}
        }
        Ok(())
    }

    fn read_json(
        &self,
        text: &str,
        etcds: &mut Vec<EtcdManifest>,
        found: &mut Vec<String>,
    ) -> Result<(), ManifestError> {
        let value: Value = serde_json::from_str(text).map_err(|e| self.json_error(&e, None))?;
        let top_is_array = value.is_array();
        let items = match value {
            Value::Array(items) => items,
            other => vec![other],
        };
        for (i, item) in items.iter().enumerate() {
            match self.classify(item, 1, found)? {
                DocKind::Etcd => {
                    let etcd = if top_is_array {
                        self.etcd_from_value(item, &format!("[{i}]."))?
                    } else {
                        // Parse the text again, typed, so errors carry line, column and path.
                        let mut de = serde_json::Deserializer::from_str(text);
                        serde_path_to_error::deserialize(&mut de).map_err(|e| {
                            let path = e.path().to_string();
                            self.json_error(e.inner(), Some(path))
                        })?
                    };
                    etcds.push(EtcdManifest {
                        unknown_fields: unknown_fields(item),
                        etcd,
                        line: 1,
                    });
                }
                DocKind::List(list) => self.read_list_items(list, 1, etcds, found)?,
                DocKind::Other => {}
            }
        }
        Ok(())
    }

    fn read_list_items(
        &self,
        items: &[Value],
        line: u64,
        etcds: &mut Vec<EtcdManifest>,
        found: &mut Vec<String>,
    ) -> Result<(), ManifestError> {
        for (i, item) in items.iter().enumerate() {
            match self.classify(item, line, found)? {
                DocKind::Etcd => {
                    let etcd = self.etcd_from_value(item, &format!("items[{i}]."))?;
                    let unknown = unknown_fields(item)
                        .into_iter()
                        .map(|u| UnknownField {
                            path: format!("items[{i}].{}", u.path),
                            ..u
                        })
                        .collect();
                    etcds.push(EtcdManifest {
                        etcd,
                        line,
                        unknown_fields: unknown,
                    });
                }
                DocKind::List(_) | DocKind::Other => {}
            }
        }
        Ok(())
    }

    fn etcd_from_value(&self, value: &Value, path_prefix: &str) -> Result<Etcd, ManifestError> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            ManifestError::Parse(Box::new(ParseError {
                source_name: self.source_name.to_string(),
                line: None,
                column: None,
                path: Some(format!("{path_prefix}{}", e.path())),
                message: e.inner().to_string(),
                snippet: None,
            }))
        })
    }

    /// Decides what a document is, noting non-`Etcd` documents in `found`.
    fn classify<'v>(
        &self,
        value: &'v Value,
        line: u64,
        found: &mut Vec<String>,
    ) -> Result<DocKind<'v>, ManifestError> {
        let Value::Object(map) = value else {
            found.push(format!("a document that is not a mapping (line {line})"));
            return Ok(DocKind::Other);
        };
        let kind = map.get("kind").and_then(Value::as_str);
        let api_version = map.get("apiVersion").and_then(Value::as_str);
        match kind {
            Some(KIND) => {
                if api_version == Some(API_VERSION) {
                    Ok(DocKind::Etcd)
                } else {
                    Err(ManifestError::WrongApiVersion {
                        source_name: self.source_name.to_string(),
                        line,
                        found: api_version.map(str::to_string),
                    })
                }
            }
            Some(k) if k == "List" || k.ends_with("List") => {
                match map.get("items").and_then(Value::as_array) {
                    Some(items) => Ok(DocKind::List(items)),
                    None => {
                        found.push(format!("a {k} without items (line {line})"));
                        Ok(DocKind::Other)
                    }
                }
            }
            Some(k) => {
                let name = map
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(Value::as_str);
                found.push(match name {
                    Some(n) => format!("{k} {n:?} (line {line})"),
                    None => format!("a {k} (line {line})"),
                });
                Ok(DocKind::Other)
            }
            None => {
                found.push(format!("a document without \"kind\" (line {line})"));
                Ok(DocKind::Other)
            }
        }
    }

    fn yaml_error(&self, e: &serde_saphyr::Error, path: Option<String>) -> ManifestError {
        let location = e.location();
        let bare = e.without_snippet().render();
        // Drop the " at line L, column C" the renderer appends; we print the location first.
        let message = match bare.rfind(" at line ") {
            Some(i) if location.is_some() => bare[..i].to_string(),
            _ => bare,
        };
        let message = explain(&message);
        let rendered = e.render_with_options(serde_saphyr::render_options! {
            source_name: Some(self.source_name),
        });
        let snippet = rendered
            .split_once('\n')
            .map(|(_, rest)| rest.trim_end().to_string())
            .filter(|s| !s.is_empty());
        ManifestError::Parse(Box::new(ParseError {
            source_name: self.source_name.to_string(),
            line: location.map(|l| l.line()),
            column: location.map(|l| l.column()),
            path: path.filter(|p| !p.is_empty() && p != "."),
            message,
            snippet,
        }))
    }

    fn json_error(&self, e: &serde_json::Error, path: Option<String>) -> ManifestError {
        let message = e.to_string();
        let message = match message.rfind(" at line ") {
            Some(i) => message[..i].to_string(),
            None => message,
        };
        ManifestError::Parse(Box::new(ParseError {
            source_name: self.source_name.to_string(),
            line: Some(e.line() as u64),
            column: Some(e.column() as u64),
            path: path.filter(|p| !p.is_empty() && p != "."),
            message,
            snippet: None,
        }))
    }
}

/// Adds what was expected to the parser's terse type errors (`invalid i32`).
fn explain(message: &str) -> String {
    let int_types = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"];
    match message.strip_prefix("invalid ") {
        Some(t) if int_types.contains(&t) => format!("{message}: expected a whole number"),
        Some("bool") => format!("{message}: expected true or false"),
        _ if message.starts_with("budget breached") => format!(
            "{message}: the YAML exceeds the parser's limits (too many nodes once aliases are \
             expanded, too many aliases or anchors, or too deep nesting)"
        ),
        _ => message.to_string(),
    }
}

enum DocKind<'v> {
    Etcd,
    List(&'v [Value]),
    Other,
}

/// 1-based number of the first line that holds more than whitespace or a comment.
fn first_content_line(text: &str) -> Option<u64> {
    text.lines()
        .position(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        })
        .map(|i| i as u64 + 1)
}
