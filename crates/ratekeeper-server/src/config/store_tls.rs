//! `[store.tls]`: the Redis stores' TLS files, read and parsed when the
//! configuration is checked, so that `ratekeeper check` names a missing or
//! unusable file and the service never starts on one.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use ratekeeper_redis::{is_tls_url, PemInput, Tls, TlsError};
use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Locator};
use super::file::FileStore;
use super::redact_url;

/// The largest TLS file read: a system's whole CA bundle is a few hundred
/// KiB.
const MAX_PEM_BYTES: u64 = 4 << 20;

/// `[store.tls]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileStoreTls {
    pub(crate) ca: Option<Spanned<String>>,
    pub(crate) cert: Option<Spanned<String>>,
    pub(crate) key: Option<Spanned<String>>,
}

/// The Redis store's TLS settings, `[store.tls]`: the files it names and
/// their contents, checked.
///
/// The files are read when the configuration is loaded; a reload that
/// finds them changed reports a changed store, which takes a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreTls {
    /// `ca`: the PEM bundle that verifies the server; `None` for the
    /// system's roots.
    pub ca: Option<PathBuf>,
    /// `cert` and `key`: the client certificate (PEM chain) and its private
    /// key, presented when the server asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// The files' contents, parsed, for the store's builder.
    pub settings: Tls,
}

impl fmt::Display for StoreTls {
    /// `tls (ca PATH, client cert PATH)` or `tls (system roots)`, for
    /// `ratekeeper check`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tls (")?;
        match &self.ca {
            Some(ca) => write!(f, "ca {}", ca.display())?,
            None => f.write_str("system roots")?,
        }
        if let Some((cert, _)) = &self.client {
            write!(f, ", client cert {}", cert.display())?;
        }
        f.write_str(")")
    }
}

/// Checks `store.tls` of a `kind` store: only the Redis stores take it,
/// only with `rediss://` URLs; `cert` and `key` go together; every file
/// named is read and parsed. The URLs must have been checked already.
pub(crate) fn check(
    at: &Locator<'_>,
    store: &FileStore,
    kind: &str,
) -> Result<Option<StoreTls>, ConfigError> {
    let Some(table) = &store.tls else {
        return Ok(None);
    };
    if kind == "redis" && store.sentinels.is_some() {
        return Err(at.invalid(
            table.span(),
            "store.tls",
            "TLS through Redis Sentinel is not supported yet: reach the Sentinels and the \
             primary over a private network",
        ));
    }
    let urls: Vec<(String, &Spanned<String>)> = match kind {
        "redis" => store
            .url
            .iter()
            .map(|url| ("store.url".to_owned(), url))
            .collect(),
        "redis-cluster" => store
            .urls
            .iter()
            .flat_map(|urls| urls.get_ref().iter().enumerate())
            .map(|(index, url)| (format!("store.urls[{index}]"), url))
            .collect(),
        other => {
            return Err(at.invalid(
                table.span(),
                "store.tls",
                format!("tls applies only to the redis stores, not to a {other} store"),
            ))
        }
    };
    for (field, url) in urls {
        if !is_tls_url(url.get_ref()) {
            let tls = at.locate(Some(table.span()));
            return Err(at.invalid(
                url.span(),
                field,
                format!(
                    "{} is not a rediss:// url, but store.tls (at {tls}) asks for TLS; \
                     write rediss://HOST:PORT, or remove [store.tls]",
                    redact_url(url.get_ref())
                ),
            ));
        }
    }
    let table = table.get_ref();
    let mut settings = Tls::new();
    let ca = match &table.ca {
        Some(ca) => {
            let (path, pem) = read(at, ca, "store.tls.ca")?;
            settings = settings
                .with_ca_pem(pem)
                .map_err(|error| refused(at, ca, "store.tls.ca", &error))?;
            Some(path)
        }
        None => None,
    };
    let client = match (&table.cert, &table.key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let (cert_path, cert_pem) = read(at, cert, "store.tls.cert")?;
            let (key_path, key_pem) = read(at, key, "store.tls.key")?;
            settings = settings
                .with_client_pem(cert_pem, key_pem)
                .map_err(|error| {
                    // A key that does not fit the certificate is the key's
                    // fault as far as the file goes: point at it.
                    let (value, field) = match error {
                        TlsError::Missing(PemInput::ClientCert)
                        | TlsError::Pem {
                            input: PemInput::ClientCert,
                            ..
                        } => (cert, "store.tls.cert"),
                        _ => (key, "store.tls.key"),
                    };
                    refused(at, value, field, &error)
                })?;
            Some((cert_path, key_path))
        }
        (Some(cert), None) => {
            return Err(at.invalid(
                cert.span(),
                "store.tls.cert",
                "a client certificate needs its private key: add store.tls.key",
            ))
        }
        (None, Some(key)) => {
            return Err(at.invalid(
                key.span(),
                "store.tls.key",
                "a client key needs its certificate: add store.tls.cert",
            ))
        }
    };
    Ok(Some(StoreTls {
        ca,
        client,
        settings,
    }))
}

/// The file `value` names, and its contents. A relative path is read as
/// every path of the configuration is ([`Locator::path`]).
fn read(
    at: &Locator<'_>,
    value: &Spanned<String>,
    field: &str,
) -> Result<(PathBuf, Vec<u8>), ConfigError> {
    let text = value.get_ref();
    if text.trim().is_empty() {
        return Err(at.invalid(value.span(), field, "the path must not be empty"));
    }
    let path = at.path(text, &value.span());
    let path = path.as_path();
    let fail = |why: String| Err(at.invalid(value.span(), field, why));
    // Only a regular file (asked before opening: opening a pipe blocks),
    // read to a bound: a device or a pipe named here would block or never
    // end, in `ratekeeper check` as in the service.
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return fail(format!("{} is not a regular file", path.display())),
        Err(error) => return fail(format!("cannot read {}: {error}", path.display())),
    }
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) => return fail(format!("cannot read {}: {error}", path.display())),
    };
    let mut pem = Vec::new();
    if let Err(error) = file.take(MAX_PEM_BYTES + 1).read_to_end(&mut pem) {
        return fail(format!("cannot read {}: {error}", path.display()));
    }
    if pem.len() as u64 > MAX_PEM_BYTES {
        return fail(format!(
            "{} is larger than {} MiB, more than any PEM bundle needs",
            path.display(),
            MAX_PEM_BYTES >> 20
        ));
    }
    Ok((path.to_owned(), pem))
}

/// The error for a file whose PEM `error` refused.
fn refused(
    at: &Locator<'_>,
    value: &Spanned<String>,
    field: &str,
    error: &TlsError,
) -> ConfigError {
    at.invalid(
        value.span(),
        field,
        format!("{}: {error}", Path::new(value.get_ref()).display()),
    )
}
