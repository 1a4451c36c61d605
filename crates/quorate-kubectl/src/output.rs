//! kubectl's output formats: `-o json|yaml|name|wide|jsonpath=TEMPLATE`, and the default
//! table. Lists print as kubectl's `v1 List`, so `-o json` of several objects is one document.

use crate::KubectlError;
use crate::error::FlagError;
use serde_json::Value;
use std::io::Write;

/// One `-o` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// The table with more columns.
    Wide,
    /// The object(s) as JSON.
    Json,
    /// The object(s) as YAML.
    Yaml,
    /// `<resource>.<group>/<name>`, one a line.
    Name,
    /// kubectl's JSONPath template.
    JsonPath(String),
}

impl OutputFormat {
    /// Parses `-o`'s value as kubectl names them.
    pub fn parse(text: &str) -> Result<OutputFormat, FlagError> {
        Ok(match text {
            "wide" => OutputFormat::Wide,
            "json" => OutputFormat::Json,
            "yaml" => OutputFormat::Yaml,
            "name" => OutputFormat::Name,
            other => match other
                .strip_prefix("jsonpath=")
                .or_else(|| other.strip_prefix("jsonpath-as-json="))
            {
                Some(template) if !template.is_empty() => {
                    OutputFormat::JsonPath(template.to_string())
                }
                _ => {
                    return Err(FlagError(format!(
                        "unknown output format {other:?}; use one of: wide, json, yaml, name, \
                         jsonpath=TEMPLATE (e.g. jsonpath='{{.items[*].metadata.name}}')"
                    )));
                }
            },
        })
    }
}

/// Objects to print: one, or a list; each with its `-o name` form.
pub struct Printed {
    /// The objects as JSON.
    pub items: Vec<Value>,
    /// `-o name` of each.
    pub names: Vec<String>,
    /// Whether one object was asked for (printed bare, not as a List).
    pub single: bool,
}

impl Printed {
    /// The document `-o json|yaml|jsonpath` prints.
    pub fn document(&self) -> Value {
        match (self.single, self.items.as_slice()) {
            (true, [one]) => one.clone(),
            _ => serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": self.items }),
        }
    }
}

/// Prints `printed` in `format` (not the table formats: the caller prints its table for
/// `None` and `Wide`); returns false when `format` is a table format.
pub fn print(
    out: &mut dyn Write,
    format: Option<&OutputFormat>,
    printed: &Printed,
) -> Result<bool, KubectlError> {
    match format {
        None | Some(OutputFormat::Wide) => return Ok(false),
        Some(OutputFormat::Json) => {
            let text = serde_json::to_string_pretty(&printed.document())
                .map_err(|e| KubectlError::Render(e.to_string()))?;
            writeln!(out, "{text}")?;
        }
        Some(OutputFormat::Yaml) => {
            let text = serde_saphyr::to_string(&printed.document())
                .map_err(|e| KubectlError::Render(e.to_string()))?;
            write!(out, "{text}")?;
        }
        Some(OutputFormat::Name) => {
            for name in &printed.names {
                writeln!(out, "{name}")?;
            }
        }
        Some(OutputFormat::JsonPath(template)) => {
            write!(out, "{}", jsonpath(template, &printed.document())?)?;
        }
    }
    Ok(true)
}

/// kubectl's JSONPath template: text with `{…}` expressions, each a JSONPath relative to the
/// document (`{.items[*].metadata.name}`), its matches joined by spaces (strings bare, other
/// values as JSON), and `{"\n"}`-style literals. `{range}`…`{end}` is not supported (use `-o
/// json` and jq for loops).
pub fn jsonpath(template: &str, document: &Value) -> Result<String, KubectlError> {
    use jsonpath_rust::JsonPath;
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = closing_brace(after).ok_or_else(|| {
            KubectlError::JsonPath(format!(
                "unclosed expression at {:?} in {template:?}",
                &rest[open..]
            ))
        })?;
        let expr = after[..close].trim();
        rest = &after[close + 1..];
        if let Some(literal) = expr.strip_prefix('"').and_then(|e| e.strip_suffix('"')) {
            out.push_str(
                &literal
                    .replace("\\n", "\n")
                    .replace("\\t", "\t")
                    .replace("\\\"", "\""),
            );
            continue;
        }
        if expr == "end" || expr.starts_with("range ") || expr.starts_with("range\t") {
            return Err(KubectlError::JsonPath(format!(
                "{{{expr}}} is not supported; print the list with -o json and loop with jq, or \
                 use {{.items[*].FIELD}}"
            )));
        }
        let path = if expr.starts_with('$') {
            expr.to_string()
        } else if expr.starts_with('.') || expr.starts_with('[') {
            format!("${expr}")
        } else {
            format!("$.{expr}")
        };
        let found = document
            .query(&path)
            .map_err(|e| KubectlError::JsonPath(format!("{{{expr}}}: {e}")))?;
        let texts: Vec<String> = found
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        out.push_str(&texts.join(" "));
    }
    out.push_str(rest);
    Ok(out)
}

/// The index of the `}` that closes an expression, skipping quoted text.
fn closing_brace(text: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '}') => return Some(i),
            _ => {}
        }
    }
    None
}

/// `-o name` of an Etcd.
pub fn etcd_name(name: &str) -> String {
    format!("etcd.druid.gardener.cloud/{name}")
}

/// An Etcd as `-o json` prints it: with `apiVersion` and `kind`, as the API returns it.
pub fn etcd_value(etcd: &quorate_api::Etcd) -> Result<Value, KubectlError> {
    serde_json::to_value(etcd).map_err(|e| KubectlError::Render(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_read_like_kubectls() {
        let doc = json!({"items": [
            {"metadata": {"name": "a"}, "status": {"ready": true, "conditions": [
                {"type": "Ready", "status": "True"}, {"type": "BackupReady", "status": "False"}]}},
            {"metadata": {"name": "b"}, "status": {"ready": false}}
        ]});
        assert_eq!(jsonpath("{.items[*].metadata.name}", &doc).unwrap(), "a b");
        assert_eq!(
            jsonpath("{.items[0].status.ready}{\"\\n\"}", &doc).unwrap(),
            "true\n"
        );
        assert_eq!(
            jsonpath(
                "x={.items[0].status.conditions[?(@.type=='BackupReady')].status}",
                &doc
            )
            .unwrap(),
            "x=False"
        );
        assert!(matches!(
            jsonpath("{range .items[*]}{.metadata.name}{end}", &doc),
            Err(KubectlError::JsonPath(m)) if m.contains("not supported")
        ));
        assert!(matches!(
            jsonpath("{.items", &doc),
            Err(KubectlError::JsonPath(m)) if m.contains("unclosed")
        ));
    }

    #[test]
    fn output_flags_parse_as_kubectl_names_them() {
        assert_eq!(OutputFormat::parse("json").unwrap(), OutputFormat::Json);
        assert_eq!(OutputFormat::parse("yaml").unwrap(), OutputFormat::Yaml);
        assert_eq!(OutputFormat::parse("name").unwrap(), OutputFormat::Name);
        assert_eq!(OutputFormat::parse("wide").unwrap(), OutputFormat::Wide);
        assert_eq!(
            OutputFormat::parse("jsonpath={.metadata.name}").unwrap(),
            OutputFormat::JsonPath("{.metadata.name}".into())
        );
        let refused = OutputFormat::parse("xml").unwrap_err().to_string();
        assert!(
            refused.contains("wide, json, yaml, name, jsonpath="),
            "{refused}"
        );
        assert!(OutputFormat::parse("jsonpath=").is_err());
    }
}
