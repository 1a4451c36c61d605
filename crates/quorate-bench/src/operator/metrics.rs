//! Counters read from Prometheus text: the API server's `apiserver_request_total` (every
//! request it served, by verb, resource and code) and the operator's
//! `quorate_operator_reconciles_total` (passes by result), with the differences between two
//! scrapes.

use std::collections::BTreeMap;

/// One `apiserver_request_total` series, reduced to what the report shows.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PATCH`, `APPLY`, ... as the API server names them.
    pub verb: String,
    /// `resource` or `resource/subresource`; empty for non-resource URLs (`/metrics`).
    pub resource: String,
    /// HTTP status code.
    pub code: String,
}

impl RequestKey {
    /// `VERB resource` (or `VERB <non-resource>`).
    pub fn verb_resource(&self) -> String {
        let resource = if self.resource.is_empty() {
            "(non-resource URL)"
        } else {
            &self.resource
        };
        format!("{} {resource}", self.verb)
    }
}

/// Request counts by series.
pub type RequestCounts = BTreeMap<RequestKey, f64>;

/// Splits `name{labels} value` into the labels (unescaped) and the value; `None` for other
/// metrics, comments and lines that do not parse.
fn series<'a>(line: &'a str, name: &str) -> Option<(BTreeMap<String, String>, &'a str)> {
    let rest = line.strip_prefix(name)?.strip_prefix('{')?;
    let mut labels = BTreeMap::new();
    let mut chars = rest.char_indices();
    let mut key = String::new();
    loop {
        let (i, c) = chars.next()?;
        match c {
            '}' => {
                let value = rest[i + 1..].split_whitespace().next()?;
                return Some((labels, value));
            }
            ',' | ' ' => {}
            '=' => {
                if chars.next()?.1 != '"' {
                    return None;
                }
                let mut value = String::new();
                loop {
                    match chars.next()?.1 {
                        '\\' => match chars.next()?.1 {
                            'n' => value.push('\n'),
                            other => value.push(other),
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(std::mem::take(&mut key), value);
            }
            c => key.push(c),
        }
    }
}

/// `apiserver_request_total` of a `/metrics` scrape, summed by verb, resource(/subresource)
/// and code (over groups, versions, scopes and components).
pub fn parse_apiserver_requests(text: &str) -> RequestCounts {
    let mut counts = RequestCounts::new();
    for line in text.lines() {
        let Some((labels, value)) = series(line, "apiserver_request_total") else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let subresource = label("subresource");
        let resource = match (label("resource"), subresource.as_str()) {
            (r, "") => r,
            (r, s) if r.is_empty() => s.to_string(),
            (r, s) => format!("{r}/{s}"),
        };
        let key = RequestKey {
            verb: label("verb"),
            resource,
            code: label("code"),
        };
        *counts.entry(key).or_default() += value;
    }
    counts
}

/// `after - before` per series; series that did not grow are left out.
pub fn delta(before: &RequestCounts, after: &RequestCounts) -> RequestCounts {
    after
        .iter()
        .filter_map(|(key, &value)| {
            let grown = value - before.get(key).copied().unwrap_or(0.0);
            (grown > 0.0).then(|| (key.clone(), grown))
        })
        .collect()
}

/// Counts summed by `VERB resource` (codes merged), for the tables.
pub fn by_verb_resource(counts: &RequestCounts, resource_only: bool) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (key, value) in counts {
        if resource_only && key.resource.is_empty() {
            continue;
        }
        *out.entry(key.verb_resource()).or_default() += value;
    }
    out
}

/// Whether `quorate operator` makes requests with this verb on this resource (`name` or
/// `name/subresource`): it watches (list + watch) `Etcd`s, StatefulSets, Leases and Pods; GETs
/// `Etcd`s (when its cache is behind its own writes), ConfigMaps and Secrets; applies its components and deletes them when an `Etcd` goes;
/// patches `Etcd`s (finalizer, annotation, status) and Events; creates Events. Everything else
/// (namespaces, flow-control objects, quotas, the `kubernetes` Service) is the API server's
/// own.
pub fn is_operator_request(verb: &str, resource: &str) -> bool {
    const WATCHED: &[&str] = &["etcds", "statefulsets", "leases", "pods"];
    const COMPONENTS: &[&str] = &[
        "statefulsets",
        "leases",
        "services",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "poddisruptionbudgets",
        "configmaps",
    ];
    match verb {
        "LIST" | "WATCH" => WATCHED.contains(&resource),
        "GET" => ["etcds", "configmaps", "secrets"].contains(&resource),
        "APPLY" | "DELETE" => COMPONENTS.contains(&resource),
        "PATCH" => ["etcds", "etcds/status", "events"].contains(&resource),
        "POST" => resource == "events",
        _ => false,
    }
}

/// The operator's share of `window` (`window_minutes` long): per `VERB resource` the operator
/// uses ([`is_operator_request`]), the count less what the API server does alone on the same
/// verb and resource at the rate seen in `background` (`background_minutes` long), floored
/// at 0.
pub fn operator_share(
    window: &RequestCounts,
    window_minutes: f64,
    background: &RequestCounts,
    background_minutes: f64,
) -> BTreeMap<String, f64> {
    let alone = by_verb_resource(background, true);
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (key, value) in window {
        if !is_operator_request(&key.verb, &key.resource) {
            continue;
        }
        *out.entry(key.verb_resource()).or_default() += value;
    }
    for (row, value) in out.iter_mut() {
        let rate = alone.get(row).copied().unwrap_or(0.0) / background_minutes.max(1e-9);
        *value = (*value - rate * window_minutes).max(0.0);
    }
    out.retain(|_, v| *v > 0.0);
    out
}

/// Requests that are not answered with 2xx, by `VERB resource code`; watches are left out
/// (one the client ends is counted with code 0).
pub fn failures(counts: &RequestCounts) -> BTreeMap<String, f64> {
    counts
        .iter()
        .filter(|(key, _)| {
            !key.code.starts_with('2') && !key.resource.is_empty() && key.verb != "WATCH"
        })
        .map(|(key, value)| (format!("{} {}", key.verb_resource(), key.code), *value))
        .collect()
}

/// The sum over series that name a resource (non-resource URLs such as the benchmark's own
/// `/metrics` scrapes left out).
pub fn resource_total(counts: &RequestCounts) -> f64 {
    counts
        .iter()
        .filter(|(key, _)| !key.resource.is_empty())
        // A fold from +0.0: `sum()` of nothing is -0.0, which would print as "-0.0".
        .fold(0.0, |total, (_, v)| total + v)
}

/// What the operator's `/metrics` says about its passes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OperatorCounters {
    /// `quorate_operator_reconciles_total` by result.
    pub passes: BTreeMap<String, f64>,
    /// `quorate_operator_reconcile_errors_total` by code.
    pub errors: BTreeMap<String, f64>,
    /// Sum of pass durations in seconds.
    pub duration_sum: f64,
    /// Number of pass durations observed.
    pub duration_count: f64,
}

impl OperatorCounters {
    /// All passes, whatever their result.
    pub fn total_passes(&self) -> f64 {
        self.passes.values().sum()
    }

    /// `self - before`, counter by counter.
    pub fn since(&self, before: &OperatorCounters) -> OperatorCounters {
        let minus = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            now.iter()
                .map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect()
        };
        OperatorCounters {
            passes: minus(&self.passes, &before.passes),
            errors: minus(&self.errors, &before.errors),
            duration_sum: self.duration_sum - before.duration_sum,
            duration_count: self.duration_count - before.duration_count,
        }
    }

    /// Mean pass duration, when there were passes.
    pub fn mean_pass(&self) -> Option<f64> {
        (self.duration_count > 0.0).then(|| self.duration_sum / self.duration_count)
    }
}

/// Parses the operator's OpenMetrics text.
pub fn parse_operator(text: &str) -> OperatorCounters {
    let mut out = OperatorCounters::default();
    for line in text.lines() {
        if let Some((labels, value)) = series(line, "quorate_operator_reconciles_total") {
            let result = labels.get("result").cloned().unwrap_or_default();
            *out.passes.entry(result).or_default() += value.parse::<f64>().unwrap_or(0.0);
        } else if let Some((labels, value)) =
            series(line, "quorate_operator_reconcile_errors_total")
        {
            let code = labels.get("code").cloned().unwrap_or_default();
            *out.errors.entry(code).or_default() += value.parse::<f64>().unwrap_or(0.0);
        } else if let Some(value) =
            line.strip_prefix("quorate_operator_reconcile_duration_seconds_sum ")
        {
            out.duration_sum += value.trim().parse().unwrap_or(0.0);
        } else if let Some(value) =
            line.strip_prefix("quorate_operator_reconcile_duration_seconds_count ")
        {
            out.duration_count += value.trim().parse().unwrap_or(0.0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const APISERVER: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="druid.gardener.cloud",resource="etcds",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="statefulsets",scope="resource",subresource="",verb="APPLY",version="v1"} 5
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="statefulsets",scope="resource",subresource="",verb="APPLY",version="v1"} 3
apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 2
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 1.5e+01
apiserver_request_duration_seconds_bucket{code="200",le="0.05",verb="GET"} 3
"#;

    #[test]
    fn apiserver_requests_are_summed_by_verb_resource_and_code() {
        let counts = parse_apiserver_requests(APISERVER);
        let key = |verb: &str, resource: &str, code: &str| RequestKey {
            verb: verb.into(),
            resource: resource.into(),
            code: code.into(),
        };
        assert_eq!(counts[&key("PATCH", "etcds/status", "200")], 12.0);
        assert_eq!(counts[&key("APPLY", "statefulsets", "201")], 3.0);
        assert_eq!(counts[&key("GET", "/metrics", "200")], 15.0);
        assert_eq!(counts.len(), 5);
        let by = by_verb_resource(&counts, true);
        assert_eq!(by["APPLY statefulsets"], 8.0);
        assert!(!by.contains_key("GET /metrics") || by["GET /metrics"] == 15.0);
        assert_eq!(
            failures(&counts),
            BTreeMap::from([("GET configmaps 404".to_string(), 2.0)])
        );
    }

    #[test]
    fn deltas_keep_only_what_grew() {
        let before = parse_apiserver_requests(APISERVER);
        let mut after = before.clone();
        let patch = after
            .keys()
            .find(|k| k.resource == "etcds/status")
            .unwrap()
            .clone();
        *after.get_mut(&patch).unwrap() += 4.0;
        let d = delta(&before, &after);
        assert_eq!(d.len(), 1);
        assert_eq!(d[&patch], 4.0);
        assert_eq!(resource_total(&d), 4.0);
    }

    #[test]
    fn operator_counters_and_their_difference() {
        let text = "# TYPE quorate_operator_reconciles counter\n\
            quorate_operator_reconciles_total{result=\"succeeded\"} 10\n\
            quorate_operator_reconciles_total{result=\"not_run\"} 30\n\
            quorate_operator_reconcile_errors_total{code=\"ERR_SYNC_STATEFULSET\"} 1\n\
            quorate_operator_reconcile_duration_seconds_sum 2.0\n\
            quorate_operator_reconcile_duration_seconds_count 40\n\
            # EOF\n";
        let now = parse_operator(text);
        assert_eq!(now.total_passes(), 40.0);
        assert_eq!(now.errors["ERR_SYNC_STATEFULSET"], 1.0);
        assert_eq!(now.mean_pass(), Some(0.05));
        let before = OperatorCounters {
            passes: BTreeMap::from([("succeeded".to_string(), 10.0)]),
            duration_sum: 1.0,
            duration_count: 10.0,
            ..OperatorCounters::default()
        };
        let d = now.since(&before);
        assert_eq!(d.passes, BTreeMap::from([("not_run".to_string(), 30.0)]));
        assert_eq!(d.mean_pass(), Some(1.0 / 30.0));
    }

    #[test]
    fn the_operator_share_leaves_out_other_resources_and_the_background() {
        let key = |verb: &str, resource: &str| RequestKey {
            verb: verb.into(),
            resource: resource.into(),
            code: "200".into(),
        };
        let window = RequestCounts::from([
            (key("PATCH", "etcds/status"), 100.0),
            (key("GET", "services"), 12.0),
            (key("GET", "namespaces"), 18.0),
            (key("LIST", "services"), 1.0),
        ]);
        // Alone for half a minute: 3 GETs of services, i.e. 6 per minute.
        let background = RequestCounts::from([
            (key("GET", "services"), 3.0),
            (key("GET", "namespaces"), 3.0),
        ]);
        let share = operator_share(&window, 2.0, &background, 0.5);
        assert_eq!(
            share,
            BTreeMap::from([("PATCH etcds/status".to_string(), 100.0)])
        );
        assert!(is_operator_request("PATCH", "etcds/status"));
        assert!(is_operator_request("WATCH", "leases") && !is_operator_request("LIST", "services"));
        assert!(!is_operator_request("GET", "namespaces"));
    }

    #[test]
    fn escaped_label_values_parse() {
        let line = r#"apiserver_request_total{code="200",resource="a\"b",verb="GET"} 7"#;
        let counts = parse_apiserver_requests(line);
        assert_eq!(counts.keys().next().unwrap().resource, "a\"b");
    }
}
