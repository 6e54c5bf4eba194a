//! What can go wrong with a door's TLS files, by file.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

/// Which of a door's files a [`DoorTlsError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFileKind {
    /// `cert`: the certificate chain, the server's own certificate first.
    Cert,
    /// `key`: the private key of the server's certificate.
    Key,
    /// `client_ca`: the CA that client certificates must be signed by.
    ClientCa,
}

impl TlsFileKind {
    /// The field's name in a `[listen.tls.*]` table.
    pub fn field(self) -> &'static str {
        match self {
            TlsFileKind::Cert => "cert",
            TlsFileKind::Key => "key",
            TlsFileKind::ClientCa => "client_ca",
        }
    }
}

impl fmt::Display for TlsFileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFileKind::Cert => "certificate",
            TlsFileKind::Key => "private key",
            TlsFileKind::ClientCa => "client CA",
        })
    }
}

/// Why a door's TLS files do not make a server configuration. Each message
/// names the file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DoorTlsError {
    /// A file could not be read.
    #[error("cannot read the {file} file {}: {source}", path.display())]
    Read {
        /// Which file.
        file: TlsFileKind,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid PEM.
    #[error("the {file} file {} is not valid PEM: {message}", path.display())]
    Pem {
        /// Which file.
        file: TlsFileKind,
        /// Its path.
        path: PathBuf,
        /// What the PEM parser said.
        message: String,
    },
    /// The certificate file (or the client CA file) holds no
    /// `CERTIFICATE` block.
    #[error("the {file} file {} holds no PEM CERTIFICATE", path.display())]
    NoCertificate {
        /// Which file.
        file: TlsFileKind,
        /// Its path.
        path: PathBuf,
    },
    /// The certificate cannot be parsed as X.509.
    #[error("the certificate in {} is not a valid X.509 certificate: {message}", path.display())]
    InvalidCertificate {
        /// The certificate file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The key file holds no private key block.
    #[error(
        "the key file {} holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)",
        path.display()
    )]
    NoKey {
        /// The key file.
        path: PathBuf,
    },
    /// The private key is not one rustls can sign with.
    #[error("the private key in {} is not usable: {message}", path.display())]
    InvalidKey {
        /// The key file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The private key is not the key of the certificate.
    #[error(
        "the private key in {} does not match the certificate in {}",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The client CA file's certificates cannot be trust anchors.
    #[error("the client CA file {} is not usable: {message}", path.display())]
    BadCa {
        /// The client CA file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// rustls refused the configuration for another reason.
    #[error("cannot build a TLS configuration from {}: {message}", cert.display())]
    Build {
        /// The certificate file.
        cert: PathBuf,
        /// What rustls said.
        message: String,
    },
}

impl DoorTlsError {
    /// Which file the error is about, so a configuration check can point at
    /// its field.
    pub fn file(&self) -> TlsFileKind {
        match self {
            DoorTlsError::Read { file, .. }
            | DoorTlsError::Pem { file, .. }
            | DoorTlsError::NoCertificate { file, .. } => *file,
            DoorTlsError::InvalidCertificate { .. } | DoorTlsError::Build { .. } => {
                TlsFileKind::Cert
            }
            DoorTlsError::NoKey { .. }
            | DoorTlsError::InvalidKey { .. }
            | DoorTlsError::KeyMismatch { .. } => TlsFileKind::Key,
            DoorTlsError::BadCa { .. } => TlsFileKind::ClientCa,
        }
    }
}
