//! An explanation as text, for `ratekeeper explain`.

use std::fmt;

use ratekeeper_formats::envoy::Entry;

use super::{Explanation, Origin};

/// A key's bytes as text (keys over 64 bytes are digests elsewhere; here
/// the whole key is shown, lossily where it is not UTF-8).
pub(super) fn key(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A descriptor as `[key=value, …]`.
pub(super) fn descriptor<E: Entry>(entries: &[E]) -> String {
    let entries: Vec<String> = entries
        .iter()
        .map(|entry| format!("{}={}", entry.key(), entry.value()))
        .collect();
    format!("[{}]", entries.join(", "))
}

/// A request of descriptors in words, as logs and explanations show it:
/// `domain "edge", descriptors [k=v], [k=v, k2=w]`.
pub fn describe_descriptors<'a, E: Entry + 'a>(
    domain: &str,
    descriptors: impl IntoIterator<Item = &'a [E]>,
) -> String {
    let described: Vec<String> = descriptors.into_iter().map(descriptor).collect();
    format!("domain {domain:?}, descriptors {}", described.join(", "))
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Config => "limit",
            Origin::EnvoyFiles => "envoy files",
            Origin::Limitador => "limitador",
        })
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "request: {}", self.request)?;
        let at = |descriptor: Option<usize>| match descriptor {
            Some(index) => format!(" (descriptor {index})"),
            None => String::new(),
        };
        writeln!(f, "applies:")?;
        if self.is_unmatched() {
            writeln!(f, "  nothing: the request is allowed and counted nowhere")?;
        }
        for verdict in self.applied() {
            write!(
                f,
                "  {} {}{}, key {:?}",
                verdict.from,
                verdict.limit,
                at(verdict.descriptor),
                verdict.key.as_deref().unwrap_or_default()
            )?;
            match &verdict.plan {
                Some(plan) => writeln!(f, ", plan {plan}")?,
                None => writeln!(f)?,
            }
        }
        let skipped: Vec<_> = self.limits.iter().filter(|v| !v.applies).collect();
        if !skipped.is_empty() {
            writeln!(f, "does not apply:")?;
        }
        for verdict in skipped {
            writeln!(
                f,
                "  {} {}{}: {}",
                verdict.from,
                verdict.limit,
                at(verdict.descriptor),
                verdict.why.as_deref().unwrap_or_default()
            )?;
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        Ok(())
    }
}
