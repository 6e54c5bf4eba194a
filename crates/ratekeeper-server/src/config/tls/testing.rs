//! Certificates made at test time with rcgen, written as PEM files in a
//! temporary directory, and a rustls client to handshake with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use crate::config::TlsFiles;

/// A CA that signs server and client certificates.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM.
pub(crate) struct Leaf {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    pub(crate) der: CertificateDer<'static>,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    pub(crate) fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    fn leaf(&self, name: &str, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let mut params =
            CertificateParams::new(vec![name.to_owned(), "127.0.0.1".to_owned()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub(crate) fn server(&self) -> Leaf {
        self.leaf("localhost", ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate.
    pub(crate) fn client(&self, name: &str) -> Leaf {
        self.leaf(name, ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// Writes `text` to `dir/name`, returning the path.
pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

/// Writes `leaf` as `cert.pem` and `key.pem` in `dir`.
pub(crate) fn write_leaf(dir: &Path, leaf: &Leaf) -> TlsFiles {
    TlsFiles::new(
        write(dir, "cert.pem", &leaf.cert_pem),
        write(dir, "key.pem", &leaf.key_pem),
    )
}

/// A client trusting `ca`, offering `alpn`, with `identity` as its
/// certificate if given.
pub(crate) fn client(ca: &Ca, alpn: &[&[u8]], identity: Option<&Leaf>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.der()).expect("trust the test CA");
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
    let mut config = match identity {
        Some(leaf) => builder
            .with_client_auth_cert(
                vec![leaf.der.clone()],
                PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("client key"),
            )
            .expect("client identity"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// The name the server certificates are for.
pub(crate) fn localhost() -> ServerName<'static> {
    ServerName::try_from("localhost").expect("a valid name")
}
