//! TLS on a listener: the certificate, key and optional client CA of one
//! front door, turned into a rustls server configuration that can be
//! swapped while connections are served.
//!
//! The files are read whole and fingerprinted; [`TlsListener::reload`]
//! swaps the configuration only when the files changed and still make a
//! valid one, so a half-written rotation (a new certificate beside the old
//! key) is refused and the running certificate stays. Connections already
//! up keep the configuration they were accepted with.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;

use crate::config::tls::{build, Alpn, TlsContents};
use crate::config::{DoorTlsError, ListenConfig, TlsFiles};

mod handshake;

pub(crate) use handshake::HandshakeError;

/// The TLS side of one listener: the configuration new connections get,
/// and the files it came from.
pub(crate) struct TlsListener {
    files: TlsFiles,
    alpn: Alpn,
    current: ArcSwap<ServerConfig>,
    seen: Mutex<Seen>,
}

impl fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsListener")
            .field("files", &self.files)
            .field("alpn", &self.alpn)
            .finish_non_exhaustive()
    }
}

/// What [`TlsListener::reload`] compares against.
#[derive(Debug)]
struct Seen {
    /// The files the configuration in force was built from.
    loaded: Fingerprint,
    /// The files last tried, valid or not: a broken rotation is reported
    /// once, not at every poll.
    tried: Fingerprint,
}

/// The contents of a door's files, hashed: enough to tell a change, and
/// the private key is not kept in memory beyond the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint(u64);

/// Hashes `contents`.
fn fingerprint(contents: &TlsContents) -> Fingerprint {
    let mut hasher = DefaultHasher::new();
    contents.hash(&mut hasher);
    Fingerprint(hasher.finish())
}

impl TlsListener {
    /// Reads `files` and builds the configuration, offering `alpn`.
    pub(crate) fn load(files: &TlsFiles, alpn: Alpn) -> Result<TlsListener, DoorTlsError> {
        let contents = TlsContents::read(files)?;
        let config = build(files, &contents, alpn)?;
        let fingerprint = fingerprint(&contents);
        Ok(TlsListener {
            files: files.clone(),
            alpn,
            current: ArcSwap::from_pointee(config),
            seen: Mutex::new(Seen {
                loaded: fingerprint,
                tried: fingerprint,
            }),
        })
    }

    /// An acceptor with the configuration in force now.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current.load_full())
    }

    /// The server side of a TLS handshake over `io`, with the
    /// configuration in force now, given `timeout` to finish (a client that
    /// connects and says nothing must not hold a connection slot);
    /// `timed_out` runs first if it does not, while `io` is still open. A
    /// failure is logged at debug (the accept loop counts it): a scanner
    /// or a client without a certificate is no fault of the service.
    pub(crate) async fn accept<IO>(
        &self,
        io: IO,
        timeout: Duration,
        timed_out: impl FnOnce(),
    ) -> Result<TlsStream<IO>, HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let accept = self.acceptor().accept(io);
        tokio::pin!(accept);
        let error = match tokio::time::timeout(timeout, accept.as_mut()).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => HandshakeError::Failed(error),
            Err(_) => {
                timed_out();
                HandshakeError::Timeout(timeout)
            }
        };
        tracing::debug!(%error, cert = %self.files.cert.display(), "TLS handshake refused");
        Err(error)
    }

    /// [`TlsListener::reload`], logged: a swap at info, a refusal at error
    /// (the running certificate stays). `door` names the listener.
    pub(crate) fn reload_logged(&self, door: &str) {
        match self.reload() {
            Ok(true) => tracing::info!(
                door,
                cert = %self.files.cert.display(),
                "TLS certificate reloaded; new connections get it"
            ),
            Ok(false) => {}
            Err(error) => tracing::error!(
                door,
                %error,
                "TLS files refused; the running certificate stays"
            ),
        }
    }

    /// Reads the files again and, if they changed and make a valid
    /// configuration, puts it in force for new connections: `Ok(true)`.
    /// `Ok(false)` when nothing changed, or when the change is one already
    /// refused. On an error the configuration in force stays.
    pub(crate) fn reload(&self) -> Result<bool, DoorTlsError> {
        let contents = TlsContents::read(&self.files)?;
        let fingerprint = fingerprint(&contents);
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if fingerprint == seen.tried {
            return Ok(false);
        }
        seen.tried = fingerprint;
        if fingerprint == seen.loaded {
            return Ok(false);
        }
        let config = build(&self.files, &contents, self.alpn)?;
        self.current.store(Arc::new(config));
        seen.loaded = fingerprint;
        Ok(true)
    }
}

/// The TLS listeners of the doors that serve TLS, for the accept loops and
/// the reloads.
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsDoors {
    /// The HTTP door's.
    pub(crate) http: Option<Arc<TlsListener>>,
    /// The gRPC door's.
    pub(crate) grpc: Option<Arc<TlsListener>>,
    /// The admin door's.
    pub(crate) admin: Option<Arc<TlsListener>>,
    /// The proxy's, under `ratekeeper proxy`.
    pub(crate) proxy: Option<Arc<TlsListener>>,
}

impl TlsDoors {
    /// Loads the files of each door that listens and has a
    /// `[listen.tls.*]` table (the proxy listens when `proxy`); the error
    /// names the door.
    pub(crate) fn load(
        listen: &ListenConfig,
        proxy: bool,
    ) -> Result<TlsDoors, (&'static str, DoorTlsError)> {
        let one = |door, on: bool, files: &Option<TlsFiles>, alpn| match files {
            Some(files) if on => TlsListener::load(files, alpn)
                .map(|listener| Some(Arc::new(listener)))
                .map_err(|error| (door, error)),
            _ => Ok(None),
        };
        Ok(TlsDoors {
            http: one("http", listen.http.is_some(), &listen.tls.http, Alpn::Http)?,
            grpc: one("grpc", listen.grpc.is_some(), &listen.tls.grpc, Alpn::Grpc)?,
            admin: one(
                "admin",
                listen.admin.is_some(),
                &listen.tls.admin,
                Alpn::Http,
            )?,
            proxy: one("proxy", proxy, &listen.tls.proxy, Alpn::Proxy)?,
        })
    }

    /// Each door's listener, named.
    fn each(&self) -> impl Iterator<Item = (&'static str, &Arc<TlsListener>)> {
        [
            ("http", &self.http),
            ("grpc", &self.grpc),
            ("admin", &self.admin),
            ("proxy", &self.proxy),
        ]
        .into_iter()
        .filter_map(|(door, listener)| listener.as_ref().map(|l| (door, l)))
    }

    /// Whether no door serves TLS.
    pub(crate) fn is_empty(&self) -> bool {
        self.each().next().is_none()
    }

    /// [`TlsListener::reload`] on every door: whether any swapped, or the
    /// first error (every door is tried, whatever another's files hold).
    pub(crate) fn reload(&self) -> Result<bool, DoorTlsError> {
        let mut swapped = false;
        let mut first_error = None;
        for (_, listener) in self.each() {
            match listener.reload() {
                Ok(changed) => swapped |= changed,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(swapped), Err)
    }

    /// [`TlsListener::reload_logged`] on every door.
    pub(crate) fn reload_logged(&self) {
        for (door, listener) in self.each() {
            listener.reload_logged(door);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::CertificateDer;
    use rustls::ClientConfig;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::{Alpn, DoorTlsError, HandshakeError, TlsListener};
    use crate::config::tls::testing::{client, localhost, write, write_leaf, Ca};
    use crate::config::TlsFileKind;

    /// What the client saw of one connection: the server's certificate and
    /// the protocol agreed, once the server has said hello over it.
    #[derive(Debug)]
    struct Seen {
        cert: CertificateDer<'static>,
        alpn: Option<Vec<u8>>,
    }

    /// Accepts one connection on a loopback socket with `listener`'s
    /// acceptor while `config` connects, then has the server write a line
    /// the client must read: a handshake that either side refused fails.
    async fn handshake(listener: &TlsListener, config: Arc<ClientConfig>) -> Result<Seen, String> {
        let socket = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = socket.local_addr().expect("address");
        let acceptor = listener.acceptor();
        let server = async move {
            let (tcp, _) = socket.accept().await.map_err(|e| e.to_string())?;
            let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
            tls.write_all(b"hello\n").await.map_err(|e| e.to_string())?;
            tls.shutdown().await.map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        };
        let client = async move {
            let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let connector = tokio_rustls::TlsConnector::from(config);
            let mut tls = connector
                .connect(localhost(), tcp)
                .await
                .map_err(|e| e.to_string())?;
            let (_, session) = tls.get_ref();
            let cert = session
                .peer_certificates()
                .and_then(|certs| certs.first())
                .cloned()
                .ok_or("no server certificate")?;
            let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
            let mut line = Vec::new();
            tls.read_to_end(&mut line)
                .await
                .map_err(|e| e.to_string())?;
            if line != b"hello\n" {
                return Err(format!("the server said {line:?}"));
            }
            Ok(Seen { cert, alpn })
        };
        let (server, client) = tokio::join!(server, client);
        match (server, client) {
            (Ok(()), Ok(seen)) => Ok(seen),
            (Err(server), _) => Err(format!("server: {server}")),
            (_, Err(client)) => Err(format!("client: {client}")),
        }
    }

    #[tokio::test]
    async fn serves_its_certificate_with_the_doors_alpn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let leaf = ca.server();
        let files = write_leaf(dir.path(), &leaf);
        let grpc = TlsListener::load(&files, Alpn::Grpc).expect("load");
        let seen = handshake(&grpc, client(&ca, &[b"h2"], None))
            .await
            .expect("handshake");
        assert_eq!(seen.cert, leaf.der);
        assert_eq!(seen.alpn.as_deref(), Some(&b"h2"[..]));

        let http = TlsListener::load(&files, Alpn::Http).expect("load");
        let seen = handshake(&http, client(&ca, &[b"http/1.1"], None))
            .await
            .expect("handshake");
        assert_eq!(seen.alpn.as_deref(), Some(&b"http/1.1"[..]));
        // A door speaks one protocol: a client that offers only another is
        // refused.
        let refused = handshake(&http, client(&ca, &[b"h2"], None)).await;
        assert!(
            matches!(&refused, Err(e) if e.starts_with("server:")),
            "{refused:?}"
        );
        let refused = handshake(&grpc, client(&ca, &[b"http/1.1"], None)).await;
        assert!(
            matches!(&refused, Err(e) if e.starts_with("server:")),
            "{refused:?}"
        );
    }

    #[test]
    fn refuses_a_key_that_is_not_the_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let (one, other) = (ca.server(), ca.server());
        let cert = write(dir.path(), "cert.pem", &one.cert_pem);
        let key = write(dir.path(), "key.pem", &other.key_pem);
        let files = crate::config::TlsFiles::new(&cert, &key);
        let error = TlsListener::load(&files, Alpn::Http).expect_err("a mismatched key");
        assert!(
            matches!(error, DoorTlsError::KeyMismatch { .. }),
            "{error:?}"
        );
        assert_eq!(error.file(), TlsFileKind::Key);
        assert_eq!(
            error.to_string(),
            format!(
                "the private key in {} does not match the certificate in {}",
                key.display(),
                cert.display()
            )
        );
    }

    #[test]
    fn each_broken_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let leaf = ca.server();
        let good = write_leaf(dir.path(), &leaf);
        let load = |files: &crate::config::TlsFiles| {
            TlsListener::load(files, Alpn::Http).expect_err("broken files")
        };

        let missing = crate::config::TlsFiles::new(dir.path().join("nope.pem"), &good.key);
        let error = load(&missing);
        assert!(
            matches!(
                error,
                DoorTlsError::Read {
                    file: TlsFileKind::Cert,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("nope.pem"), "{error}");

        // A certificate file holding only a key, a key file only a certificate.
        let error = load(&crate::config::TlsFiles::new(&good.key, &good.key));
        assert!(
            matches!(
                error,
                DoorTlsError::NoCertificate {
                    file: TlsFileKind::Cert,
                    ..
                }
            ),
            "{error:?}"
        );
        let error = load(&crate::config::TlsFiles::new(&good.cert, &good.cert));
        assert!(matches!(error, DoorTlsError::NoKey { .. }), "{error:?}");
        assert_eq!(error.file(), TlsFileKind::Key);

        let torn = write(
            dir.path(),
            "torn.pem",
            &leaf.cert_pem[..leaf.cert_pem.len() / 2],
        );
        let error = load(&crate::config::TlsFiles::new(&torn, &good.key));
        assert!(
            matches!(
                error,
                DoorTlsError::Pem {
                    file: TlsFileKind::Cert,
                    ..
                }
            ),
            "{error:?}"
        );

        let junk = write(
            dir.path(),
            "junk.pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let error = load(&crate::config::TlsFiles::new(&junk, &good.key));
        assert!(
            matches!(error, DoorTlsError::InvalidCertificate { .. }),
            "{error:?}"
        );

        let no_ca = good.clone().with_client_ca(&good.key);
        let error = load(&no_ca);
        assert!(
            matches!(
                error,
                DoorTlsError::NoCertificate {
                    file: TlsFileKind::ClientCa,
                    ..
                }
            ),
            "{error:?}"
        );
        let error = load(&good.clone().with_client_ca(&junk));
        assert!(matches!(error, DoorTlsError::BadCa { .. }), "{error:?}");
        assert_eq!(error.file(), TlsFileKind::ClientCa);
    }

    #[tokio::test]
    async fn reload_swaps_only_on_a_valid_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let first = ca.server();
        let files = write_leaf(dir.path(), &first);
        let tls = TlsListener::load(&files, Alpn::Http).expect("load");
        let trusting = || client(&ca, &[b"http/1.1"], None);
        assert!(!tls.reload().expect("unchanged files reload"));

        // Half a rotation: the new certificate beside the old key.
        let second = ca.server();
        write(dir.path(), "cert.pem", &second.cert_pem);
        let error = tls.reload().expect_err("a certificate without its key");
        assert!(
            matches!(error, DoorTlsError::KeyMismatch { .. }),
            "{error:?}"
        );
        assert_eq!(
            handshake(&tls, trusting())
                .await
                .expect("old certificate")
                .cert,
            first.der
        );
        // The same broken files are reported once, not at every poll.
        assert!(!tls.reload().expect("already refused"));

        write(dir.path(), "key.pem", &second.key_pem);
        assert!(tls.reload().expect("the whole rotation"));
        assert_eq!(
            handshake(&tls, trusting())
                .await
                .expect("new certificate")
                .cert,
            second.der
        );
        assert!(!tls.reload().expect("unchanged again"));

        // A file that vanished keeps the running certificate too.
        std::fs::remove_file(&files.key).expect("remove the key");
        let error = tls.reload().expect_err("a missing key");
        assert!(
            matches!(
                error,
                DoorTlsError::Read {
                    file: TlsFileKind::Key,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(
            handshake(&tls, trusting())
                .await
                .expect("still served")
                .cert,
            second.der
        );
    }

    #[tokio::test]
    async fn an_acceptor_taken_before_a_reload_keeps_its_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let first = ca.server();
        let files = write_leaf(dir.path(), &first);
        let tls = TlsListener::load(&files, Alpn::Http).expect("load");
        let before = tls.acceptor();
        let second = ca.server();
        write_leaf(dir.path(), &second);
        assert!(tls.reload().expect("rotation"));
        assert!(!Arc::ptr_eq(before.config(), tls.acceptor().config()));
        assert_eq!(
            before.config().alpn_protocols,
            tls.acceptor().config().alpn_protocols
        );
    }

    #[tokio::test]
    async fn a_silent_or_plaintext_client_fails_only_its_handshake() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let files = write_leaf(dir.path(), &ca.server());
        let tls = TlsListener::load(&files, Alpn::Http).expect("load");
        let socket = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = socket.local_addr().expect("address");

        // Connected, and never a byte: the timeout ends it.
        let _silent = TcpStream::connect(addr).await.expect("connect");
        let (tcp, _) = socket.accept().await.expect("accept");
        let mut told = false;
        let error = tls
            .accept(tcp, Duration::from_millis(200), || told = true)
            .await
            .expect_err("a client that never speaks");
        assert!(told, "timed_out runs on a timeout");
        assert!(matches!(error, HandshakeError::Timeout(_)), "{error:?}");

        // Plain HTTP to a TLS door.
        let mut plain = TcpStream::connect(addr).await.expect("connect");
        plain
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let (tcp, _) = socket.accept().await.expect("accept");
        let error = tls
            .accept(tcp, Duration::from_secs(10), || panic!("not a timeout"))
            .await
            .expect_err("not TLS");
        assert!(matches!(error, HandshakeError::Failed(_)), "{error:?}");

        // The next client is served as ever.
        let seen = handshake(&tls, client(&ca, &[b"h2", b"http/1.1"], None)).await;
        assert!(seen.is_ok(), "{seen:?}");
    }

    #[tokio::test]
    async fn mtls_serves_only_clients_the_ca_signed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("server CA");
        let clients = Ca::new("client CA");
        let files = write_leaf(dir.path(), &ca.server()).with_client_ca(write(
            dir.path(),
            "clients.pem",
            &clients.pem(),
        ));
        let tls = TlsListener::load(&files, Alpn::Grpc).expect("load");

        let anonymous = handshake(&tls, client(&ca, &[b"h2"], None)).await;
        assert!(
            matches!(&anonymous, Err(e) if e.starts_with("server:")),
            "a client without a certificate: {anonymous:?}"
        );
        let stranger = ca.client("stranger");
        let foreign = handshake(&tls, client(&ca, &[b"h2"], Some(&stranger))).await;
        assert!(
            matches!(&foreign, Err(e) if e.starts_with("server:")),
            "a certificate from another CA: {foreign:?}"
        );

        let member = clients.client("member");
        let seen = handshake(&tls, client(&ca, &[b"h2"], Some(&member)))
            .await
            .expect("a client the CA signed");
        assert_eq!(seen.alpn.as_deref(), Some(&b"h2"[..]));
    }
}
