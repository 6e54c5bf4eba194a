//! TLS for `rediss://` connections: the certificates that verify the server
//! and the client's own, checked when they are given rather than at the
//! first connection.

use std::fmt;

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use thiserror::Error;

/// Which PEM input a [`TlsError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PemInput {
    /// The CA bundle that verifies the server.
    Ca,
    /// The client's certificate chain.
    ClientCert,
    /// The client's private key.
    ClientKey,
}

impl fmt::Display for PemInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PemInput::Ca => "CA bundle",
            PemInput::ClientCert => "client certificate",
            PemInput::ClientKey => "client key",
        })
    }
}

/// Why PEM given to [`Tls`] cannot be used.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsError {
    /// The input holds no PEM section of the kind it needs (`CERTIFICATE`
    /// for the CA bundle and the client certificate; `PRIVATE KEY`,
    /// `RSA PRIVATE KEY` or `EC PRIVATE KEY` for the key).
    #[error("the {0} holds no PEM {kind}", kind = expected(*.0))]
    Missing(PemInput),
    /// The input is not valid PEM.
    #[error("the {input} is not valid PEM: {reason}")]
    Pem {
        /// Which input.
        input: PemInput,
        /// What the PEM parser said.
        reason: String,
    },
    /// A certificate of the CA bundle is not an X.509 certificate that can
    /// anchor trust.
    #[error("certificate {index} of the CA bundle (from 0) cannot be a trust anchor: {reason}")]
    Anchor {
        /// Its place among the bundle's certificates, from 0.
        index: usize,
        /// What the certificate parser said.
        reason: String,
    },
    /// The client key is of a type the ring provider cannot sign with, or
    /// does not belong to the client certificate.
    #[error("the client certificate and key cannot be used: {reason}")]
    ClientKey {
        /// What rustls said.
        reason: String,
    },
}

/// What a PEM input must hold, in words.
fn expected(input: PemInput) -> &'static str {
    match input {
        PemInput::Ca | PemInput::ClientCert => "certificate",
        PemInput::ClientKey => "private key",
    }
}

/// TLS settings of a `rediss://` connection
/// ([`RedisStoreBuilder::tls`](crate::RedisStoreBuilder::tls)): the CA
/// bundle that verifies the server (without one, the system's roots do),
/// and a client certificate for servers that ask for one (`redis-server`
/// does by default: `tls-auth-clients yes`).
///
/// Each setter parses its PEM at once, so a bad file is refused when it is
/// read, with the reason, and not at the first connection.
///
/// ```
/// use ratekeeper_redis::{PemInput, Tls, TlsError};
///
/// // Without a CA bundle the system's roots verify the server.
/// let tls = Tls::new();
/// assert!(tls.ca_pem().is_none());
///
/// let error = Tls::new().with_ca_pem(b"not a certificate".to_vec()).unwrap_err();
/// assert_eq!(error, TlsError::Missing(PemInput::Ca));
/// ```
///
/// Its `Debug` shows which parts are set, never their contents.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tls {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |set: bool| if set { "<set>" } else { "<none>" };
        f.debug_struct("Tls")
            .field("ca", &shown(self.ca.is_some()))
            .field("client", &shown(self.client.is_some()))
            .finish()
    }
}

impl Tls {
    /// No CA bundle (the system's roots verify the server) and no client
    /// certificate.
    pub fn new() -> Tls {
        Tls::default()
    }

    /// Verifies the server with the certificates of `pem` (one or more
    /// `CERTIFICATE` sections; other sections are skipped) instead of the
    /// system's roots.
    pub fn with_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Result<Tls, TlsError> {
        let pem = pem.into();
        roots(&pem)?;
        self.ca = Some(pem);
        Ok(self)
    }

    /// Presents the certificate chain `cert` (PEM, the client's certificate
    /// first) with its private key `key` (PEM: PKCS #8, PKCS #1 or SEC1)
    /// when the server asks for one.
    pub fn with_client_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Result<Tls, TlsError> {
        let (cert, key) = (cert.into(), key.into());
        client_key(&cert, &key)?;
        self.client = Some((cert, key));
        Ok(self)
    }

    /// The CA bundle, when one is set.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca.as_deref()
    }

    /// Whether a client certificate is set.
    pub fn has_client_cert(&self) -> bool {
        self.client.is_some()
    }

    /// The redis crate's form of these settings.
    pub(crate) fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        }
    }
}

/// The CA bundle's certificates as trust anchors.
fn roots(pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for (index, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let cert = cert.map_err(|e| pem_error(PemInput::Ca, e))?;
        roots.add(cert).map_err(|e| TlsError::Anchor {
            index,
            reason: e.to_string(),
        })?;
    }
    if roots.is_empty() {
        return Err(TlsError::Missing(PemInput::Ca));
    }
    Ok(roots)
}

/// Checks that `key` signs for the first certificate of `cert` under the
/// ring provider, as the handshake will need.
fn client_key(cert: &[u8], key: &[u8]) -> Result<(), TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(PemInput::ClientCert, e))?;
    if chain.is_empty() {
        return Err(TlsError::Missing(PemInput::ClientCert));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| pem_error(PemInput::ClientKey, e))?;
    CertifiedKey::from_der(chain, key, &ring::default_provider()).map_err(|e| {
        TlsError::ClientKey {
            reason: e.to_string(),
        }
    })?;
    Ok(())
}

fn pem_error(input: PemInput, error: pem::Error) -> TlsError {
    match error {
        pem::Error::NoItemsFound => TlsError::Missing(input),
        other => TlsError::Pem {
            input,
            reason: other.to_string(),
        },
    }
}

/// Whether `url` connects over TLS: `rediss://`, in any case (as the
/// redis crate reads schemes).
///
/// ```
/// assert!(ratekeeper_redis::is_tls_url("rediss://cache:6380"));
/// assert!(!ratekeeper_redis::is_tls_url("redis://cache:6379"));
/// ```
pub fn is_tls_url(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
}

/// Makes ring rustls's process-wide provider unless one is installed
/// already: the redis crate builds its TLS settings on that default, and
/// rustls picks none by itself when more than one provider is compiled in.
pub(crate) fn install_ring() {
    if CryptoProvider::get_default().is_none() {
        // Losing the race to another installer is fine: any provider works.
        let _ = ring::default_provider().install_default();
    }
}
