//! The monitoring bundle of `deploy/monitoring/` against the real thing: every metric its
//! dashboard and alert rules use is exported by a running agent (a local cluster with backups)
//! or operator (against a real kube-apiserver), the PrometheusRule holds the rules file's
//! groups, and promtool checks the rules and proves each alert with its unit tests.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Local, condition, eventually, path_str};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The quorate and etcd-backup-restore metric names a PromQL expression uses.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = ["quorate_", "etcdbr_"]
        .iter()
        .filter_map(|p| rest.find(p))
        .min()
    {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Every `expr` of the rules file and the dashboard.
fn expressions() -> Vec<String> {
    let rules: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/quorate.rules.yaml")).expect("rules YAML");
    let mut exprs: Vec<String> = rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .map(|r| r["expr"].as_str().expect("expr").to_string())
        .collect();
    exprs.extend(dashboard_expressions());
    exprs
}

/// Every `expr` of the dashboard.
fn dashboard_expressions() -> Vec<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/monitoring/grafana-dashboard.json")).expect("JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    exprs
}

/// The series names a `/metrics` answer can have, from its `# TYPE` lines: a histogram's
/// `_bucket`, `_sum` and `_count`; a counter's `_total` in OpenMetrics (a text ending in
/// `# EOF`, the operator's) but its own name in the text format 0.0.4 (the agent's, which
/// names the family after its samples, as etcd-backup-restore does).
fn families(text: &str) -> BTreeSet<String> {
    let openmetrics = text.trim_end().ends_with("# EOF");
    let mut names = BTreeSet::new();
    for (name, ty) in text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
    {
        match ty {
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            "counter" if openmetrics => {
                names.insert(format!("{name}_total"));
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Whether series name `name` is one of `families`.
fn exported(name: &str, families: &BTreeSet<String>) -> bool {
    families.contains(name)
}

/// One sample line of the text format: its name and labels.
fn sample(line: &str) -> Option<(String, Vec<(String, String)>)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let end = line.find(['{', ' '])?;
    let name = line[..end].to_string();
    let mut labels = Vec::new();
    if line[end..].starts_with('{') {
        let mut chars = line[end + 1..].chars().peekable();
        loop {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            let key = key.trim_start_matches(',').to_string();
            if key.is_empty() || key.starts_with('}') {
                break;
            }
            assert_eq!(chars.next(), Some('"'), "label {key} of {line}");
            let mut value = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.push(chars.next()?),
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key, value));
            if chars.peek() == Some(&'}') {
                break;
            }
        }
    }
    Some((name, labels))
}

/// etcd-backup-restore's metrics (its `pkg/metrics`): name as a series carries it, type, the
/// labels, and for each label the values BR creates at zero at start (every combination must
/// be a series from the start, or an alert on it never fires).
type BrMetric = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static [&'static str])],
);

const KIND: (&str, &[&str]) = ("kind", &["Full", "Incr", "Chunk"]);
const SUCCEEDED: (&str, &[&str]) = ("succeeded", &["true", "false"]);

/// Every metric of etcd-backup-restore's `pkg/metrics` (`metrics.go`, `network_linux.go`).
const BACKUP_RESTORE_METRICS: &[BrMetric] = &[
    ("etcdbr_snapshot_gc_total", "counter", &[KIND, SUCCEEDED]),
    ("etcdbr_snapshot_latest_revision", "gauge", &[KIND]),
    ("etcdbr_snapshot_latest_timestamp", "gauge", &[KIND]),
    ("etcdbr_snapshot_required", "gauge", &[KIND]),
    (
        "etcdbr_snapshot_duration_seconds",
        "histogram",
        &[KIND, SUCCEEDED],
    ),
    (
        "etcdbr_validation_duration_seconds",
        "histogram",
        &[SUCCEEDED],
    ),
    (
        "etcdbr_restoration_duration_seconds",
        "histogram",
        &[("restore", &["single_member", "single_node"]), SUCCEEDED],
    ),
    // BR labels its one series endpoint=""; an agent names its member.
    (
        "etcdbr_defragmentation_duration_seconds",
        "histogram",
        &[SUCCEEDED, ("endpoint", &[])],
    ),
    ("etcdbr_snapstore_latest_deltas_total", "gauge", &[]),
    (
        "etcdbr_snapstore_latest_deltas_revisions_total",
        "gauge",
        &[],
    ),
    // Values are what failed; BR's one series at start is error="".
    ("etcdbr_snapshotter_failure", "counter", &[("error", &[])]),
    ("etcdbr_cluster_size", "gauge", &[]),
    ("etcdbr_is_learner", "gauge", &[]),
    ("etcdbr_is_learner_count_total", "counter", &[SUCCEEDED]),
    (
        "etcdbr_add_learner_duration_seconds",
        "histogram",
        &[SUCCEEDED],
    ),
    (
        "etcdbr_member_remove_duration_seconds",
        "histogram",
        &[SUCCEEDED],
    ),
    (
        "etcdbr_member_promote_duration_seconds",
        "histogram",
        &[SUCCEEDED],
    ),
    ("etcdbr_network_transmitted_bytes", "counter", &[]),
    ("etcdbr_network_received_bytes", "counter", &[]),
    // What every Prometheus client library exports, and the build.
    ("process_cpu_seconds_total", "counter", &[]),
    ("process_start_time_seconds", "gauge", &[]),
    ("process_resident_memory_bytes", "gauge", &[]),
    ("process_virtual_memory_bytes", "gauge", &[]),
    ("process_open_fds", "gauge", &[]),
    ("process_max_fds", "gauge", &[]),
    ("quorate_build_info", "gauge", &[("version", &[])]),
];

/// The agent's `/metrics` has every metric of [`BACKUP_RESTORE_METRICS`] under BR's name,
/// type and labels (besides `etcd` and `member`, which every series of an agent carries).
fn assert_backup_restore_metrics(text: &str) {
    let types: std::collections::BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let samples: Vec<(String, Vec<(String, String)>)> = text.lines().filter_map(sample).collect();
    for &(name, ty, labels) in BACKUP_RESTORE_METRICS {
        assert_eq!(
            types.get(name).copied(),
            Some(ty),
            "# TYPE of {name} in\n{text}"
        );
        let series_name = if ty == "histogram" {
            format!("{name}_count")
        } else {
            name.to_string()
        };
        let series: Vec<&Vec<(String, String)>> = samples
            .iter()
            .filter(|(n, _)| *n == series_name)
            .map(|(_, l)| l)
            .collect();
        assert!(!series.is_empty(), "no {series_name} series in\n{text}");
        let want: BTreeSet<&str> = labels.iter().map(|(l, _)| *l).collect();
        for s in &series {
            let got: BTreeSet<&str> = s
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| !["etcd", "member"].contains(k))
                .collect();
            assert_eq!(got, want, "labels of {series_name}: {s:?}");
        }
        // Every combination of the enumerated label values is a series.
        let mut combinations: Vec<Vec<(&str, &str)>> = vec![Vec::new()];
        for &(label, values) in labels.iter().filter(|(_, v)| !v.is_empty()) {
            combinations = combinations
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((label, *v));
                        c
                    })
                })
                .collect();
        }
        for combination in combinations {
            assert!(
                series.iter().any(|s| combination
                    .iter()
                    .all(|(k, v)| s.iter().any(|(sk, sv)| sk == k && sv == v))),
                "no {series_name} series with {combination:?}"
            );
        }
    }
}

/// promtool from `scripts/install-promtool.sh`, or on PATH; `None` (the checks are skipped)
/// only outside CI.
fn promtool() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let dir = std::env::var_os("QUORATE_PROMETHEUS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/quorate/prometheus"));
    let found = [dir.join("promtool")]
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .into_iter()
                .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .map(|d| d.join("promtool")),
        )
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is missing; run scripts/install-promtool.sh"
        );
        println!("SKIPPED promtool checks: run scripts/install-promtool.sh");
    }
    found
}

#[test]
fn the_rules_check_and_every_alert_fires_only_when_it_should() {
    let rules: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/quorate.rules.yaml")).expect("rules");
    let custom: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/prometheusrule.yaml")).expect("YAML");
    assert_eq!(custom["kind"], "PrometheusRule");
    assert_eq!(
        custom["spec"]["groups"], rules["groups"],
        "prometheusrule.yaml must hold the groups of quorate.rules.yaml"
    );
    assert_eq!(
        read("deploy/helm/quorate-operator/files/quorate.rules.yaml"),
        read("deploy/monitoring/quorate.rules.yaml"),
        "the chart's copy of the rules (its PrometheusRule) must equal deploy/monitoring's"
    );
    // Every alert links its runbook: a section of docs/operations/alerts.md.
    let runbooks = read("docs/operations/alerts.md");
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("alert");
            assert_eq!(
                rule["annotations"]["runbook_url"].as_str(),
                Some(format!("docs/operations/alerts.md#{}", alert.to_lowercase()).as_str()),
                "{alert}'s runbook_url"
            );
            assert!(
                runbooks.lines().any(|l| l == format!("## {alert}")),
                "docs/operations/alerts.md has no section for {alert}"
            );
        }
    }
    let Some(promtool) = promtool() else {
        return;
    };
    for args in [
        vec!["check", "rules", "deploy/monitoring/quorate.rules.yaml"],
        vec!["test", "rules", "deploy/monitoring/tests/quorate.test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(&args)
            .current_dir(repo(""))
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every alert has its unit tests: one where it fires, one where it stays silent.
    let tests: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/tests/quorate.test.yaml")).expect("tests");
    let cases: Vec<&serde_json::Value> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().expect("cases"))
        .collect();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("alert");
            let of = |firing: bool| {
                cases.iter().any(|c| {
                    c["alertname"] == alert
                        && c["exp_alerts"]
                            .as_array()
                            .is_some_and(|a| a.is_empty() != firing)
                })
            };
            assert!(
                of(true) && of(false),
                "{alert} lacks a firing or a silent test"
            );
        }
    }
}

/// The dashboard tells clusters of the same name apart: every query of an agent's metrics
/// selects the cluster, namespace and etcd variables and keeps `namespace` in what it groups
/// by, so the `etcd-main` of every shoot in a seed does not add up into one line.
#[test]
fn the_dashboard_keeps_each_namespace_apart() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/monitoring/grafana-dashboard.json")).expect("JSON");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "cluster", "namespace", "etcd"]);
    for expr in dashboard_expressions() {
        let agent = metric_names(&expr)
            .iter()
            .any(|m| !m.starts_with("quorate_operator_"));
        if !agent || !expr.contains('{') {
            continue;
        }
        assert!(
            expr.contains(r#"cluster=~"$cluster",namespace=~"$namespace",etcd=~"$etcd""#),
            "{expr} does not select the dashboard's cluster, namespace and etcd"
        );
        for (at, _) in expr.match_indices(" by (") {
            let grouping = &expr[at..at + expr[at..].find(')').expect("closing )")];
            assert!(
                grouping.contains("namespace"),
                "{expr} groups without namespace"
            );
        }
    }
}

/// `GET http://<addr>/<path>` with a fresh connection; the body of a 200.
async fn get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The operator's `/metrics`, from `quorate operator` run against a real kube-apiserver;
/// `None` when no kube-apiserver is available outside CI.
async fn operator_metrics() -> Option<String> {
    let server =
        quorate_testkit::KubeApiServer::start_or_skip("the operator's metrics for the dashboard")
            .await?;
    // The CRDs, then an Etcd to reconcile so the per-cluster gauges have series (one after
    // the other: the Etcd needs its CRD established).
    for path in ["deploy/crds", "examples/etcd-cluster.yaml"] {
        let applied = server
            .kubectl()
            .args(["apply", "-f"])
            .arg(repo(path))
            .output()
            .expect("kubectl");
        assert!(
            applied.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
    }
    let addr = format!("127.0.0.1:{}", quorate_testkit::free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_quorate"));
    command
        .args(["operator", "--disable-webhooks", "--leader-election=false"])
        .arg(format!("--http-address={addr}"))
        .env("KUBECONFIG", server.kubeconfig())
        .env("QUORATE_LOG", "warn")
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .env_remove("IMAGEVECTOR_OVERWRITE");
    let _operator = quorate_testkit::ChildGuard::spawn(&mut command).expect("start the operator");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(metrics) = get(&addr, "/metrics").await
            && metrics.contains("quorate_operator_clusters{")
        {
            return Some(metrics);
        }
        assert!(
            Instant::now() < deadline,
            "the operator did not report the Etcd's conditions on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn every_metric_the_dashboard_and_alerts_use_is_exported() {
    let local = Local::new();
    let name = "watched";
    // With client TLS (certificates generated locally), so the certificate metrics are there.
    let path = local.manifest(
        "c.yaml",
        &support::canary::with_backups(name, 1).replace(
            "    heartbeatDuration: 1s\n",
            "    heartbeatDuration: 1s\n    clientUrlTls:\n      tlsCASecretRef: {name: ca}\n      \
             serverTLSSecretRef: {name: server}\n      clientTLSSecretRef: {name: client}\n",
        ),
    );
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady", Duration::from_secs(60), || {
        (condition(&local, name, "BackupReady")?.0 == "True").then_some(())
    });
    // etcd's own metrics: plain HTTP on --listen-metrics-urls, though clients need TLS.
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(local.cluster_dir(name).join("config.json")).unwrap(),
    )
    .unwrap();
    let metrics_port = config["members"][0]["metricsPort"]
        .as_u64()
        .expect("a metrics port") as u16;
    let (code, etcd) = support::http_get(metrics_port, "/metrics");
    assert_eq!(code, 200, "{etcd}");
    assert!(etcd.contains("etcd_server_has_leader 1"), "{etcd:.500}");
    let agent = local.agent_metrics(name, 0);
    assert_backup_restore_metrics(&agent);
    let mut exporters = families(&agent);
    assert!(
        agent.contains(&format!(
            "quorate_member_up{{etcd=\"{name}\",member=\"{name}-0\"}} 1"
        )),
        "{agent}"
    );
    let runtime = support::runtime();
    let operator = runtime.block_on(operator_metrics());
    if let Some(operator) = &operator {
        // The operator serves its process and build as the agent does.
        for series in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "quorate_build_info{version=\"",
        ] {
            assert!(operator.contains(series), "{series} in:\n{operator}");
        }
        exporters.extend(families(operator));
    }
    let mut missing = BTreeSet::new();
    for expr in expressions() {
        for metric in metric_names(&expr) {
            let from_operator = metric.starts_with("quorate_operator_");
            if from_operator && operator.is_none() {
                continue;
            }
            if !exported(&metric, &exporters) {
                missing.insert(metric);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "used by deploy/monitoring but exported by no agent or operator: {missing:?}\n\
         agent families: {exporters:?}"
    );
}
