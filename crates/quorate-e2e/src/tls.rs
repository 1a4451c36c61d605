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
    let (cert, key) = peer_leaf(&issuer, name, namespace, members);
    peer_secrets(&issuer, name, namespace, (cert, key))
}

/// The peer certificate: every member's name under the peer Service, serving and
/// authenticating (peer TLS is mutual).
fn peer_leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    namespace: &str,
    members: u32,
) -> (String, String) {
    // etcd checks a connecting peer's certificate against its address, by forward lookup of
    // the plain names and reverse lookup for the wildcards; cluster DNS answers both.
    let peer = format!("{name}-peer.{namespace}.svc");
    let mut names = vec![format!("*.{peer}"), format!("*.{peer}.cluster.local")];
    for i in 0..members {
        names.push(format!("{name}-{i}.{peer}"));
        names.push(format!("{name}-{i}.{peer}.cluster.local"));
    }
    leaf(
        issuer,
        &format!("{name} peer"),
        names,
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    )
}

fn peer_secrets(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    namespace: &str,
    peer: (String, String),
) -> String {
    let ca_pem = issuer.pem();
    [
        ca_secret(&format!("{name}-peer-ca"), namespace, &ca_pem),
        tls_secret(&format!("{name}-peer-server"), namespace, &ca_pem, peer),
    ]
    .join("---\n")
}

/// Client and peer TLS as a user (or Gardener's secrets manager) brings it: a CA for each,
/// leaves with DNS names only. [`UserTls::issue`] makes new leaves from the same CAs each time,
/// which is what rotating a leaf certificate is.
pub struct UserTls {
    name: String,
    namespace: String,
    members: u32,
    client_ca: CertifiedIssuer<'static, KeyPair>,
    peer_ca: CertifiedIssuer<'static, KeyPair>,
    backup_ca: CertifiedIssuer<'static, KeyPair>,
}

/// One issue of [`UserTls`]: the Secrets as YAML and the PEMs a test checks with.
pub struct IssuedTls {
    /// `<name>-ca`, `<name>-server`, `<name>-client-tls`, `<name>-peer-ca`, `<name>-peer-server`
    /// and those of [`backup_tls_secrets`].
    pub secrets_yaml: String,
    /// The client CA.
    pub client_ca: String,
    /// The server certificate etcd serves on its client port.
    pub server_cert: String,
    /// The client certificate and key (`<name>-client-tls`).
    pub client: (String, String),
    /// The peer certificate and key.
    pub peer: (String, String),
    /// The agents' server certificate (`spec.backup.tls`).
    pub backup_server_cert: String,
    /// The agents' client certificate and key.
    pub backup_client: (String, String),
}

impl UserTls {
    /// Two new CAs for `name`'s client and peer TLS, for `members` members.
    pub fn new(name: &str, namespace: &str, members: u32) -> UserTls {
        UserTls {
            name: name.to_string(),
            namespace: namespace.to_string(),
            members,
            client_ca: ca(&format!("{name} client CA")),
            peer_ca: ca(&format!("{name} peer CA")),
            backup_ca: ca(&format!("{name} backup CA")),
        }
    }

    /// New leaves from the CAs. The server certificate names the client Service (with and
    /// without the namespace and domain, as clients in and outside the namespace dial it) and
    /// every member under the peer Service, where the agents reach their own etcd.
    pub fn issue(&self) -> IssuedTls {
        let (name, namespace) = (self.name.as_str(), self.namespace.as_str());
        let client_service = format!("{name}-client");
        let peer = format!("{name}-peer.{namespace}.svc");
        let server = leaf(
            &self.client_ca,
            &format!("{name} server"),
            vec![
                client_service.clone(),
                format!("{client_service}.{namespace}"),
                format!("{client_service}.{namespace}.svc"),
                format!("{client_service}.{namespace}.svc.cluster.local"),
                format!("*.{peer}"),
                format!("*.{peer}.cluster.local"),
            ],
            vec![ExtendedKeyUsagePurpose::ServerAuth],
        );
        let client = leaf(
            &self.client_ca,
            &format!("{name} client"),
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        );
        let peer = peer_leaf(&self.peer_ca, name, namespace, self.members);
        let (backup_yaml, backup_server_cert, backup_client) =
            backup_secrets(&self.backup_ca, name, namespace);
        let client_ca = self.client_ca.pem();
        let secrets_yaml = [
            ca_secret(&format!("{name}-ca"), namespace, &client_ca),
            tls_secret(
                &format!("{name}-server"),
                namespace,
                &client_ca,
                server.clone(),
            ),
            tls_secret(
                &format!("{name}-client-tls"),
                namespace,
                &client_ca,
                client.clone(),
            ),
            peer_secrets(&self.peer_ca, name, namespace, peer.clone()),
            backup_yaml,
        ]
        .join("---\n");
        IssuedTls {
            secrets_yaml,
            client_ca,
            server_cert: server.0,
            client,
            peer,
            backup_server_cert,
            backup_client,
        }
    }

    /// The peer CA (PEM).
    pub fn peer_ca(&self) -> String {
        self.peer_ca.pem()
    }

    /// The agents' CA (PEM).
    pub fn backup_ca(&self) -> String {
        self.backup_ca.pem()
    }
}

/// The Secrets of `spec.backup.tls` as YAML: `<name>-backup-ca`, `<name>-backup-server` (the
/// agents' certificate, for the client Service `<name>-client.<ns>.svc` and every member pod
/// `*.<name>-peer.<ns>.svc`) and `<name>-backup-client` (what the agents and the operator
/// present).
pub fn backup_tls_secrets(name: &str, namespace: &str) -> String {
    let issuer = ca(&format!("{name} backup CA"));
    backup_secrets(&issuer, name, namespace).0
}

/// [`backup_tls_secrets`] with new leaves from `issuer`; also the server certificate and the
/// client pair.
fn backup_secrets(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    namespace: &str,
) -> (String, String, (String, String)) {
    let client_service = format!("{name}-client.{namespace}.svc");
    let peer = format!("{name}-peer.{namespace}.svc");
    let server = leaf(
        issuer,
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
        issuer,
        &format!("{name} agent client"),
        Vec::new(),
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let ca_pem = issuer.pem();
    let yaml = [
        ca_secret(&format!("{name}-backup-ca"), namespace, &ca_pem),
        tls_secret(
            &format!("{name}-backup-server"),
            namespace,
            &ca_pem,
            server.clone(),
        ),
        tls_secret(
            &format!("{name}-backup-client"),
            namespace,
            &ca_pem,
            client.clone(),
        ),
    ]
    .join("---\n");
    (yaml, server.0, client)
}
