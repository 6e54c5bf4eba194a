//! `ratekeeper explain`: which limits of a configuration apply to a
//! request, and why the others do not, without running the service.

use std::io::Read as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ratekeeper::stats::Stats;

use super::load_with;
use crate::engine::explain::{explain, DescriptorInput, ExplainRequest, ProbeEntry};
use crate::engine::LimitSet;

/// `ratekeeper explain`'s arguments.
#[derive(Debug, Args)]
pub(super) struct ExplainArgs {
    /// The configuration file; without one, the built-in defaults.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// A directory of envoyproxy/ratelimit's YAML files, as `serve
    /// --envoy-config` takes it.
    #[arg(long, value_name = "DIR")]
    envoy_config: Option<PathBuf>,
    /// A Kuadrant Limitador limits file, as `serve --limitador-config`
    /// takes it.
    #[arg(long, value_name = "FILE")]
    limitador_config: Option<PathBuf>,
    /// Envoy's domain of the descriptors.
    #[arg(long, requires = "descriptors")]
    domain: Option<String>,
    /// One descriptor, as KEY=VALUE entries joined by commas
    /// (`remote_address=10.0.0.1,path=/login`); repeatable, in order.
    #[arg(long = "descriptor", value_name = "ENTRIES", value_parser = parse_descriptor, requires = "domain")]
    descriptors: Vec<Vec<ProbeEntry>>,
    /// The HTTP request's method (default GET).
    #[arg(long, conflicts_with = "domain")]
    method: Option<String>,
    /// The HTTP request's path (default /).
    #[arg(long, conflicts_with = "domain")]
    path: Option<String>,
    /// An HTTP header, as NAME:VALUE; repeatable.
    #[arg(long = "header", value_name = "NAME:VALUE", value_parser = parse_header, conflicts_with = "domain")]
    headers: Vec<(String, String)>,
    /// The client's address as the door sees it (the socket peer).
    #[arg(long, conflicts_with = "domain")]
    peer: Option<IpAddr>,
    /// The request as JSON, in `POST /v1/explain`'s shape, from a file or
    /// `-` for stdin (instead of the flags above).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["domain", "method", "path", "headers", "peer"])]
    request: Option<PathBuf>,
    /// Print the explanation as JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the explanation; exits 0 when a limit applies, 1 when none
/// does, 2 on an error.
pub(super) fn explain_command(args: ExplainArgs) -> ExitCode {
    match run(args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: ExplainArgs) -> Result<ExitCode, String> {
    let flags = [
        ("RATEKEEPER_ENVOY__CONFIG_DIR", &args.envoy_config),
        ("RATEKEEPER_LIMITADOR__CONFIG_FILE", &args.limitador_config),
    ];
    let overrides: Vec<(String, String)> = flags
        .into_iter()
        .filter_map(|(variable, path)| {
            Some((variable.to_owned(), path.as_ref()?.display().to_string()))
        })
        .collect();
    let config = load_with(args.config.as_deref(), &overrides).map_err(|e| e.to_string())?;
    let request = match &args.request {
        Some(path) => read_request(path)?,
        None => ExplainRequest {
            method: args.method,
            path: args.path,
            headers: args.headers.into_iter().collect(),
            peer: args.peer,
            domain: args.domain,
            descriptors: (!args.descriptors.is_empty()).then(|| {
                args.descriptors
                    .into_iter()
                    .map(DescriptorInput::Entries)
                    .collect()
            }),
        },
    };
    let probe = request
        .into_probe(&config.requests)
        .map_err(|e| e.to_string())?;
    let limits = LimitSet::with_stats(
        &config.limits,
        config.envoy.files.as_ref(),
        config.limitador.as_ref(),
        &Stats::new(),
    );
    let explanation = explain(&limits, &probe);
    if args.json {
        let json = serde_json::to_string_pretty(&explanation).map_err(|e| e.to_string())?;
        println!("{json}");
    } else {
        print!("{explanation}");
    }
    Ok(match explanation.is_unmatched() {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    })
}

fn read_request(path: &std::path::Path) -> Result<ExplainRequest, String> {
    let mut text = String::new();
    let read = match path.as_os_str() == "-" {
        true => std::io::stdin().read_to_string(&mut text).map(drop),
        false => std::fs::read_to_string(path).map(|t| text = t),
    };
    read.map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `KEY=VALUE,KEY=VALUE`.
fn parse_descriptor(text: &str) -> Result<Vec<ProbeEntry>, String> {
    text.split(',')
        .map(|entry| match entry.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok(ProbeEntry {
                key: key.to_owned(),
                value: value.to_owned(),
            }),
            _ => Err(format!(
                "{entry:?} is not KEY=VALUE (a descriptor is entries joined by commas; for \
                 values with commas, use --request)"
            )),
        })
        .collect()
}

/// `NAME:VALUE`.
fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("{text:?} is not NAME:VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_and_headers_are_read_or_refused_by_name() {
        let entries = parse_descriptor("remote_address=10.0.0.1,path=/a=b").unwrap();
        assert_eq!(entries[0].key, "remote_address");
        assert_eq!(entries[1].value, "/a=b");
        assert!(parse_descriptor("novalue").is_err());
        assert!(parse_descriptor("=v").is_err());
        assert_eq!(
            parse_header("X-Api-Key: k:1").unwrap(),
            ("X-Api-Key".to_owned(), "k:1".to_owned())
        );
        assert!(parse_header("nocolon").is_err());
    }
}
