//! `[listen.tls.http]`, `[listen.tls.grpc]`, `[listen.tls.admin]` and
//! `[listen.tls.proxy]`: the certificate, key and optional client CA of
//! each front door that serves TLS, checked by loading them as the listener will.
//!
//! The pieces: this file (the tables as written and checked), `error`
//! (what can be wrong with a door's files, [`DoorTlsError`]) and `build` (the
//! files turned into a rustls server configuration, which the listeners,
//! `listen::tls`, serve).

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

mod build;
mod error;
#[cfg(test)]
pub(crate) mod testing;

use super::error::{ConfigError, Locator};
use super::ListenConfig;

pub(crate) use build::{build, load, Alpn, TlsContents};
pub use error::{DoorTlsError, TlsFileKind};

/// `[listen.tls]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileTls {
    pub(crate) http: Option<Spanned<FileTlsFiles>>,
    pub(crate) grpc: Option<Spanned<FileTlsFiles>>,
    pub(crate) admin: Option<Spanned<FileTlsFiles>>,
    pub(crate) proxy: Option<Spanned<FileTlsFiles>>,
}

/// One door's table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileTlsFiles {
    pub(crate) cert: Spanned<String>,
    pub(crate) key: Spanned<String>,
    pub(crate) client_ca: Option<Spanned<String>>,
}

/// The files of one door that serves TLS. A relative path written in the
/// configuration file is read from its folder.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsFiles {
    /// The PEM certificate chain, the door's own certificate first.
    pub cert: PathBuf,
    /// The PEM private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With a PEM CA file, clients must present a certificate signed by
    /// it (mTLS); without, any client may connect.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// A certificate and its key, without client certificates.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsFiles {
        TlsFiles {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
        }
    }

    /// The same, requiring client certificates signed by `ca`.
    pub fn with_client_ca(mut self, ca: impl Into<PathBuf>) -> TlsFiles {
        self.client_ca = Some(ca.into());
        self
    }
}

/// Which front doors serve TLS; `None` is plaintext.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoorTls {
    /// The HTTP door (`[listen.tls.http]`).
    pub http: Option<TlsFiles>,
    /// The gRPC door (`[listen.tls.grpc]`).
    pub grpc: Option<TlsFiles>,
    /// The admin door (`[listen.tls.admin]`).
    pub admin: Option<TlsFiles>,
    /// The reverse proxy's door under `ratekeeper proxy`
    /// (`[listen.tls.proxy]`), which offers `h2` and `http/1.1` in ALPN.
    pub proxy: Option<TlsFiles>,
}

/// Checks `[listen.tls]`: each table's paths are given, and, for a door
/// that listens, its files load as the listener will load them. A table
/// for a door that is off is kept, unread, for [`super::ConfigWarning`]:
/// it does no harm, and an environment that turns a door off
/// (`RATEKEEPER_LISTEN__GRPC=off`) should not have to edit the file.
pub(crate) fn check(
    at: &Locator<'_>,
    tls: Option<Spanned<FileTls>>,
    doors: &ListenConfig,
) -> Result<DoorTls, ConfigError> {
    let Some(tls) = tls else {
        return Ok(DoorTls::default());
    };
    let tls = tls.into_inner();
    let one = |door: &str, table: Option<Spanned<FileTlsFiles>>, on: bool, alpn: Alpn| {
        table
            .map(|table| door_files(at, door, table.into_inner(), on, alpn))
            .transpose()
    };
    Ok(DoorTls {
        http: one("http", tls.http, doors.http.is_some(), Alpn::Http)?,
        grpc: one("grpc", tls.grpc, doors.grpc.is_some(), Alpn::Grpc)?,
        admin: one("admin", tls.admin, doors.admin.is_some(), Alpn::Http)?,
        // Whether the proxy runs is the command's choice, not the file's:
        // its files are always checked.
        proxy: one("proxy", tls.proxy, true, Alpn::Proxy)?,
    })
}

fn door_files(
    at: &Locator<'_>,
    door: &str,
    table: FileTlsFiles,
    on: bool,
    alpn: Alpn,
) -> Result<TlsFiles, ConfigError> {
    let path = |field: &str, value: &Spanned<String>| {
        if value.get_ref().trim().is_empty() {
            return Err(at.invalid(
                value.span(),
                format!("listen.tls.{door}.{field}"),
                "the path must not be empty",
            ));
        }
        Ok(at.path(value.get_ref(), &value.span()))
    };
    let files = TlsFiles {
        cert: path("cert", &table.cert)?,
        key: path("key", &table.key)?,
        client_ca: table
            .client_ca
            .as_ref()
            .map(|ca| path("client_ca", ca))
            .transpose()?,
    };
    if !on {
        return Ok(files);
    }
    if let Err(error) = load(&files, alpn) {
        let file = error.file();
        let span = match file {
            TlsFileKind::Cert => table.cert.span(),
            TlsFileKind::Key => table.key.span(),
            TlsFileKind::ClientCa => table
                .client_ca
                .as_ref()
                .map_or_else(|| table.cert.span(), Spanned::span),
        };
        return Err(at.invalid(
            span,
            format!("listen.tls.{door}.{}", file.field()),
            error.to_string(),
        ));
    }
    Ok(files)
}

/// The doors that serve TLS, for `ratekeeper check`; `None` when all are
/// plaintext.
pub(crate) fn explain(listen: &ListenConfig) -> Option<String> {
    let doors = [
        ("http", listen.http.is_some(), &listen.tls.http),
        ("grpc", listen.grpc.is_some(), &listen.tls.grpc),
        ("admin", listen.admin.is_some(), &listen.tls.admin),
        // Listens only under `ratekeeper proxy`: named when it has files.
        ("proxy", listen.tls.proxy.is_some(), &listen.tls.proxy),
    ];
    if !doors.iter().any(|(_, on, tls)| *on && tls.is_some()) {
        return None;
    }
    let mut out = String::from("tls:");
    let mut first = true;
    for (door, on, tls) in doors {
        if !on {
            continue;
        }
        out.push_str(if first { " " } else { ", " });
        first = false;
        match tls {
            None => {
                let _ = write!(out, "{door} plaintext");
            }
            Some(files) => {
                let _ = write!(out, "{door} TLS (cert {})", files.cert.display());
                if let Some(ca) = &files.client_ca {
                    let _ = write!(
                        out,
                        " with mTLS (clients need a certificate signed by {})",
                        ca.display()
                    );
                }
            }
        }
    }
    Some(out)
}

/// The doors with a `[listen.tls.*]` table that do not listen.
pub(crate) fn closed_doors(listen: &ListenConfig) -> Vec<&'static str> {
    [
        ("http", listen.http.is_none() && listen.tls.http.is_some()),
        ("grpc", listen.grpc.is_none() && listen.tls.grpc.is_some()),
        (
            "admin",
            listen.admin.is_none() && listen.tls.admin.is_some(),
        ),
    ]
    .into_iter()
    .filter_map(|(door, closed)| closed.then_some(door))
    .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::testing::{write, write_leaf, Ca};
    use crate::config::{Config, ConfigError, ConfigWarning, Location, TlsFiles};

    const LIMIT: &str = "[[limits]]\nname = \"all\"\nrate = \"10/s\"\nkey = [\"global\"]\n";

    fn load(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(&format!("{text}{LIMIT}"), "rk.toml")
    }

    /// `[listen.tls.DOOR]` naming `files`, as literal TOML strings.
    fn table(door: &str, files: &TlsFiles) -> String {
        let mut text = format!(
            "[listen.tls.{door}]\ncert = '{}'\nkey = '{}'\n",
            files.cert.display(),
            files.key.display()
        );
        if let Some(ca) = &files.client_ca {
            text.push_str(&format!("client_ca = '{}'\n", ca.display()));
        }
        text
    }

    fn at(error: &ConfigError) -> (usize, usize, &str) {
        match (error.location(), error.field()) {
            (Some(Location::File { line, column, .. }), Some(field)) => (*line, *column, field),
            _ => panic!("no file place in {error:?}"),
        }
    }

    #[test]
    fn doors_serve_tls_and_mtls_as_the_tables_say() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let files = write_leaf(dir.path(), &ca.server());
        let mtls = files
            .clone()
            .with_client_ca(write(dir.path(), "ca.pem", &ca.pem()));
        let config = load(&format!(
            "{}{}",
            table("http", &files),
            table("grpc", &mtls)
        ))
        .expect("valid TLS tables");
        assert_eq!(config.listen.tls.http, Some(files.clone()));
        assert_eq!(config.listen.tls.grpc, Some(mtls));
        assert_eq!(config.listen.tls.admin, None);
        let explained = config.explain();
        let line = explained
            .lines()
            .find(|line| line.starts_with("tls:"))
            .expect("a tls line");
        assert_eq!(
            line,
            format!(
                "tls: http TLS (cert {cert}), grpc TLS (cert {cert}) with mTLS (clients need a \
                 certificate signed by {ca}), admin plaintext",
                cert = files.cert.display(),
                ca = dir.path().join("ca.pem").display()
            )
        );
        assert!(config.warnings().is_empty());
        assert!(!Config::default().explain().contains("tls:"));
    }

    #[test]
    fn a_bad_file_is_an_error_at_its_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let files = write_leaf(dir.path(), &ca.server());
        let other = ca.server();
        let wrong_key = write(dir.path(), "other.key", &other.key_pem);
        let text = format!(
            "[listen]\ngrpc = \"127.0.0.1:0\"\n{}",
            table("grpc", &TlsFiles::new(&files.cert, &wrong_key))
        );
        let error = load(&text).expect_err("a key of another certificate");
        assert_eq!(at(&error), (5, 7, "listen.tls.grpc.key"));
        assert!(
            error.to_string().starts_with(&format!(
                "rk.toml:5:7: listen.tls.grpc.key: the private key in {} does not match the \
                 certificate in {}",
                wrong_key.display(),
                files.cert.display()
            )),
            "{error}"
        );

        let missing = TlsFiles::new(dir.path().join("missing.pem"), &files.key);
        let error = load(&table("admin", &missing)).expect_err("a missing certificate");
        assert_eq!(at(&error), (2, 8, "listen.tls.admin.cert"));
        assert!(error.to_string().contains("missing.pem"), "{error}");

        let no_ca = files.clone().with_client_ca(&files.key);
        let error = load(&table("http", &no_ca)).expect_err("a CA file without a certificate");
        assert_eq!(at(&error), (4, 13, "listen.tls.http.client_ca"));
    }

    #[test]
    fn the_proxys_table_is_always_checked_and_explained() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let files = write_leaf(dir.path(), &ca.server());
        let config = load(&table("proxy", &files)).expect("a valid proxy table");
        assert_eq!(config.listen.tls.proxy, Some(files.clone()));
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
        let explained = config.explain();
        assert!(
            explained.contains(&format!("proxy TLS (cert {})", files.cert.display())),
            "{explained}"
        );
        // No address turns the proxy on or off in the file, so its files
        // are read whatever `[listen]` says.
        let missing = TlsFiles::new(dir.path().join("missing.pem"), &files.key);
        let error = load(&table("proxy", &missing)).expect_err("a missing certificate");
        assert_eq!(at(&error), (2, 8, "listen.tls.proxy.cert"));
    }

    #[test]
    fn a_table_must_name_both_files() {
        let error = load("[listen.tls.http]\ncert = 'a.pem'\n").expect_err("no key");
        assert_eq!(error.field(), Some("listen.tls.http"));
        assert!(error.to_string().contains("missing field `key`"), "{error}");
        let error = load("[listen.tls.http]\ncert = ' '\nkey = 'k.pem'\n").expect_err("empty");
        assert_eq!(at(&error), (2, 8, "listen.tls.http.cert"));
        let error =
            load("[listen.tls.http]\ncert = 'c'\nkey = 'k'\ncrt = 'x'\n").expect_err("typo");
        assert!(error.to_string().contains("unknown field `crt`"), "{error}");
        let error = load("[listen.tls.smtp]\ncert = 'c'\nkey = 'k'\n").expect_err("no such door");
        assert!(
            error.to_string().contains("unknown field `smtp`"),
            "{error}"
        );
    }

    #[test]
    fn a_door_that_is_off_is_warned_about_and_its_files_not_read() {
        let never = TlsFiles::new(Path::new("/nonexistent/cert.pem"), "/nonexistent/key.pem");
        let config = load(&format!(
            "[listen]\ngrpc = \"off\"\n{}",
            table("grpc", &never)
        ))
        .expect("a table of a door that is off is not checked");
        assert_eq!(
            config.warnings(),
            vec![ConfigWarning::TlsForClosedDoor {
                door: "grpc".to_owned()
            }]
        );
        assert_eq!(
            config.warnings()[0].to_string(),
            "listen.tls.grpc is set but listen.grpc is off: the table is ignored"
        );
        assert!(!config.explain().contains("tls:"));
    }

    #[test]
    fn the_environment_can_name_the_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let files = write_leaf(dir.path(), &ca.server());
        let vars = [
            (
                "RATEKEEPER_LISTEN__TLS__GRPC__CERT",
                files.cert.display().to_string(),
            ),
            (
                "RATEKEEPER_LISTEN__TLS__GRPC__KEY",
                files.key.display().to_string(),
            ),
        ];
        let config = Config::from_toml_str_with_env(LIMIT, "rk.toml", vars).expect("env files");
        assert_eq!(config.listen.tls.grpc, Some(files));

        let vars = [
            ("RATEKEEPER_LISTEN__TLS__GRPC__CERT", "/nonexistent/c.pem"),
            ("RATEKEEPER_LISTEN__TLS__GRPC__KEY", "/nonexistent/k.pem"),
        ];
        let error = Config::from_toml_str_with_env(LIMIT, "rk.toml", vars).expect_err("missing");
        assert_eq!(
            error.location(),
            Some(&Location::Env {
                variable: "RATEKEEPER_LISTEN__TLS__GRPC__CERT".to_owned()
            })
        );
    }
}
