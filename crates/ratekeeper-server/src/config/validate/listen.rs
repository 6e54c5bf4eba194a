//! `[listen]` and `[requests]`: the doors, their connections and the caps
//! on one request.

use super::*;

impl Checker<'_> {
    pub(super) fn listen(
        &self,
        listen: Option<Spanned<FileListen>>,
    ) -> Result<ListenConfig, ConfigError> {
        let defaults = ListenConfig::default();
        let Some(listen) = listen else {
            return Ok(defaults);
        };
        let listen = listen.into_inner();
        let one = |name: &str,
                   value: &Option<Spanned<String>>,
                   default: Option<SocketAddr>|
         -> Result<(Option<SocketAddr>, Option<Range<usize>>), ConfigError> {
            let Some(value) = value else {
                return Ok((default, None));
            };
            let text = value.get_ref().trim();
            if text == "off" {
                return Ok((None, Some(value.span())));
            }
            match text.parse::<SocketAddr>() {
                Ok(addr) => Ok((Some(addr), Some(value.span()))),
                Err(_) => self.fail(
                    value.span(),
                    format!("listen.{name}"),
                    format!("invalid address {text:?}; expected IP:PORT such as \"127.0.0.1:8080\" or \"[::1]:8080\", or \"off\""),
                ),
            }
        };
        let all = [
            ("http", one("http", &listen.http, defaults.http)?),
            ("grpc", one("grpc", &listen.grpc, defaults.grpc)?),
            ("admin", one("admin", &listen.admin, defaults.admin)?),
        ];
        for (j, (name, (addr, span))) in all.iter().enumerate() {
            let Some(addr) = addr.filter(|a| a.port() != 0) else {
                continue;
            };
            for (other, (other_addr, other_span)) in &all[..j] {
                if *other_addr != Some(addr) {
                    continue;
                }
                // Blame the later field if it was written, else the earlier.
                let (field, against, span, default) = match (span, other_span) {
                    (Some(span), _) => (name, other, span.clone(), other_span.is_none()),
                    (None, Some(span)) => (other, name, span.clone(), true),
                    (None, None) => continue,
                };
                let default = if default { " (by default)" } else { "" };
                return self.fail(
                    span,
                    format!("listen.{field}"),
                    format!("{addr} is already the {against} address{default}"),
                );
            }
        }
        let [(_, (http, _)), (_, (grpc, _)), (_, (admin, _))] = all;
        let connections = self.connections(listen.connections, listen.http2)?;
        let mut checked = ListenConfig {
            http,
            grpc,
            admin,
            connections,
            tls: DoorTls::default(),
        };
        checked.tls = tls::check(self.at, listen.tls, &checked)?;
        Ok(checked)
    }

    pub(super) fn requests(
        &self,
        requests: Option<Spanned<FileRequests>>,
    ) -> Result<RequestCaps, ConfigError> {
        let defaults = RequestCaps::default();
        let Some(requests) = requests else {
            return Ok(defaults);
        };
        let requests = requests.into_inner();
        // Every maximum is far below `usize::MAX`, so the casts are exact.
        let cap = |value: &Option<Spanned<u64>>, field: &str, default: usize, max: usize| {
            value.as_ref().map_or(Ok(default), |value| {
                self.one_to(value, format!("requests.{field}"), field, max as u64, "")
                    .map(|n| n as usize)
            })
        };
        let mut caps = RequestCaps {
            max_descriptors: cap(
                &requests.max_descriptors,
                "max_descriptors",
                defaults.max_descriptors,
                RequestCaps::LIMIT_MAX_DESCRIPTORS,
            )?,
            max_entries: cap(
                &requests.max_entries,
                "max_entries",
                defaults.max_entries,
                RequestCaps::LIMIT_MAX_ENTRIES,
            )?,
            max_value_bytes: cap(
                &requests.max_value_bytes,
                "max_value_bytes",
                defaults.max_value_bytes,
                RequestCaps::LIMIT_MAX_VALUE_BYTES,
            )?,
            max_override_rates: cap(
                &requests.max_override_rates,
                "max_override_rates",
                defaults.max_override_rates,
                RequestCaps::LIMIT_MAX_OVERRIDE_RATES,
            )?,
            max_body_bytes: cap(
                &requests.max_body_bytes,
                "max_body_bytes",
                defaults.max_body_bytes,
                RequestCaps::LIMIT_MAX_BODY_BYTES,
            )?,
            max_waiting: cap(
                &requests.max_waiting,
                "max_waiting",
                defaults.max_waiting,
                RequestCaps::LIMIT_MAX_WAITING,
            )?,
            max_waiting_per_key: cap(
                &requests.max_waiting_per_key,
                "max_waiting_per_key",
                defaults.max_waiting_per_key,
                RequestCaps::LIMIT_MAX_WAITING,
            )?,
        };
        if requests.max_body_bytes.is_none() {
            // Unwritten, the body cap follows a raised value cap: one value
            // at its cap, and the JSON around it, always fit.
            caps.max_body_bytes = caps.max_body_bytes.max(caps.max_value_bytes + BODY_ROOM);
        } else if caps.max_body_bytes < caps.max_value_bytes {
            let span = requests
                .max_body_bytes
                .as_ref()
                .map(Spanned::span)
                .unwrap_or_default();
            return self.fail(
                span,
                "requests.max_body_bytes",
                format!(
                    "max_body_bytes ({}) is below max_value_bytes ({}): a request could not hold one value at its cap",
                    caps.max_body_bytes, caps.max_value_bytes
                ),
            );
        }
        Ok(caps)
    }
}
