//! Configurations that load but probably do not do what was meant: told by
//! `ratekeeper check` and logged when the service starts or reloads.

use std::fmt;

use super::{Config, KeyPart, LimitConfig, Reach, Unreachable};

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
    /// What the tower layer warns about in a limit's rule
    /// ([`Rule::warnings`](ratekeeper_tower::Rule::warnings)): a
    /// `client_ip` that trusts every address as a proxy, a key read from a
    /// header any client can set. The service and the layer find these in
    /// one place.
    Rule(ratekeeper_tower::ConfigWarning),
    /// A `[listen.tls.*]` table names a door that is off: its files are
    /// not read and nothing serves them.
    TlsForClosedDoor {
        /// The door: `http`, `grpc` or `admin`.
        door: String,
    },
    /// What the Limitador limits file says that is likely a mistake.
    Limitador(super::limitador::LimitadorWarning),
    /// No request of any door can match the limit.
    Unreachable {
        /// The limit.
        limit: String,
        /// Why.
        why: Unreachable,
    },
    /// A door that will be served has no limit that can apply to its
    /// requests: it answers every one "allowed".
    DoorWithoutLimits {
        /// The door, as `ratekeeper check` and the logs name it.
        door: ServedDoor,
    },
}

/// A door as [`ConfigWarning::DoorWithoutLimits`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServedDoor {
    /// `[listen] grpc`: Envoy's `ShouldRateLimit`.
    Grpc,
    /// `[listen] http`: the JSON API and nginx's `auth_request`.
    Http,
    /// `ratekeeper proxy`.
    Proxy,
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
            ConfigWarning::Rule(warning) => warning.fmt(f),
            ConfigWarning::TlsForClosedDoor { door } => write!(
                f,
                "listen.tls.{door} is set but listen.{door} is off: the table is ignored"
            ),
            ConfigWarning::Limitador(warning) => warning.fmt(f),
            ConfigWarning::Unreachable { limit, why } => {
                write!(f, "limit {limit} never applies: {why}")
            }
            ConfigWarning::DoorWithoutLimits { door: ServedDoor::Grpc } => f.write_str(
                "listen.grpc is on, but no limit matches Envoy descriptors (match.domain and                  match.descriptors), and there is no [envoy] config_dir or [limitador]: every                  ShouldRateLimit is answered OK",
            ),
            ConfigWarning::DoorWithoutLimits { door: ServedDoor::Http } => f.write_str(
                "listen.http is on, but no limit is configured: every decision it is asked                  for is \"allowed\"",
            ),
            ConfigWarning::DoorWithoutLimits { door: ServedDoor::Proxy } => f.write_str(
                "the proxy has no limit for HTTP requests (only a limit without match.domain                  and match.descriptors applies to them): every request is forwarded unlimited",
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
        let limitador = self
            .limitador
            .iter()
            .flat_map(|source| source.limits.warnings().iter().cloned())
            .map(ConfigWarning::Limitador);
        doors
            .chain(self.limits.iter().flat_map(warnings_for))
            .chain(limitador)
            .collect()
    }

    /// [`Config::warnings`], then each door to be served that no limit
    /// can apply to: `[listen]`'s http and grpc doors for `ratekeeper
    /// serve`, the proxy alone for `ratekeeper proxy` (`proxy` true).
    ///
    /// ```
    /// use ratekeeper_server::Config;
    ///
    /// let config = Config::from_toml_str(
    ///     "[[limits]]\nname = \"edge\"\nrate = \"10/s\"\nkey = [\"peer\"]\n\
    ///      [limits.match]\ndomain = \"edge\"\ndescriptors = [{ key = \"remote_address\" }]\n",
    ///     "edge.toml",
    /// )?;
    /// assert!(config.warnings_when_serving(false).is_empty());
    /// assert!(config.warnings_when_serving(true)[0]
    ///     .to_string()
    ///     .contains("every request is forwarded unlimited"));
    /// # Ok::<(), ratekeeper_server::ConfigError>(())
    /// ```
    pub fn warnings_when_serving(&self, proxy: bool) -> Vec<ConfigWarning> {
        let mut warnings = self.warnings();
        let reaches = |want: Reach| self.limits.iter().any(|l| l.matcher.reach() == want);
        let files = self.envoy.files.is_some() || self.limitador.is_some();
        let mut without = Vec::new();
        if proxy {
            if !reaches(Reach::Http) {
                without.push(ServedDoor::Proxy);
            }
        } else {
            if self.listen.http.is_some()
                && !reaches(Reach::Http)
                && !reaches(Reach::Descriptors)
                && !files
            {
                without.push(ServedDoor::Http);
            }
            if self.listen.grpc.is_some() && !reaches(Reach::Descriptors) && !files {
                without.push(ServedDoor::Grpc);
            }
        }
        warnings.extend(
            without
                .into_iter()
                .map(|door| ConfigWarning::DoorWithoutLimits { door }),
        );
        warnings
    }
}

fn warnings_for(limit: &LimitConfig) -> Vec<ConfigWarning> {
    let name = limit.limit.name().to_owned();
    let matcher = &limit.matcher;
    let by_descriptors = !matcher.descriptors.is_empty();
    let http_only = !matcher.methods.is_empty() || matcher.path_prefix.is_some();
    let mut warnings = Vec::new();
    if let Reach::Nowhere(why) = matcher.reach() {
        warnings.push(ConfigWarning::Unreachable {
            limit: name.clone(),
            why,
        });
    }
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
            _ => {}
        }
    }
    // A header part of a limit on descriptors is warned about above: it
    // is never in a descriptor, whoever could set it.
    let rule_warnings = limit.rule().warnings().into_iter().filter(|warning| {
        !(by_descriptors
            && matches!(
                warning,
                ratekeeper_tower::ConfigWarning::SpoofableHeader { .. }
            ))
    });
    warnings.extend(rule_warnings.map(ConfigWarning::Rule));
    warnings
}
