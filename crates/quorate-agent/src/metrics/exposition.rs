//! The agent's `/metrics` in the Prometheus text format 0.0.4, the format etcd-backup-restore
//! serves (`promhttp.Handler()` without OpenMetrics), so every series has BR's exact name.
//!
//! OpenMetrics cannot carry them: there a counter's sample is always `<family>_total`, but BR's
//! `etcdbr_snapshotter_failure` and `etcdbr_network_*_bytes` counters have no `_total`, and a
//! Prometheus that negotiates OpenMetrics would store them under other names than Gardener's
//! dashboards and alerts query. `prometheus-client` writes OpenMetrics only, so [`to_prometheus_text`]
//! rewrites its output: a counter family is named after its sample (`x_total`, or BR's
//! unsuffixed name), `_created` samples and `# UNIT`/`# EOF` lines are dropped, `unknown`
//! becomes `untyped` and `info` a gauge.

/// The content type of [`to_prometheus_text`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counters that etcd-backup-restore exposes without the `_total` suffix (its Go client
/// library keeps a counter's name as given in the text format 0.0.4).
pub const UNSUFFIXED_COUNTERS: &[&str] = &[
    "etcdbr_snapshotter_failure",
    "etcdbr_network_transmitted_bytes",
    "etcdbr_network_received_bytes",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Info,
    Other,
}

/// Rewrites `prometheus-client`'s OpenMetrics text as Prometheus text format 0.0.4, with the
/// counters of [`UNSUFFIXED_COUNTERS`] under their unsuffixed names.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The family being written: its OpenMetrics name, kind and its 0.0.4 name.
    let mut family = String::new();
    let mut kind = Kind::Other;
    let mut renamed = String::new();
    let mut help: Option<String> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // Held until the TYPE line says what the family is called in 0.0.4.
            help = Some(rest.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
            family = name.to_string();
            let (k, new_name, new_ty) = match ty {
                "counter" if UNSUFFIXED_COUNTERS.contains(&name) => {
                    (Kind::Counter, name.to_string(), "counter")
                }
                "counter" => (Kind::Counter, format!("{name}_total"), "counter"),
                "info" => (Kind::Info, format!("{name}_info"), "gauge"),
                "unknown" => (Kind::Other, name.to_string(), "untyped"),
                other => (Kind::Other, name.to_string(), other),
            };
            kind = k;
            renamed = new_name;
            if let Some(h) = help.take() {
                let text = h.strip_prefix(family.as_str()).unwrap_or(&h).trim_start();
                out.push_str(&format!("# HELP {renamed} {text}\n"));
            }
            out.push_str(&format!("# TYPE {renamed} {new_ty}\n"));
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let (name, rest) = line.split_at(name_end);
        match kind {
            Kind::Counter => {
                if name == format!("{family}_created") {
                    continue;
                }
                if name == format!("{family}_total") {
                    out.push_str(&renamed);
                    out.push_str(strip_exemplar(rest));
                    out.push('\n');
                    continue;
                }
            }
            Kind::Info => {
                if name == format!("{family}_info") {
                    out.push_str(&renamed);
                    out.push_str(rest);
                    out.push('\n');
                    continue;
                }
            }
            Kind::Other => {}
        }
        out.push_str(name);
        out.push_str(strip_exemplar(rest));
        out.push('\n');
    }
    out
}

/// A sample line without an OpenMetrics exemplar (` # {…} v`), which 0.0.4 has no room for.
fn strip_exemplar(rest: &str) -> &str {
    // Label values may hold " # " inside quotes; an exemplar only follows the closing brace
    // or the value, so look after the label set.
    let after_labels = if rest.starts_with('{') {
        closing_brace(rest).map_or(0, |i| i + 1)
    } else {
        0
    };
    match rest[after_labels..].find(" # ") {
        Some(i) => &rest[..after_labels + i],
        None => rest,
    }
}

/// The index of the `}` closing a label set that starts at 0, skipping quoted values.
fn closing_brace(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_after_their_samples_and_br_keeps_its_unsuffixed_ones() {
        let om = "# HELP etcdbr_snapshot_gc Total number of garbage collected snapshots.\n\
                  # TYPE etcdbr_snapshot_gc counter\n\
                  etcdbr_snapshot_gc_total{kind=\"Full\",succeeded=\"true\"} 3\n\
                  etcdbr_snapshot_gc_created{kind=\"Full\",succeeded=\"true\"} 1.7e9\n\
                  # HELP etcdbr_snapshotter_failure Total number of snapshotter errors.\n\
                  # TYPE etcdbr_snapshotter_failure counter\n\
                  etcdbr_snapshotter_failure_total{error=\"a # b}\"} 1 # {x=\"1\"} 1.0\n\
                  # HELP quorate_build Build.\n\
                  # TYPE quorate_build info\n\
                  quorate_build_info{version=\"0.1.0\"} 1\n\
                  # HELP h A histogram.\n\
                  # TYPE h histogram\n\
                  # UNIT h seconds\n\
                  h_bucket{le=\"+Inf\"} 0\n\
                  h_sum 0.0\n\
                  h_count 0\n\
                  # EOF\n";
        let text = to_prometheus_text(om);
        assert_eq!(
            text,
            "# HELP etcdbr_snapshot_gc_total Total number of garbage collected snapshots.\n\
             # TYPE etcdbr_snapshot_gc_total counter\n\
             etcdbr_snapshot_gc_total{kind=\"Full\",succeeded=\"true\"} 3\n\
             # HELP etcdbr_snapshotter_failure Total number of snapshotter errors.\n\
             # TYPE etcdbr_snapshotter_failure counter\n\
             etcdbr_snapshotter_failure{error=\"a # b}\"} 1\n\
             # HELP quorate_build_info Build.\n\
             # TYPE quorate_build_info gauge\n\
             quorate_build_info{version=\"0.1.0\"} 1\n\
             # HELP h A histogram.\n\
             # TYPE h histogram\n\
             h_bucket{le=\"+Inf\"} 0\n\
             h_sum 0.0\n\
             h_count 0\n"
        );
    }
}
