//! Peer TLS Secrets for a scenario's `Etcd`, as a user (or Gardener's secrets manager) would
//! create them: a CA Secret (`ca.crt`) and a server Secret (`tls.crt`, `tls.key`) whose
//! certificate names every member through the peer Service.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The Secrets `<name>-peer-ca` and `<name>-peer-server` as YAML, valid for members
/// `<name>-0` … `<name>-<members-1>`.
pub fn peer_tls_secrets(name: &str, namespace: &str, members: u32) -> String {
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name} peer CA"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = CertifiedIssuer::self_signed(ca, ca_key).expect("a self-signed CA");

    // etcd checks a connecting peer's certificate against its address, by forward lookup of
    // the plain names and reverse lookup for the wildcards; cluster DNS answers both.
    let peer = format!("{name}-peer.{namespace}.svc");
    let mut names = vec![format!("*.{peer}"), format!("*.{peer}.cluster.local")];
    for i in 0..members {
        names.push(format!("{name}-{i}.{peer}"));
        names.push(format!("{name}-{i}.{peer}.cluster.local"));
    }
    let key = KeyPair::generate().expect("a server key");
    let mut server = CertificateParams::new(names).expect("server parameters");
    server
        .distinguished_name
        .push(DnType::CommonName, format!("{name} peer"));
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    // Peer TLS is mutual: the same certificate serves and authenticates.
    server.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = server
        .signed_by(&key, &issuer)
        .expect("a signed certificate");

    let indent = |pem: &str| pem.trim_end().replace('\n', "\n    ");
    let ca_pem = indent(&issuer.pem());
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}-peer-ca\n  namespace: {namespace}\n\
         type: Opaque\nstringData:\n  ca.crt: |\n    {ca_pem}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}-peer-server\n  namespace: {namespace}\n\
         type: kubernetes.io/tls\nstringData:\n  ca.crt: |\n    {ca_pem}\n  tls.crt: |\n    {}\n  \
         tls.key: |\n    {}\n",
        indent(&cert.pem()),
        indent(&key.serialize_pem()),
    )
}
