//! Configurations that load but probably do not do what was meant: told by
//! `ratekeeper check` and logged when the service starts or reloads.

use std::fmt;

use ratekeeper_tower::client::ClientIp;

use super::{Config, KeyPart, LimitConfig};

/// A limit that works, but probably not as meant.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigWarning {
    /// The limit applies to Envoy descriptors, but its key needs a part a
    /// descriptor never has (`route`, `header:NAME`): every gRPC request
    /// shares one `unknown` key for it.
    PartNotInDescriptors {
        /// The limit.
        limit: String,
        /// The part, as written.
        part: String,
    },
    /// The limit applies to HTTP requests only (it names methods or a path),
    /// but its key needs a `descriptor:KEY` part, which HTTP requests never
    /// have: every request shares one `unknown` key for it.
    DescriptorInHttpLimit {
        /// The limit.
        limit: String,
        /// The part, as written.
        part: String,
    },
    /// `client_ip` trusts a network that covers every address, so any
    /// client can name its own key in the header it reads.
    TrustsEveryProxy {
        /// The limit.
        limit: String,
        /// The header `client_ip` reads (`X-Forwarded-For`, `Forwarded`,
        /// or the `client_ip_from` header).
        header: String,
    },
    /// A `[listen.tls.*]` table names a door that is off: its files are
    /// not read and nothing serves them.
    TlsForClosedDoor {
        /// The door: `http`, `grpc` or `admin`.
        door: String,
    },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigWarning::PartNotInDescriptors { limit, part } => write!(
                f,
                "limit {limit} matches Envoy descriptors, but its key part {part} is never in one: \
                 every gRPC request shares the key \"unknown\""
            ),
            ConfigWarning::DescriptorInHttpLimit { limit, part } => write!(
                f,
                "limit {limit} matches HTTP methods or paths, but its key part {part} comes only \
                 from Envoy descriptors: every request shares the key \"unknown\""
            ),
            ConfigWarning::TrustsEveryProxy { limit, header } => write!(
                f,
                "limit {limit} trusts every address as a proxy (a /0 network in trusted_proxies): \
                 any client can choose its own key with {header}"
            ),
            ConfigWarning::TlsForClosedDoor { door } => write!(
                f,
                "listen.tls.{door} is set but listen.{door} is off: the table is ignored"
            ),
        }
    }
}

impl Config {
    /// What in this configuration loads but probably is not what was
    /// meant: TLS tables of doors that are off, then limit by limit, in
    /// the file's order.
    ///
    /// ```
    /// use ratekeeper_server::Config;
    ///
    /// let config = Config::from_toml_str(
    ///     "[[limits]]\nname = \"edge\"\nrate = \"10/s\"\nkey = [\"route\"]\n\
    ///      [limits.match]\ndomain = \"edge\"\ndescriptors = [{ key = \"remote_address\" }]\n",
    ///     "edge.toml",
    /// )?;
    /// assert_eq!(
    ///     config.warnings()[0].to_string(),
    ///     "limit edge matches Envoy descriptors, but its key part route is never in one: \
    ///      every gRPC request shares the key \"unknown\""
    /// );
    /// # Ok::<(), ratekeeper_server::ConfigError>(())
    /// ```
    pub fn warnings(&self) -> Vec<ConfigWarning> {
        let doors = super::tls::closed_doors(&self.listen).into_iter();
        let doors = doors.map(|door| ConfigWarning::TlsForClosedDoor {
            door: door.to_owned(),
        });
        doors
            .chain(self.limits.iter().flat_map(warnings_for))
            .collect()
    }
}

fn warnings_for(limit: &LimitConfig) -> Vec<ConfigWarning> {
    let name = limit.limit.name().to_owned();
    let matcher = &limit.matcher;
    let by_descriptors = !matcher.descriptors.is_empty();
    let http_only = !matcher.methods.is_empty() || matcher.path_prefix.is_some();
    let mut warnings = Vec::new();
    for part in &limit.key {
        match part {
            KeyPart::Route | KeyPart::Header(_) if by_descriptors => {
                warnings.push(ConfigWarning::PartNotInDescriptors {
                    limit: name.clone(),
                    part: part.to_string(),
                });
            }
            KeyPart::Descriptor(_) if http_only => {
                warnings.push(ConfigWarning::DescriptorInHttpLimit {
                    limit: name.clone(),
                    part: part.to_string(),
                });
            }
            KeyPart::ClientIp(strategy, _)
                if strategy.trusted().iter().any(|net| net.prefix_len() == 0) =>
            {
                warnings.push(ConfigWarning::TrustsEveryProxy {
                    limit: name.clone(),
                    header: header_label(strategy),
                });
            }
            _ => {}
        }
    }
    warnings
}

/// The header `strategy` reads, as people write it.
fn header_label(strategy: &ClientIp) -> String {
    match strategy {
        ClientIp::Forwarded { .. } => "Forwarded".to_owned(),
        ClientIp::Header { name, .. } => name.to_string(),
        _ => "X-Forwarded-For".to_owned(),
    }
}
