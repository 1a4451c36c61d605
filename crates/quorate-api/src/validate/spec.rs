//! Rules for `metadata`, the top of `spec`, `spec.sharedConfig` and `spec.etcd`.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ResourceRequirements, SecretReference as CoreSecretReference};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::Problems;
use super::format::{
    SUBDOMAIN_RULE, etcd_url_problem, is_dns1123_label, is_dns1123_subdomain, label_key_problem,
    label_value_problem,
};
use crate::cron::CronSchedule;
use crate::duration::parse_go_duration;
use crate::enums::{CompactionMode, FreelistType, MetricsLevel, TrafficDistribution};
use crate::etcd::Etcd;
use crate::names::{MAX_ETCD_NAME_LENGTH, MAX_MEMBER_NAME_PREFIX_LENGTH};
use crate::quantity::{parse_quantity, quantity_to_bytes};
use crate::spec_etcd::{AdditionalPeerUrl, BootstrapWithExistingCluster, EtcdConfig};
use crate::tls::{PeerTlsConfig, SecretReference, TlsConfig};

/// Most entries in `additionalAdvertisePeerUrls` (druid's limit).
const MAX_ADDITIONAL_PEER_URL_ENTRIES: usize = 10;
/// Most URLs per entry of `additionalAdvertisePeerUrls` (druid's limit).
const MAX_ADDITIONAL_PEER_URLS_PER_MEMBER: usize = 5;
/// Most entries in `bootstrapWithExistingCluster.members` and `.clientEndpoints` (druid's limit).
const MAX_BOOTSTRAP_ENTRIES: usize = 10;

pub(super) fn check(etcd: &Etcd, p: &mut Problems) {
    check_metadata(etcd, p);
    let spec = &etcd.spec;
    if spec.replicas < 0 {
        p.add(
            "spec.replicas",
            format!(
                "{} is negative; use 0 to hibernate the cluster or a positive member count",
                spec.replicas
            ),
        );
    }
    check_labels("spec.labels", &spec.labels, p);
    if let Some(annotations) = &spec.annotations {
        check_annotation_keys("spec.annotations", annotations, p);
    }
    if let Some(prefix) = &spec.member_name_prefix
        && !prefix.is_empty()
        && !is_dns1123_label(prefix, MAX_MEMBER_NAME_PREFIX_LENGTH)
    {
        p.add(
            "spec.memberNamePrefix",
            format!(
                "{prefix:?} is not a valid member name prefix; use at most {MAX_MEMBER_NAME_PREFIX_LENGTH} lowercase letters, digits and '-', starting and ending with a letter or digit"
            ),
        );
    }
    for (field, value) in [
        ("spec.priorityClassName", &spec.priority_class_name),
        ("spec.storageClass", &spec.storage_class),
        ("spec.volumeClaimTemplate", &spec.volume_claim_template),
    ] {
        if let Some(v) = value
            && !is_dns1123_subdomain(v)
        {
            p.add(
                field,
                format!("{v:?} is not a valid name; {SUBDOMAIN_RULE}"),
            );
        }
    }
    check_size("spec.storageCapacity", spec.storage_capacity.as_ref(), p);
    if let Some(shared) = &spec.shared_config {
        check_shared_config(
            shared.auto_compaction_mode.as_deref(),
            shared.auto_compaction_retention.as_deref(),
            p,
        );
    }
    check_etcd_config(etcd, &spec.etcd, p);
    check_ports(etcd, p);
}

fn check_metadata(etcd: &Etcd, p: &mut Problems) {
    if let Err((annotation, message)) = crate::defrag::DefragThresholds::of(etcd) {
        p.add(format!("metadata.annotations[{annotation}]"), message);
    }
    if let Some(secret) = crate::annotations::backup_encryption_secret(etcd) {
        let path = format!(
            "metadata.annotations[{}]",
            crate::annotations::BACKUP_ENCRYPTION_SECRET
        );
        if !is_dns1123_subdomain(secret) {
            p.add(
                &path,
                format!("{secret:?} is not a valid Secret name; {SUBDOMAIN_RULE}"),
            );
        }
        if etcd.spec.backup.store.is_none() {
            p.add(
                path,
                "names backup encryption keys, but there are no backups: set spec.backup.store, or remove the annotation",
            );
        }
    }
    let window = format!(
        "metadata.annotations[{}]",
        crate::annotations::ACCEPT_PLAINTEXT_BEFORE
    );
    match crate::annotations::accept_plaintext_before(etcd) {
        Err(message) => p.add(&window, message),
        Ok(Some(_)) if crate::annotations::backup_encryption_secret(etcd).is_none() => p.add(
            &window,
            format!(
                "accepts clear backups although encryption keys are configured, but none are \
                 ({} is not set): remove the annotation, or set both",
                crate::annotations::BACKUP_ENCRYPTION_SECRET
            ),
        ),
        Ok(_) => {}
    }
    if let Err(message) = crate::etcd_version::requested(etcd) {
        p.add(
            format!("metadata.annotations[{}]", crate::annotations::ETCD_VERSION),
            message,
        );
    }
    match etcd.metadata.name.as_deref() {
        None | Some("") => p.add(
            "metadata.name",
            "is required; name the cluster, e.g. \"etcd-main\"",
        ),
        Some(name) => {
            let starts_with_letter = name.bytes().next().is_some_and(|b| b.is_ascii_lowercase());
            if !is_dns1123_label(name, MAX_ETCD_NAME_LENGTH) || !starts_with_letter {
                p.add(
                    "metadata.name",
                    format!(
                        "{name:?} is not a valid Etcd name; use at most {MAX_ETCD_NAME_LENGTH} lowercase letters, digits and '-', starting with a letter and ending with a letter or digit (derived names such as \"<name>-delta-snap\" and \"<name>-client\" must stay valid)"
                    ),
                );
            }
        }
    }
    if let Some(ns) = etcd.metadata.namespace.as_deref()
        && !is_dns1123_label(ns, 63)
    {
        p.add(
            "metadata.namespace",
            format!(
                "{ns:?} is not a valid namespace; use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
            ),
        );
    }
}

pub(super) fn check_labels(path: &str, labels: &BTreeMap<String, String>, p: &mut Problems) {
    for (key, value) in labels {
        if let Some(problem) = label_key_problem(key) {
            p.add(path, problem);
        }
        if let Some(problem) = label_value_problem(value) {
            p.add(format!("{path}.{key}"), problem);
        }
    }
}

pub(super) fn check_annotation_keys(
    path: &str,
    annotations: &BTreeMap<String, String>,
    p: &mut Problems,
) {
    for key in annotations.keys() {
        if let Some(problem) = label_key_problem(key) {
            p.add(path, problem);
        }
    }
}

/// A size quantity that must parse and be positive.
pub(super) fn check_size(path: &str, value: Option<&Quantity>, p: &mut Problems) {
    let Some(q) = value else { return };
    match quantity_to_bytes(&q.0) {
        Ok(0) => p.add(
            path,
            format!("{:?} is zero; use a positive size such as \"8Gi\"", q.0),
        ),
        Ok(_) => {}
        Err(e) => p.add(path, e.to_string()),
    }
}

/// A duration that must parse; `positive` also rejects zero.
pub(super) fn check_duration(path: &str, value: Option<&String>, positive: bool, p: &mut Problems) {
    let Some(v) = value else { return };
    match parse_go_duration(v) {
        Ok(d) if positive && d.is_zero() => p.add(
            path,
            format!("{v:?} is zero; use a positive Go duration such as \"10s\""),
        ),
        Ok(_) => {}
        Err(e) => p.add(path, e.to_string()),
    }
}

pub(super) fn check_cron(path: &str, value: Option<&String>, p: &mut Problems) {
    if let Some(v) = value
        && let Err(e) = CronSchedule::parse(v)
    {
        p.add(path, e.to_string());
    }
}

pub(super) fn check_enum<T>(
    path: &str,
    value: Option<&String>,
    parse: fn(&str) -> Option<T>,
    allowed: String,
    p: &mut Problems,
) {
    if let Some(v) = value
        && parse(v).is_none()
    {
        p.add(path, format!("{v:?} is not allowed; use one of {allowed}"));
    }
}

pub(super) fn check_image(path: &str, value: Option<&String>, p: &mut Problems) {
    if let Some(v) = value
        && v.trim().is_empty()
    {
        p.add(
            path,
            "is empty; name an image such as \"registry/etcd:v3.5.17\", or remove the field to use the default",
        );
    }
}

/// Requests and limits must be valid quantities.
pub(super) fn check_resources(path: &str, value: Option<&ResourceRequirements>, p: &mut Problems) {
    let Some(r) = value else { return };
    for (kind, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, q) in map.iter().flatten() {
            if let Err(e) = parse_quantity(&q.0) {
                p.add(format!("{path}.{kind}.{name}"), e.to_string());
            }
        }
    }
}

fn check_shared_config(mode: Option<&str>, retention: Option<&str>, p: &mut Problems) {
    let parsed_mode = match mode {
        None => Some(CompactionMode::Periodic),
        Some(m) => {
            let parsed = CompactionMode::parse(m);
            if parsed.is_none() {
                p.add(
                    "spec.sharedConfig.autoCompactionMode",
                    format!(
                        "{m:?} is not allowed; use one of {}",
                        CompactionMode::allowed()
                    ),
                );
            }
            parsed
        }
    };
    let (Some(retention), Some(mode)) = (retention, parsed_mode) else {
        return;
    };
    let is_count = !retention.is_empty() && retention.bytes().all(|b| b.is_ascii_digit());
    let ok = match mode {
        CompactionMode::Periodic => is_count || parse_go_duration(retention).is_ok(),
        CompactionMode::Revision => is_count,
    };
    if !ok {
        let allowed = match mode {
            CompactionMode::Periodic => {
                "with autoCompactionMode \"periodic\" use a Go duration such as \"30m\" (or a whole number of hours)"
            }
            CompactionMode::Revision => {
                "with autoCompactionMode \"revision\" use a whole number of revisions such as \"1000\""
            }
        };
        p.add(
            "spec.sharedConfig.autoCompactionRetention",
            format!("{retention:?} is not a valid retention; {allowed}"),
        );
    }
}

fn check_etcd_config(etcd: &Etcd, config: &EtcdConfig, p: &mut Problems) {
    check_size("spec.etcd.quota", config.quota.as_ref(), p);
    if let Some(count) = config.snapshot_count
        && count < 1
    {
        p.add(
            "spec.etcd.snapshotCount",
            format!("{count} is too small; use a positive number of raft entries such as 10000"),
        );
    }
    check_cron(
        "spec.etcd.defragmentationSchedule",
        config.defragmentation_schedule.as_ref(),
        p,
    );
    check_image("spec.etcd.image", config.image.as_ref(), p);
    if let Some(auth) = &config.auth_secret_ref {
        check_core_secret_ref("spec.etcd.authSecretRef", Some(auth), true, p);
    }
    check_enum(
        "spec.etcd.metrics",
        config.metrics.as_ref(),
        MetricsLevel::parse,
        MetricsLevel::allowed(),
        p,
    );
    check_resources("spec.etcd.resources", config.resources.as_ref(), p);
    if let Some(tls) = &config.client_url_tls {
        check_tls(
            "spec.etcd.clientUrlTls",
            tls,
            Some(
                "with client TLS; reference the Secret with the client certificate and key the members use to reach etcd",
            ),
            p,
        );
    }
    if let Some(tls) = &config.peer_url_tls {
        check_peer_tls("spec.etcd.peerUrlTls", tls, p);
    }
    check_duration(
        "spec.etcd.etcdDefragTimeout",
        config.etcd_defrag_timeout.as_ref(),
        true,
        p,
    );
    check_duration(
        "spec.etcd.heartbeatDuration",
        config.heartbeat_duration.as_ref(),
        true,
        p,
    );
    if let Some(service) = &config.client_service {
        if let Some(labels) = &service.labels {
            check_labels("spec.etcd.clientService.labels", labels, p);
        }
        if let Some(annotations) = &service.annotations {
            check_annotation_keys("spec.etcd.clientService.annotations", annotations, p);
        }
        check_enum(
            "spec.etcd.clientService.trafficDistribution",
            service.traffic_distribution.as_ref(),
            TrafficDistribution::parse,
            TrafficDistribution::allowed(),
            p,
        );
    }
    check_enum(
        "spec.etcd.backendBboltFreelistType",
        config.backend_bbolt_freelist_type.as_ref(),
        FreelistType::parse,
        FreelistType::allowed(),
        p,
    );
    if config.additional_advertise_peer_urls.is_some()
        && config.legacy_additional_advertise_peer_urls.is_some()
    {
        p.add(
            "spec.etcd.additionalAdvertisePeerUrls",
            "is the deprecated spelling of spec.etcd.additionalAdvertisePeerURLs, which is also set; keep only additionalAdvertisePeerURLs",
        );
    }
    if let Some((field, entries)) = config.additional_peer_urls() {
        check_additional_peer_urls(etcd, field, entries, p);
    }
    if let Some(bootstrap) = &config.bootstrap_with_existing_cluster {
        check_bootstrap(etcd, bootstrap, p);
    }
}

pub(super) fn check_secret_name(path: &str, name: Option<&str>, what: &str, p: &mut Problems) {
    match name {
        None | Some("") => p.add(
            format!("{path}.name"),
            format!("is empty; name the Secret that holds {what}"),
        ),
        Some(n) if !is_dns1123_subdomain(n) => p.add(
            format!("{path}.name"),
            format!("{n:?} is not a valid Secret name; {SUBDOMAIN_RULE}"),
        ),
        Some(_) => {}
    }
}

fn check_core_secret_ref(
    path: &str,
    secret: Option<&CoreSecretReference>,
    required: bool,
    p: &mut Problems,
) {
    match secret {
        Some(s) => check_secret_name(path, s.name.as_deref(), "the credentials", p),
        None if required => p.add(path, "is required; reference the Secret by name"),
        None => {}
    }
}

fn check_ca_ref(path: &str, ca: &SecretReference, p: &mut Problems) {
    check_secret_name(path, ca.name.as_deref(), "the CA bundle", p);
    match ca.data_key.as_deref() {
        Some("") => p.add(
            format!("{path}.dataKey"),
            "is empty; name the key that holds the CA bundle (\"ca.crt\" when the field is removed)",
        ),
        // The key becomes a file name next to the Secret's other keys; anything else (a
        // path, `..`) would read or write outside that directory.
        Some(key) if !super::format::is_secret_key(key) => p.add(
            format!("{path}.dataKey"),
            format!(
                "{key:?} is not a Secret key; use a plain file name of letters, digits, '-', '_' and '.' (not \".\" or \"..\"), e.g. \"ca.crt\""
            ),
        ),
        _ => {}
    }
}

/// Client or backup TLS: CA and server certificate, and the client certificate, which must be
/// set when `client_required` says why.
pub(super) fn check_tls(
    path: &str,
    tls: &TlsConfig,
    client_required: Option<&str>,
    p: &mut Problems,
) {
    check_ca_ref(&format!("{path}.tlsCASecretRef"), &tls.tls_ca_secret_ref, p);
    check_secret_name(
        &format!("{path}.serverTLSSecretRef"),
        tls.server_tls_secret_ref.name.as_deref(),
        "the server certificate and key",
        p,
    );
    let client_path = format!("{path}.clientTLSSecretRef");
    match &tls.client_tls_secret_ref {
        Some(c) => check_secret_name(
            &client_path,
            c.name.as_deref(),
            "the client certificate and key",
            p,
        ),
        None => {
            if let Some(why) = client_required {
                p.add(client_path, format!("is required {why}"));
            }
        }
    }
}

fn check_peer_tls(path: &str, tls: &PeerTlsConfig, p: &mut Problems) {
    check_ca_ref(&format!("{path}.tlsCASecretRef"), &tls.tls_ca_secret_ref, p);
    check_secret_name(
        &format!("{path}.serverTLSSecretRef"),
        tls.server_tls_secret_ref.name.as_deref(),
        "the peer certificate and key",
        p,
    );
    if let Some(c) = &tls.client_tls_secret_ref {
        check_secret_name(
            &format!("{path}.clientTLSSecretRef"),
            c.name.as_deref(),
            "the client certificate and key",
            p,
        );
    }
}

/// All ports in range and pairwise different (they share one pod / one host).
fn check_ports(etcd: &Etcd, p: &mut Problems) {
    let ports = [
        (
            "spec.etcd.clientPort",
            "client port",
            etcd.spec.etcd.client_port,
            2379,
        ),
        (
            "spec.etcd.serverPort",
            "peer port",
            etcd.spec.etcd.server_port,
            2380,
        ),
        (
            "spec.etcd.wrapperPort",
            "wrapper port",
            etcd.spec.etcd.wrapper_port,
            9095,
        ),
        (
            "spec.backup.port",
            "backup port",
            etcd.spec.backup.port,
            8080,
        ),
    ];
    let mut seen: HashMap<i32, (&str, &str)> = HashMap::new();
    for (path, what, value, default) in ports {
        if let Some(v) = value
            && !(1..=65535).contains(&v)
        {
            p.add(path, format!("{v} is not a port; use 1-65535"));
            continue;
        }
        let effective = value.unwrap_or(default);
        if let Some((other_path, other_what)) = seen.get(&effective) {
            p.add(
                path,
                format!(
                    "{effective} is also the {other_what} ({other_path}); the {what} must differ from it"
                ),
            );
        } else {
            seen.insert(effective, (path, what));
        }
    }
}

/// Parses `<base>-<ordinal>` and returns the ordinal (decimal, no leading zeros).
fn ordinal_after(name: &str, base: &str) -> Option<u64> {
    let digits = name.strip_prefix(base)?.strip_prefix('-')?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if canonical { digits.parse().ok() } else { None }
}

fn check_additional_peer_urls(
    etcd: &Etcd,
    field: &str,
    entries: &[AdditionalPeerUrl],
    p: &mut Problems,
) {
    let path = format!("spec.etcd.{field}");
    let path = path.as_str();
    if entries.len() > MAX_ADDITIONAL_PEER_URL_ENTRIES {
        p.add(
            path,
            format!(
                "has {} entries; at most {MAX_ADDITIONAL_PEER_URL_ENTRIES} are allowed",
                entries.len()
            ),
        );
    }
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let prefixed = etcd
        .spec
        .member_name_prefix
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|prefix| format!("{prefix}-{name}"));
    let peer_tls = etcd.spec.etcd.peer_url_tls.is_some();
    let mut first_index: HashMap<u64, usize> = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let member_path = format!("{path}[{i}].memberName");
        let ordinal = ordinal_after(&entry.member_name, &name).or_else(|| {
            prefixed
                .as_deref()
                .and_then(|base| ordinal_after(&entry.member_name, base))
        });
        match ordinal {
            None => p.add(
                &member_path,
                format!(
                    "{:?} is not a member of this Etcd; use \"{name}-<ordinal>\" such as \"{name}-0\"",
                    entry.member_name
                ),
            ),
            Some(o) if o >= etcd.spec.replicas.max(0) as u64 => p.add(
                &member_path,
                format!(
                    "{:?} has ordinal {o}, but spec.replicas is {}; ordinals run from 0 to replicas-1",
                    entry.member_name, etcd.spec.replicas
                ),
            ),
            Some(o) => {
                if let Some(j) = first_index.get(&o) {
                    p.add(
                        &member_path,
                        format!(
                            "{:?} is listed again (first at [{j}]); put all its URLs in one entry",
                            entry.member_name
                        ),
                    );
                } else {
                    first_index.insert(o, i);
                }
            }
        }
        let urls_path = format!("{path}[{i}].urls");
        if entry.urls.is_empty() {
            p.add(
                &urls_path,
                "is empty; list at least one peer URL such as \"https://10.0.0.1:2380\"",
            );
        } else if entry.urls.len() > MAX_ADDITIONAL_PEER_URLS_PER_MEMBER {
            p.add(
                &urls_path,
                format!(
                    "has {} URLs; at most {MAX_ADDITIONAL_PEER_URLS_PER_MEMBER} are allowed per member",
                    entry.urls.len()
                ),
            );
        }
        for (k, url) in entry.urls.iter().enumerate() {
            if let Some(problem) = etcd_url_problem(url, peer_tls, "spec.etcd.peerUrlTls") {
                p.add(format!("{urls_path}[{k}]"), problem);
            }
        }
        check_set(&urls_path, &entry.urls, p);
    }
}

fn check_bootstrap(etcd: &Etcd, bootstrap: &BootstrapWithExistingCluster, p: &mut Problems) {
    const PATH: &str = "spec.etcd.bootstrapWithExistingCluster";
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let own_prefix = match etcd
        .spec
        .member_name_prefix
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        Some(prefix) => format!("{prefix}-{name}-"),
        None => format!("{name}-"),
    };
    if bootstrap.members.is_empty() {
        p.add(
            format!("{PATH}.members"),
            "is empty; list every member of the existing cluster with its name and peer URLs",
        );
    }
    let peer_tls = etcd.spec.etcd.peer_url_tls.is_some();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, member) in bootstrap.members.iter().enumerate() {
        let name_path = format!("{PATH}.members[{i}].name");
        if member.name.is_empty() {
            p.add(
                &name_path,
                "is empty; use the member name the existing cluster reports",
            );
        } else if member.name.starts_with(&own_prefix) {
            p.add(
                &name_path,
                format!(
                    "{:?} collides with this Etcd's own member names (\"{own_prefix}<ordinal>\"); existing members must have other names",
                    member.name
                ),
            );
        } else if let Some(j) = seen.get(member.name.as_str()) {
            p.add(
                &name_path,
                format!(
                    "{:?} is listed twice (first at [{j}]); names must be unique",
                    member.name
                ),
            );
        } else {
            seen.insert(&member.name, i);
        }
        let urls_path = format!("{PATH}.members[{i}].peerUrls");
        if member.peer_urls.is_empty() {
            p.add(
                &urls_path,
                "is empty; list the peer URLs the member advertises",
            );
        }
        if member.peer_urls.len() > MAX_ADDITIONAL_PEER_URLS_PER_MEMBER {
            p.add(
                &urls_path,
                format!(
                    "has {} URLs; at most {MAX_ADDITIONAL_PEER_URLS_PER_MEMBER} are allowed per member",
                    member.peer_urls.len()
                ),
            );
        }
        for (k, url) in member.peer_urls.iter().enumerate() {
            if let Some(problem) = etcd_url_problem(url, peer_tls, "spec.etcd.peerUrlTls") {
                p.add(format!("{urls_path}[{k}]"), problem);
            }
        }
        check_set(&urls_path, &member.peer_urls, p);
    }
    let client_tls = etcd.spec.etcd.client_url_tls.is_some();
    if bootstrap.client_endpoints.is_empty() {
        p.add(
            format!("{PATH}.clientEndpoints"),
            "is empty; list at least one client URL of the existing cluster",
        );
    }
    for (k, url) in bootstrap.client_endpoints.iter().enumerate() {
        if let Some(problem) = etcd_url_problem(url, client_tls, "spec.etcd.clientUrlTls") {
            p.add(format!("{PATH}.clientEndpoints[{k}]"), problem);
        }
    }
    check_set(
        &format!("{PATH}.clientEndpoints"),
        &bootstrap.client_endpoints,
        p,
    );
    for (list, len) in [
        ("members", bootstrap.members.len()),
        ("clientEndpoints", bootstrap.client_endpoints.len()),
    ] {
        if len > MAX_BOOTSTRAP_ENTRIES {
            p.add(
                format!("{PATH}.{list}"),
                format!("has {len} entries; at most {MAX_BOOTSTRAP_ENTRIES} are allowed"),
            );
        }
    }
}

/// druid's `x-kubernetes-list-type: set`: no value twice.
fn check_set(path: &str, items: &[String], p: &mut Problems) {
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (k, item) in items.iter().enumerate() {
        if let Some(j) = first.get(item.as_str()) {
            p.add(
                format!("{path}[{k}]"),
                format!("{item:?} is listed again (first at [{j}]); each value may appear once"),
            );
        } else {
            first.insert(item, k);
        }
    }
}
