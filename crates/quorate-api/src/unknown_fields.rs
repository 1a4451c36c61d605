//! Fields in a manifest that the `Etcd` schema does not know. They are accepted (kubectl and
//! the API server drop them too), but a typo such as `deltaSnapshotPeriode` silently loses a
//! setting, so callers show these as warnings, with a suggestion when one is close.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;
use serde_json::Value;

use crate::etcd::Etcd;

/// A field the schema does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownField {
    /// Where, e.g. `spec.backup.deltaSnapshotPeriode`.
    pub path: String,
    /// A known field with a similar name at the same place, if any.
    pub suggestion: Option<String>,
    /// The field is known but deprecated: it is read, as `suggestion`, which is its new name.
    pub deprecated: bool,
}

/// Deprecated spellings that are still read: (path, druid's name).
const DEPRECATED: &[(&str, &str)] = &[(
    "spec.etcd.additionalAdvertisePeerUrls",
    crate::spec_etcd::ADDITIONAL_PEER_URLS_FIELD,
)];

impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.deprecated {
            let new = self.suggestion.as_deref().unwrap_or_default();
            return write!(
                f,
                "{}: deprecated spelling, read as {new:?}; rename it to {new:?}",
                self.path
            );
        }
        write!(f, "{}: unknown field, ignored", self.path)?;
        if let Some(s) = &self.suggestion {
            write!(f, " (did you mean {s:?}?)")?;
        }
        Ok(())
    }
}

static SCHEMA: LazyLock<JSONSchemaProps> = LazyLock::new(|| {
    Etcd::crd()
        .spec
        .versions
        .into_iter()
        .next()
        .and_then(|v| v.schema)
        .and_then(|s| s.open_api_v3_schema)
        .unwrap_or_default()
});

/// Unknown fields in an `Etcd` document (as parsed into JSON). `metadata` is not checked.
pub fn unknown_fields(document: &Value) -> Vec<UnknownField> {
    let mut found = Vec::new();
    if let Value::Object(map) = document {
        for (key, value) in map {
            match key.as_str() {
                "apiVersion" | "kind" | "metadata" => {}
                _ => walk(&SCHEMA, key, key, value, &mut found),
            }
        }
    }
    found
}

/// Checks `value` (at `path`, reached through `key`) against the property `key` of `parent`.
fn walk(
    parent: &JSONSchemaProps,
    key: &str,
    path: &str,
    value: &Value,
    out: &mut Vec<UnknownField>,
) {
    let Some(properties) = &parent.properties else {
        return;
    };
    match properties.get(key) {
        Some(schema) => {
            if let Some((_, new)) = DEPRECATED.iter().find(|(old, _)| *old == path) {
                out.push(UnknownField {
                    path: path.to_string(),
                    suggestion: Some(new.to_string()),
                    deprecated: true,
                });
            }
            check(schema, path, value, out)
        }
        None => out.push(UnknownField {
            path: path.to_string(),
            suggestion: suggest(key, properties),
            deprecated: false,
        }),
    }
}

fn check(schema: &JSONSchemaProps, path: &str, value: &Value, out: &mut Vec<UnknownField>) {
    if schema.x_kubernetes_preserve_unknown_fields == Some(true) {
        return;
    }
    match value {
        Value::Object(map) => {
            if schema.properties.is_some() {
                for (k, v) in map {
                    walk(schema, k, &format!("{path}.{k}"), v, out);
                }
            } else if let Some(JSONSchemaPropsOrBool::Schema(item)) = &schema.additional_properties
            {
                for (k, v) in map {
                    check(item, &format!("{path}.{k}"), v, out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items {
                for (i, v) in items.iter().enumerate() {
                    check(item, &format!("{path}[{i}]"), v, out);
                }
            }
        }
        _ => {}
    }
}

/// The known name closest to `key`, if it is close enough to be a likely typo.
fn suggest(key: &str, known: &BTreeMap<String, JSONSchemaProps>) -> Option<String> {
    known
        .keys()
        .map(|k| (edit_distance(&key.to_lowercase(), &k.to_lowercase()), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 5))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

/// Levenshtein distance in characters (`strsim`'s).
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_fields_are_not_reported() {
        let doc = json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "Etcd",
            "metadata": {"name": "x", "whatever": 1},
            "spec": {
                "replicas": 3,
                "labels": {"any-key": "v"},
                "etcd": {
                    "quota": "8Gi",
                    "resources": {"requests": {"cpu": "50m"}},
                    "additionalAdvertisePeerURLs": [{"memberName": "x-0", "urls": ["http://a:1"]}],
                    "clientUrlTls": {"tlsCASecretRef": {"name": "ca", "dataKey": "ca.crt"}}
                },
                "backup": {"store": {"prefix": "p", "provider": "Local"}},
                "schedulingConstraints": {"affinity": {"podAntiAffinity": {}}}
            },
            "status": {"ready": true, "conditions": []}
        });
        assert_eq!(unknown_fields(&doc), vec![]);
    }

    #[test]
    fn typos_are_reported_with_suggestions() {
        let doc = json!({
            "spec": {
                "replicas": 3,
                "backup": {"deltaSnapshotPeriode": "20s", "store": {"bucket": "b"}},
                "etcd": {
                    "clientUrlTLS": {},
                    "additionalAdvertisePeerUrls": [{"memberName": "x-0", "url": "http://a:1"}]
                },
                "frobnicate": true
            }
        });
        let mut found: Vec<String> = unknown_fields(&doc).iter().map(|u| u.to_string()).collect();
        found.sort();
        assert_eq!(
            found,
            [
                "spec.backup.deltaSnapshotPeriode: unknown field, ignored (did you mean \"deltaSnapshotPeriod\"?)",
                "spec.backup.store.bucket: unknown field, ignored",
                "spec.etcd.additionalAdvertisePeerUrls: deprecated spelling, read as \"additionalAdvertisePeerURLs\"; rename it to \"additionalAdvertisePeerURLs\"",
                "spec.etcd.additionalAdvertisePeerUrls[0].url: unknown field, ignored (did you mean \"urls\"?)",
                "spec.etcd.clientUrlTLS: unknown field, ignored (did you mean \"clientUrlTls\"?)",
                "spec.frobnicate: unknown field, ignored",
            ]
        );
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
