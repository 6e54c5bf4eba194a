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
    Rule(ratekeeper_tower::LayerWarning),
    /// A `[listen.tls.*]` table names a door that is off: its files are
    /// not read and nothing serves them.
    TlsForClosedDoor {
        /// The door: `http`, `grpc` or `admin`.
        door: String,
    },
    /// What the Limitador limits file says that is likely a mistake.
    Limitador(ratekeeper_formats::limitador::LimitadorWarning),
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
    /// The limit has `after_response`, which only `ratekeeper proxy`
    /// applies, where it will not: the limit matches Envoy descriptors,
    /// which the proxy never sees, or the configuration is checked for
    /// `ratekeeper serve`, whose doors count a request's cost before it
    /// runs.
    AfterResponseNotApplied {
        /// The limit.
        limit: String,
        /// Why the proxy will not apply it.
        why: AfterResponseUnused,
    },
    /// The limit has `max_wait`, which only `ratekeeper proxy` applies,
    /// and the configuration is checked for `ratekeeper serve`, whose
    /// doors answer at once.
    MaxWaitNotApplied {
        /// The limit.
        limit: String,
    },
    /// The limit reads its plan from a descriptor entry: Envoy builds it
    /// from what its route configuration names, often a request header,
    /// which a client can send unless the edge sets or strips it.
    PlanFromDescriptor {
        /// The limit.
        limit: String,
        /// The descriptor entry's key.
        key: String,
    },
    /// No limit applies anywhere: no `[[limits]]`, no envoyproxy/ratelimit
    /// limit in `[envoy] config_dir` and no Limitador limit: every request
    /// is allowed.
    NoLimits,
}

/// Why a limit's `after_response` is not applied, as
/// [`ConfigWarning::AfterResponseNotApplied`] tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AfterResponseUnused {
    /// The limit matches Envoy descriptors: the proxy never decides by
    /// it, whatever command serves it.
    Descriptors,
    /// The configuration is served by `ratekeeper serve`, which has no
    /// response to read.
    Serve,
}

/// A door as [`ConfigWarning::DoorWithoutLimits`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServedDoor {
    /// `[listen] grpc`: Envoy's `ShouldRateLimit`.
    Grpc,
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
            ConfigWarning::DoorWithoutLimits {
                door: ServedDoor::Grpc,
            } => f.write_str(
                "listen.grpc is on, but no limit matches Envoy descriptors (match.domain and \
                 match.descriptors), and there is no [envoy] config_dir or [limitador]: every \
                 ShouldRateLimit is answered OK",
            ),
            ConfigWarning::DoorWithoutLimits {
                door: ServedDoor::Proxy,
            } => f.write_str(
                "the proxy has no limit for HTTP requests (only a limit without match.domain \
                 and match.descriptors applies to them): every request is forwarded unlimited",
            ),
            ConfigWarning::AfterResponseNotApplied {
                limit,
                why: AfterResponseUnused::Descriptors,
            } => write!(
                f,
                "limit {limit} has after_response, which only ratekeeper proxy applies, but it \
                 matches Envoy descriptors, which the proxy never sees: it is never applied \
                 (Envoy's stream-done calls are charged past the limit with count_refused = true)"
            ),
            ConfigWarning::AfterResponseNotApplied {
                limit,
                why: AfterResponseUnused::Serve,
            } => write!(
                f,
                "limit {limit} has after_response, which only ratekeeper proxy applies: on \
                 serve's doors it counts each request's cost when it is checked (clients report \
                 costs known later with /v1/report, or /v1/reserve and /v1/commit)"
            ),
            ConfigWarning::MaxWaitNotApplied { limit } => write!(
                f,
                "limit {limit} has max_wait, which only ratekeeper proxy applies: serve's doors \
                 answer a refused request at once (its Retry-After says when to come back)"
            ),
            ConfigWarning::PlanFromDescriptor { limit, key } => write!(
                f,
                "limit {limit} takes its plan from the descriptor entry {key:?}: make sure \
                 Envoy builds it from something a client cannot choose (a header your edge \
                 overwrites, a verified token's claim), or any client can name the plan it \
                 likes"
            ),
            ConfigWarning::NoLimits => f.write_str(
                "no limit applies anywhere (no [[limits]], no envoyproxy/ratelimit limits in \
                 [envoy] config_dir, no Limitador limits in [limitador] config_file): every \
                 request is allowed",
            ),
        }
    }
}

impl Config {
    /// What in this configuration loads but probably is not what was
    /// meant: that no limit applies anywhere, TLS tables of doors that are
    /// off, then limit by limit, in the file's order.
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
        let none = self.no_limits().then_some(ConfigWarning::NoLimits);
        none.into_iter()
            .chain(doors)
            .chain(self.limits.iter().flat_map(warnings_for))
            .chain(
                self.in_flight
                    .iter()
                    .filter(|cap| cap.applies_to_http())
                    .flat_map(|cap| cap.rule().warnings())
                    .map(ConfigWarning::Rule),
            )
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
        // With no limit at all, NoLimits says it for every door.
        if self.no_limits() {
            return warnings;
        }
        let reaches = |want: Reach| self.limits.iter().any(|l| l.matcher.reach() == want);
        let files = self.envoy.files.is_some() || self.limitador.is_some();
        let door = match proxy {
            true => (!reaches(Reach::Http)).then_some(ServedDoor::Proxy),
            false => (self.listen.grpc.is_some() && !reaches(Reach::Descriptors) && !files)
                .then_some(ServedDoor::Grpc),
        };
        warnings.extend(door.map(|door| ConfigWarning::DoorWithoutLimits { door }));
        // The proxy applies after_response; serve's doors check before
        // the request runs. (Limits on descriptors are told by warnings.)
        if !proxy {
            let unused = self.limits.iter().filter(|limit| {
                limit.after_response.is_some() && limit.matcher.reach() == Reach::Http
            });
            warnings.extend(unused.map(|limit| ConfigWarning::AfterResponseNotApplied {
                limit: limit.limit.name().to_owned(),
                why: AfterResponseUnused::Serve,
            }));
            let waits = self.limits.iter().filter(|limit| limit.max_wait.is_some());
            warnings.extend(waits.map(|limit| ConfigWarning::MaxWaitNotApplied {
                limit: limit.limit.name().to_owned(),
            }));
        }
        warnings
    }
}

impl Config {
    /// Whether no limit applies anywhere: none native, none in the
    /// envoyproxy/ratelimit files, none in the Limitador file.
    fn no_limits(&self) -> bool {
        let envoy = self
            .envoy
            .files
            .as_ref()
            .is_some_and(|files| files.config().limit_count() > 0);
        let limitador = self
            .limitador
            .as_ref()
            .is_some_and(|source| !source.limits.limits().is_empty());
        self.limits.is_empty() && self.in_flight.is_empty() && !envoy && !limitador
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
    if limit.after_response.is_some() && matcher.reach() == Reach::Descriptors {
        warnings.push(ConfigWarning::AfterResponseNotApplied {
            limit: name.clone(),
            why: AfterResponseUnused::Descriptors,
        });
    }
    if let Some(super::PlanFrom::Descriptor(key)) = limit.plans.as_ref().map(|plans| &plans.from) {
        warnings.push(ConfigWarning::PlanFromDescriptor {
            limit: name.clone(),
            key: key.clone(),
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
                ratekeeper_tower::LayerWarning::SpoofableHeader { .. }
            ))
    });
    warnings.extend(rule_warnings.map(ConfigWarning::Rule));
    warnings
}
