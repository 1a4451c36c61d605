//! `CertificatesValid` (quorate's own): whether every certificate the members serve or use
//! (etcd's client and peer TLS, the agents' TLS, and their CAs) stays valid for at least 30
//! more days. Each agent publishes the soonest expiry among its certificate files on its lease
//! (`quorate.io/certificate-expiry`); a member without TLS publishes nothing.

use jiff::{SignedDuration, Timestamp};
use quorate_api::status::ConditionStatus;
use serde::{Deserialize, Serialize};

use super::{CERTIFICATES_VALID, CheckResult, result};
use crate::lease::MemberLease;

/// Lease annotation: the member's soonest-expiring certificate ([`CertificateExpiry`], JSON).
pub const CERTIFICATE_EXPIRY_ANNOTATION: &str = "quorate.io/certificate-expiry";
/// How long before its end a certificate is reported.
pub const WARN_BEFORE: SignedDuration = SignedDuration::from_hours(30 * 24);

/// A certificate file and when it stops being valid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateExpiry {
    /// The certificate (or CA bundle) file.
    pub file: String,
    /// Its `notAfter`.
    pub not_after: Timestamp,
}

impl CertificateExpiry {
    /// The lease annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a certificate expiry serializes")
    }

    /// The soonest of `all`, if any.
    pub fn soonest(all: impl IntoIterator<Item = CertificateExpiry>) -> Option<CertificateExpiry> {
        all.into_iter().min_by_key(|c| c.not_after)
    }
}

/// `CertificatesValid`: False when a member's soonest certificate expires within
/// [`WARN_BEFORE`] of `now` (or has expired), naming the member, file and time; True otherwise
/// (also when no member uses certificates). An annotation that does not parse is Unknown.
pub fn check_certificates(leases: &[&MemberLease], now: Timestamp) -> CheckResult {
    let mut soonest: Option<(&str, CertificateExpiry)> = None;
    for lease in leases {
        let Some(text) = lease.annotations.get(CERTIFICATE_EXPIRY_ANNOTATION) else {
            continue;
        };
        let Ok(expiry) = serde_json::from_str::<CertificateExpiry>(text) else {
            return result(
                CERTIFICATES_VALID,
                ConditionStatus::Unknown,
                "UnableToParseCertificateExpiry",
                format!(
                    "lease {}: {CERTIFICATE_EXPIRY_ANNOTATION} is {text:?}",
                    lease.name
                ),
            );
        };
        if soonest
            .as_ref()
            .is_none_or(|(_, s)| expiry.not_after < s.not_after)
        {
            soonest = Some((&lease.name, expiry));
        }
    }
    let Some((member, expiry)) = soonest else {
        return result(
            CERTIFICATES_VALID,
            ConditionStatus::True,
            "NoCertificates",
            "no member uses certificates",
        );
    };
    let left = expiry.not_after.duration_since(now);
    let days = left.as_hours() / 24;
    if left <= SignedDuration::ZERO {
        result(
            CERTIFICATES_VALID,
            ConditionStatus::False,
            "CertificateExpired",
            format!(
                "{} of member {member} expired at {}; replace the certificate in its Secret",
                expiry.file, expiry.not_after
            ),
        )
    } else if left < WARN_BEFORE {
        result(
            CERTIFICATES_VALID,
            ConditionStatus::False,
            "CertificateExpiresSoon",
            format!(
                "{} of member {member} expires at {} (in {days} days); replace the certificate in its Secret (no restart is needed)",
                expiry.file, expiry.not_after
            ),
        )
    } else {
        result(
            CERTIFICATES_VALID,
            ConditionStatus::True,
            "CertificatesValid",
            format!(
                "the soonest certificate, {} of member {member}, expires at {} (in {days} days)",
                expiry.file, expiry.not_after
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, expiry: Option<&str>) -> MemberLease {
        let mut l = MemberLease::new(name);
        if let Some(text) = expiry {
            l.annotations
                .insert(CERTIFICATE_EXPIRY_ANNOTATION.to_string(), text.to_string());
        }
        l
    }

    fn expiring(file: &str, at: &str) -> String {
        CertificateExpiry {
            file: file.to_string(),
            not_after: at.parse().unwrap(),
        }
        .to_annotation()
    }

    #[test]
    fn the_soonest_certificate_decides() {
        let now: Timestamp = "2026-11-26T00:00:00Z".parse().unwrap();
        let r = check_certificates(&[&lease("etcd-0", None)], now);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::True, "NoCertificates")
        );

        let far = expiring("/tls/server/tls.crt", "2027-11-26T00:00:00Z");
        let soon = expiring("/tls/peer/tls.crt", "2026-12-10T00:00:00Z");
        let r = check_certificates(&[&lease("etcd-0", Some(&far))], now);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::True, "CertificatesValid")
        );
        let r = check_certificates(
            &[&lease("etcd-0", Some(&far)), &lease("etcd-1", Some(&soon))],
            now,
        );
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::False, "CertificateExpiresSoon")
        );
        assert!(
            r.message.contains("/tls/peer/tls.crt of member etcd-1")
                && r.message.contains("in 14 days"),
            "{}",
            r.message
        );
        let past = expiring("/tls/ca.crt", "2026-11-01T00:00:00Z");
        let r = check_certificates(&[&lease("etcd-2", Some(&past))], now);
        assert_eq!(
            (r.status, r.reason),
            (ConditionStatus::False, "CertificateExpired")
        );
        let r = check_certificates(&[&lease("etcd-2", Some("garbage"))], now);
        assert_eq!(r.status, ConditionStatus::Unknown);
    }
}
