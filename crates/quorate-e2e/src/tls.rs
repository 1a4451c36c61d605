//! TLS Secrets for a scenario's `Etcd`, as a user (or Gardener's secrets manager) would create
//! them: a CA Secret (`ca.crt`) and leaf Secrets (`tls.crt`, `tls.key`) whose certificates carry
//! DNS names only.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

fn ca(common_name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.distinguished_name.push(DnType::CommonName, common_name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(ca, ca_key).expect("a self-signed CA")
}

/// A leaf certificate and key (PEM) for `names`, serving and/or authenticating clients.
fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    common_name: &str,
    names: Vec<String>,
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> (String, String) {
    let key = KeyPair::generate().expect("a leaf key");
    let mut params = CertificateParams::new(names).expect("leaf parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = usages;
    let cert = params
        .signed_by(&key, issuer)
        .expect("a signed certificate");
    (cert.pem(), key.serialize_pem())
}

fn indent(pem: &str) -> String {
    pem.trim_end().replace('\n', "\n    ")
}

fn ca_secret(name: &str, namespace: &str, ca_pem: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\n\
         type: Opaque\nstringData:\n  ca.crt: |\n    {}\n",
        indent(ca_pem)
    )
}

fn tls_secret(name: &str, namespace: &str, ca_pem: &str, (cert, key): (String, String)) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\n\
         type: kubernetes.io/tls\nstringData:\n  ca.crt: |\n    {}\n  tls.crt: |\n    {}\n  \
         tls.key: |\n    {}\n",
        indent(ca_pem),
        indent(&cert),
        indent(&key),
    )
}

/// The Secrets `<name>-peer-ca` and `<name>-peer-server` as YAML, valid for members
/// `<name>-0` … `<name>-<members-1>`.
pub fn peer_tls_secrets(name: &str, namespace: &str, members: u32) -> String {
    let issuer = ca(&format!("{name} peer CA"));
    // etcd checks a connecting peer's certificate against its address, by forward lookup of
    // the plain names and reverse lookup for the wildcards; cluster DNS answers both.
    let peer = format!("{name}-peer.{namespace}.svc");
    let mut names = vec![format!("*.{peer}"), format!("*.{peer}.cluster.local")];
    for i in 0..members {
        names.push(format!("{name}-{i}.{peer}"));
        names.push(format!("{name}-{i}.{peer}.cluster.local"));
    }
    // Peer TLS is mutual: the same certificate serves and authenticates.
    let server = leaf(
        &issuer,
        &format!("{name} peer"),
        names,
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    let ca_pem = issuer.pem();
    [
        ca_secret(&format!("{name}-peer-ca"), namespace, &ca_pem),
        tls_secret(&format!("{name}-peer-server"), namespace, &ca_pem, server),
    ]
    .join("---\n")
}

/// The Secrets of `spec.backup.tls` as YAML: `<name>-backup-ca`, `<name>-backup-server` (the
/// agents' certificate, for the client Service `<name>-client.<ns>.svc` and every member pod
/// `*.<name>-peer.<ns>.svc`) and `<name>-backup-client` (what the agents and the operator
/// present).
pub fn backup_tls_secrets(name: &str, namespace: &str) -> String {
    let issuer = ca(&format!("{name} backup CA"));
    let client_service = format!("{name}-client.{namespace}.svc");
    let peer = format!("{name}-peer.{namespace}.svc");
    let server = leaf(
        &issuer,
        &format!("{name} agents"),
        vec![
            client_service.clone(),
            format!("{client_service}.cluster.local"),
            format!("*.{peer}"),
            format!("*.{peer}.cluster.local"),
        ],
        vec![ExtendedKeyUsagePurpose::ServerAuth],
    );
    let client = leaf(
        &issuer,
        &format!("{name} agent client"),
        Vec::new(),
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let ca_pem = issuer.pem();
    [
        ca_secret(&format!("{name}-backup-ca"), namespace, &ca_pem),
        tls_secret(&format!("{name}-backup-server"), namespace, &ca_pem, server),
        tls_secret(&format!("{name}-backup-client"), namespace, &ca_pem, client),
    ]
    .join("---\n")
}
