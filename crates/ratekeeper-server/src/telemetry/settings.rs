//! Whether and how to export traces, read from the `OTEL_*` environment
//! variables (see the module's docs for the rules).

use std::collections::HashMap;

use super::TelemetryError;

/// The OTLP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum OtlpProtocol {
    /// OTLP/gRPC (`grpc`), by default to port 4317.
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`), by default to
    /// port 4318, `POST /v1/traces`.
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The protocol as `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// How to export traces, when the environment turns the exporter on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct OtlpSettings {
    /// The transport.
    pub(crate) protocol: OtlpProtocol,
    /// The `service.name` to set, when neither `OTEL_SERVICE_NAME` nor
    /// `OTEL_RESOURCE_ATTRIBUTES` names the service: `ratekeeper`.
    pub(crate) default_service_name: Option<&'static str>,
}

/// The variables that name where traces go.
const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The variables that name the protocol, the most specific first.
const PROTOCOLS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

impl OtlpSettings {
    /// The settings `vars` (the environment's `(name, value)` pairs) ask
    /// for: `Ok(None)` when they leave the exporter off, an error for a
    /// value this service does not support (an exporter other than `otlp`,
    /// the `http/json` protocol), so that a typo is told at start rather
    /// than found missing in a dashboard.
    pub(crate) fn from_vars<I, K, V>(vars: I) -> Result<Option<OtlpSettings>, TelemetryError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let vars: HashMap<String, String> = vars
            .into_iter()
            .filter(|(name, _)| name.as_ref().starts_with("OTEL_"))
            .map(|(name, value)| (name.as_ref().to_owned(), value.as_ref().trim().to_owned()))
            .filter(|(_, value)| !value.is_empty())
            .collect();
        let get = |name: &str| vars.get(name).map(String::as_str);
        if get("OTEL_SDK_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let asked = match get("OTEL_TRACES_EXPORTER") {
            None => ENDPOINTS.iter().any(|name| get(name).is_some()),
            Some(list) => {
                let mut otlp = false;
                for exporter in list.split(',').map(str::trim) {
                    match exporter {
                        "otlp" => otlp = true,
                        "none" | "" => {}
                        other => return Err(TelemetryError::UnsupportedExporter(other.to_owned())),
                    }
                }
                otlp
            }
        };
        if !asked {
            return Ok(None);
        }
        let protocol = match PROTOCOLS.iter().find_map(|name| Some((*name, get(name)?))) {
            None | Some((_, "http/protobuf")) => OtlpProtocol::HttpProtobuf,
            Some((_, "grpc")) => OtlpProtocol::Grpc,
            Some((variable, value)) => {
                return Err(TelemetryError::UnsupportedProtocol {
                    variable,
                    value: value.to_owned(),
                })
            }
        };
        // The HTTP exporter's client speaks plain HTTP: say so now rather
        // than fail every export.
        if protocol == OtlpProtocol::HttpProtobuf {
            if let Some((variable, url)) = ENDPOINTS
                .iter()
                .find_map(|name| Some((*name, get(name)?)))
                .filter(|(_, url)| url.to_ascii_lowercase().starts_with("https:"))
            {
                return Err(TelemetryError::HttpsOverHttp {
                    variable,
                    url: crate::config::redact_url(url),
                });
            }
        }
        let named = get("OTEL_SERVICE_NAME").is_some()
            || get("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
                attributes
                    .split(',')
                    .any(|pair| pair.split('=').next().map(str::trim) == Some("service.name"))
            });
        Ok(Some(OtlpSettings {
            protocol,
            default_service_name: (!named).then_some("ratekeeper"),
        }))
    }

    /// [`OtlpSettings::from_vars`] on this process's environment (its
    /// variables that are not Unicode are skipped).
    pub(crate) fn from_env() -> Result<Option<OtlpSettings>, TelemetryError> {
        OtlpSettings::from_vars(std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<OtlpSettings>, TelemetryError> {
        OtlpSettings::from_vars(vars.iter().copied())
    }

    #[test]
    fn the_protocol_variable_chooses_grpc_and_other_variables_are_ignored() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        let on = OtlpSettings::from_vars(vars).unwrap().expect("on");
        assert_eq!(on.protocol, OtlpProtocol::Grpc);
        assert_eq!(OtlpSettings::from_vars([("PATH", "/bin")]).unwrap(), None);
    }

    #[test]
    fn off_without_an_endpoint_or_an_exporter() {
        assert_eq!(settings(&[]).unwrap(), None);
        assert_eq!(settings(&[("OTEL_SERVICE_NAME", "rl")]).unwrap(), None);
        assert_eq!(
            settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap(),
            None
        );
    }

    #[test]
    fn an_endpoint_turns_it_on_with_http_protobuf_by_default() {
        for endpoint in ENDPOINTS {
            let on = settings(&[(endpoint, "http://c:4318")]).unwrap().unwrap();
            assert_eq!(on.protocol, OtlpProtocol::HttpProtobuf);
            assert_eq!(on.default_service_name, Some("ratekeeper"));
        }
    }

    #[test]
    fn the_traces_protocol_wins_over_the_general_one() {
        let on = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(on.protocol, OtlpProtocol::Grpc);
    }

    #[test]
    fn disabled_and_none_keep_it_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(
            settings(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]).unwrap(),
            None
        );
        assert_eq!(
            settings(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]).unwrap(),
            None
        );
        assert!(settings(&[endpoint, ("OTEL_SDK_DISABLED", "false")])
            .unwrap()
            .is_some());
    }

    #[test]
    fn otlp_turns_it_on_without_an_endpoint() {
        let on = settings(&[("OTEL_TRACES_EXPORTER", "otlp")]).unwrap();
        assert!(on.is_some());
    }

    #[test]
    fn unsupported_values_are_refused() {
        let error = settings(&[("OTEL_TRACES_EXPORTER", "otlp,zipkin")]).unwrap_err();
        assert!(error.to_string().contains("zipkin"), "{error}");
        let error = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && text.contains("http/json"),
            "{text}"
        );
    }

    #[test]
    fn https_needs_grpc() {
        let https = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "HTTPS://c:4318/v1/traces",
        );
        let error = settings(&[https]).unwrap_err();
        assert!(error.to_string().contains("grpc"), "{error}");
        let on = settings(&[https, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap();
        assert_eq!(on.unwrap().protocol, OtlpProtocol::Grpc);
    }

    #[test]
    fn a_named_service_keeps_its_name() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        for named in [
            ("OTEL_SERVICE_NAME", "edge-limits"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=edge, service.name=edge-limits",
            ),
        ] {
            let on = settings(&[endpoint, named]).unwrap().unwrap();
            assert_eq!(on.default_service_name, None);
        }
        let other = ("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=edge");
        let on = settings(&[endpoint, other]).unwrap().unwrap();
        assert_eq!(on.default_service_name, Some("ratekeeper"));
    }
}
