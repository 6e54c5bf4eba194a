//! A door's files turned into a rustls server configuration: the files
//! read whole, then the chain, the key, and the client CA when there is
//! one. The configuration check loads them so; the listener (`listen::tls`)
//! does too, and again at each rotation.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, RootCertStore, ServerConfig};

use super::{DoorTlsError, TlsFileKind, TlsFiles};

/// The protocols a door offers in ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// gRPC: HTTP/2 only (`h2`), as gRPC clients require.
    Grpc,
    /// HTTP and admin: `http/1.1`, the protocol their accept loops speak.
    /// A client that offers only `h2` is refused rather than answered in a
    /// protocol it did not ask for.
    Http,
    /// The proxy: `h2` first, then `http/1.1`; its door speaks both.
    Proxy,
}

impl Alpn {
    fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Alpn::Grpc => vec![b"h2".to_vec()],
            Alpn::Http => vec![b"http/1.1".to_vec()],
            Alpn::Proxy => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        }
    }
}

/// The bytes of a door's files (hashed whole, they tell a rotation).
#[derive(Hash)]
pub(crate) struct TlsContents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl TlsContents {
    /// Reads `files` whole.
    pub(crate) fn read(files: &TlsFiles) -> Result<TlsContents, DoorTlsError> {
        let read = |file: TlsFileKind, path: &Path| {
            std::fs::read(path).map_err(|source| DoorTlsError::Read {
                file,
                path: path.to_owned(),
                source,
            })
        };
        Ok(TlsContents {
            cert: read(TlsFileKind::Cert, &files.cert)?,
            key: read(TlsFileKind::Key, &files.key)?,
            client_ca: match &files.client_ca {
                Some(path) => Some(read(TlsFileKind::ClientCa, path)?),
                None => None,
            },
        })
    }
}

/// Reads `files` and builds the configuration, offering `alpn`: what a
/// listener of the door would serve.
pub(crate) fn load(files: &TlsFiles, alpn: Alpn) -> Result<ServerConfig, DoorTlsError> {
    build(files, &TlsContents::read(files)?, alpn)
}

/// The provider every TLS configuration of the service uses: ring, so no C
/// crypto library is built and the process-wide default is never needed.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configuration `contents` (read from `files`) make, offering `alpn`.
pub(crate) fn build(
    files: &TlsFiles,
    contents: &TlsContents,
    alpn: Alpn,
) -> Result<ServerConfig, DoorTlsError> {
    let provider = provider();
    let certs = certificates(TlsFileKind::Cert, &files.cert, &contents.cert)?;
    let key = private_key(&files.key, &contents.key)?;
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|error| DoorTlsError::InvalidKey {
            path: files.key.clone(),
            message: error.to_string(),
        })?;
    match CertifiedKey::new(certs.clone(), signing_key).keys_match() {
        // A key that cannot tell its public half is checked by the first
        // handshake instead, as rustls itself does.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(DoorTlsError::KeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            })
        }
        Err(error) => {
            return Err(DoorTlsError::InvalidCertificate {
                path: files.cert.clone(),
                message: error.to_string(),
            })
        }
    }
    let build_error = |error: rustls::Error| DoorTlsError::Build {
        cert: files.cert.clone(),
        message: error.to_string(),
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(build_error)?;
    let builder = match (&files.client_ca, &contents.client_ca) {
        (Some(path), Some(pem)) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(path, pem)?), provider)
                    .build()
                    .map_err(|error| DoorTlsError::BadCa {
                        path: path.clone(),
                        message: error.to_string(),
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(build_error)?;
    config.alpn_protocols = alpn.protocols();
    Ok(config)
}

fn certificates(
    file: TlsFileKind,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, DoorTlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|error| DoorTlsError::Pem {
            file,
            path: path.to_owned(),
            message: error.to_string(),
        })?;
    if certs.is_empty() {
        return Err(DoorTlsError::NoCertificate {
            file,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, DoorTlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|error| match error {
        pem::Error::NoItemsFound => DoorTlsError::NoKey {
            path: path.to_owned(),
        },
        other => DoorTlsError::Pem {
            file: TlsFileKind::Key,
            path: path.to_owned(),
            message: other.to_string(),
        },
    })
}

fn roots(path: &Path, pem: &[u8]) -> Result<RootCertStore, DoorTlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(TlsFileKind::ClientCa, path, pem)? {
        roots.add(cert).map_err(|error| DoorTlsError::BadCa {
            path: path.to_owned(),
            message: error.to_string(),
        })?;
    }
    Ok(roots)
}
