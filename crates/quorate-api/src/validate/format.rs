//! Syntax checks for Kubernetes names, label keys/values and URLs, each returning a sentence
//! that says what is allowed.

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most `max` characters.
pub(crate) fn is_dns1123_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Dot-separated DNS-1123 labels, at most 253 characters (names of most objects).
/// A Secret data key as Kubernetes allows it (`[-._a-zA-Z0-9]+`, at most 253 characters), and
/// not `.` or `..`: a plain file name.
pub(crate) fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| is_dns1123_label(l, 63))
}

/// What a DNS-1123 subdomain may look like, for messages.
pub(crate) const SUBDOMAIN_RULE: &str = "use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// Why `key` is not a valid label or annotation key (`[prefix/]name`), if it is not.
pub(crate) fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns1123_subdomain(prefix)
    {
        return Some(format!(
            "key {key:?} has an invalid prefix {prefix:?}; the part before '/' must be a DNS subdomain such as \"example.com\""
        ));
    }
    if !is_qualified_name_part(name) {
        return Some(format!(
            "key {key:?} is invalid; the name part must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    None
}

/// Why `value` is not a valid label value, if it is not.
pub(crate) fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || is_qualified_name_part(value) {
        None
    } else {
        Some(format!(
            "value {value:?} is invalid; label values are empty or 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

/// The parts of a URL we check.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UrlParts<'a> {
    pub scheme: &'a str,
    pub host: &'a str,
    pub port: Option<u16>,
    /// Everything after the authority (path, query, fragment), possibly empty.
    pub rest: &'a str,
}

/// Splits `scheme://[user@]host[:port][/path...]`, or says why it cannot.
pub(crate) fn parse_url(url: &str) -> Result<UrlParts<'_>, String> {
    let (scheme, after) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not a URL; write it as scheme://host:port"))?;
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return Err(format!("{url:?} has an invalid scheme {scheme:?}"));
    }
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(authority_end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port_text) = if let Some(stripped) = host_port.strip_prefix('[') {
        let (host, after_bracket) = stripped
            .split_once(']')
            .ok_or_else(|| format!("{url:?} has an unclosed '[' in its IPv6 host"))?;
        match after_bracket {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("{url:?} has junk after its IPv6 host"))?,
                ),
            ),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace()) {
        return Err(format!("{url:?} has no valid host"));
    }
    let port = match port_text {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("{url:?} has an invalid port {p:?}; use 1-65535"))?,
        ),
    };
    Ok(UrlParts {
        scheme,
        host,
        port,
        rest,
    })
}

/// Checks an etcd URL (peer or client): scheme must be `https` when TLS is on and `http`
/// otherwise; host and port are required; no path (etcd rejects one).
/// What Go's `url.ParseRequestURI` (the CEL `isURL` of druid's CRD) refuses in `text`, if
/// anything: control characters, a missing scheme on a relative reference, bad `%` escapes and
/// a non-numeric port. `localhost:4566` passes, as it does in Go (scheme `localhost`).
pub(crate) fn request_uri_problem(text: &str) -> Option<String> {
    if text.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Some(format!("{text:?} contains a control character"));
    }
    let bad_escape = text.match_indices('%').any(|(i, _)| {
        let hex = text.as_bytes().get(i + 1..i + 3);
        !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if bad_escape {
        return Some(format!(
            "{text:?} has a '%' that is not followed by two hex digits"
        ));
    }
    // Go's getScheme: letters, then letters, digits, '+', '-', '.', up to the first ':'.
    let mut scheme = "";
    let mut rest = text;
    for (i, c) in text.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Some(format!("{text:?} is missing a scheme before ':'")),
            ':' => {
                (scheme, rest) = (&text[..i], &text[i + 1..]);
                break;
            }
            _ => break,
        }
    }
    let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
    if !rest.starts_with('/') {
        return if scheme.is_empty() {
            Some(format!(
                "{text:?} is not a URL; write it as scheme://host:port or host:port"
            ))
        } else {
            None // an opaque URL such as "localhost:4566"
        };
    }
    let after = rest.strip_prefix("//").filter(|_| !scheme.is_empty())?;
    let authority = &after[..after.find('/').unwrap_or(after.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.chars().any(|c| {
        c.is_whitespace() || matches!(c, '<' | '>' | '"' | '`' | '{' | '}' | '|' | '\\' | '^')
    }) {
        return Some(format!("{text:?} has an invalid character in its host"));
    }
    let port = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => None,
            Some((_, after)) => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Some(format!("{text:?} has junk after its IPv6 host")),
            },
            None => return Some(format!("{text:?} has an unclosed '[' in its host")),
        },
        None => host.rsplit_once(':').map(|(_, port)| port),
    };
    if port.is_some_and(|p| !p.bytes().all(|b| b.is_ascii_digit())) {
        return Some(format!("{text:?} has a port that is not a number"));
    }
    None
}

pub(crate) fn etcd_url_problem(url: &str, tls: bool, tls_field: &str) -> Option<String> {
    let parts = match parse_url(url) {
        Ok(p) => p,
        Err(e) => return Some(e),
    };
    let want = if tls { "https" } else { "http" };
    if parts.scheme != want {
        let why = if tls {
            format!("{tls_field} is set")
        } else {
            format!("{tls_field} is not set")
        };
        return Some(format!(
            "{url:?} uses {:?}, but {why}; use {want}://",
            parts.scheme
        ));
    }
    if parts.port.is_none() {
        return Some(format!(
            "{url:?} has no port; write it as {want}://host:port"
        ));
    }
    if !parts.rest.is_empty() {
        return Some(format!(
            "{url:?} has a path, query or fragment; etcd URLs are {want}://host:port only"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("etcd-main", 63));
        assert!(is_dns1123_label("0etcd", 63));
        assert!(!is_dns1123_label("Etcd", 63));
        assert!(!is_dns1123_label("etcd-", 63));
        assert!(!is_dns1123_label("-etcd", 63));
        assert!(!is_dns1123_label("etcd.main", 63));
        assert!(!is_dns1123_label("", 63));
        assert!(!is_dns1123_label(&"a".repeat(64), 63));
        assert!(is_dns1123_subdomain("fast.ssd"));
        assert!(!is_dns1123_subdomain("fast..ssd"));
        assert!(!is_dns1123_subdomain("Fast"));
    }

    #[test]
    fn label_keys_and_values() {
        assert_eq!(label_key_problem("app"), None);
        assert_eq!(label_key_problem("gardener.cloud/role"), None);
        assert!(label_key_problem("Gardener_Cloud/role").is_some());
        assert!(label_key_problem("role/").is_some());
        assert!(label_key_problem("-role").is_some());
        assert_eq!(label_value_problem(""), None);
        assert_eq!(label_value_problem("etcd-statefulset"), None);
        assert!(label_value_problem("has space").is_some());
        assert!(label_value_problem(&"v".repeat(64)).is_some());
    }

    #[test]
    fn url_parts() {
        let p = parse_url("https://user@10.0.0.1:2380").unwrap();
        assert_eq!(
            (p.scheme, p.host, p.port, p.rest),
            ("https", "10.0.0.1", Some(2380), "")
        );
        let p = parse_url("http://[::1]:2379/x").unwrap();
        assert_eq!((p.host, p.port, p.rest), ("::1", Some(2379), "/x"));
        let p = parse_url("http://minio.local").unwrap();
        assert_eq!(p.port, None);
        assert!(parse_url("minio.local:9000").is_err());
        assert!(parse_url("http://:2379").is_err());
        assert!(parse_url("http://host:0").is_err());
        assert!(parse_url("http://host:99999").is_err());
        assert!(parse_url("http://host:").is_err());
        assert!(parse_url("1http://host").is_err());
    }

    #[test]
    fn etcd_urls() {
        assert_eq!(
            etcd_url_problem("https://10.0.0.1:2380", true, "peerUrlTls"),
            None
        );
        assert_eq!(
            etcd_url_problem("http://10.0.0.1:2380", false, "peerUrlTls"),
            None
        );
        assert_eq!(
            etcd_url_problem("http://10.0.0.1:2380", true, "spec.etcd.peerUrlTls").unwrap(),
            "\"http://10.0.0.1:2380\" uses \"http\", but spec.etcd.peerUrlTls is set; use https://"
        );
        assert!(
            etcd_url_problem("https://h:1", false, "t")
                .unwrap()
                .contains("is not set")
        );
        assert!(
            etcd_url_problem("http://h", false, "t")
                .unwrap()
                .contains("no port")
        );
        assert!(
            etcd_url_problem("http://h:1/p", false, "t")
                .unwrap()
                .contains("path")
        );
    }
}
