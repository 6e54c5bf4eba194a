//! What `ratekeeper import envoy` says about its output: where it would
//! decide otherwise than `ratekeeper serve --envoy-config` on the same
//! directory ([`NoteKind::Difference`]), and where only what it reports
//! differs ([`NoteKind::Warning`]).

use std::fmt;

use super::validate::DescriptorSpec;
use crate::Glob;

/// How a note bears on the decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoteKind {
    /// Every request is decided as `serve --envoy-config` decides it
    /// (allowed or not, the limit, the remaining count); only a name, a
    /// unit shown, stats or metadata differ.
    Warning,
    /// Some request would be decided otherwise: the import is refused
    /// unless asked to go on (`--allow-differences`).
    Difference,
}

/// One thing the import says about its output, also written in the TOML
/// as a `# differs:` or `# note:` comment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportNote {
    /// Whether decisions differ.
    pub kind: NoteKind,
    /// What it concerns: a descriptor's path (`domain.key_value.key`), a
    /// level of the tree, or a domain.
    pub subject: String,
    /// What differs, and why.
    pub message: String,
}

impl ImportNote {
    pub(super) fn new(kind: NoteKind, subject: &str, message: String) -> ImportNote {
        ImportNote {
            kind,
            subject: subject.to_owned(),
            message,
        }
    }
}

impl fmt::Display for ImportNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}

/// The differences one level of the tree makes (its descriptors, whose
/// parents' path is `at`): the tree matches each request entry by its
/// `KEY_VALUE` text, natively by its key and value, and the two part
/// where the level's texts can meet across keys or where a wildcard's own
/// text is sent.
pub(super) fn level_notes(at: &str, level: &[DescriptorSpec], notes: &mut Vec<ImportNote>) {
    for (index, spec) in level.iter().enumerate() {
        if spec.key.contains('*') {
            notes.push(ImportNote::new(
                NoteKind::Difference,
                at,
                format!(
                    "the key {:?} has a `*`: --envoy-config matches it as a pattern over each \
                     request entry's KEY_VALUE text (other keys included); natively it is a key \
                     like any other",
                    spec.key
                ),
            ));
        }
        for other in level {
            if other.key != spec.key && other.key.starts_with(&format!("{}_", spec.key)) {
                notes.push(ImportNote::new(
                    NoteKind::Difference,
                    at,
                    format!(
                        "the keys {:?} and {:?}: --envoy-config matches entries by their \
                         KEY_VALUE text, so an entry of one can match a descriptor of the other; \
                         natively keys are compared whole",
                        spec.key, other.key
                    ),
                ));
            }
        }
        if !spec.value.contains('*') {
            continue;
        }
        // A request value that is this wildcard's own text is found as an
        // exact value by --envoy-config; natively an earlier wildcard that
        // matches the text takes it.
        let earlier = level[..index].iter().find(|e| {
            e.key == spec.key && e.value.contains('*') && Glob::new(&e.value).matches(&spec.value)
        });
        if let Some(earlier) = earlier {
            notes.push(ImportNote::new(
                NoteKind::Difference,
                at,
                format!(
                    "a request value of {key:?} that is literally {own:?} goes to that \
                     descriptor under --envoy-config (found as an exact value), natively to \
                     the earlier wildcard {first:?}, which matches it",
                    key = spec.key,
                    own = spec.value,
                    first = earlier.value
                ),
            ));
        }
    }
}

/// Whether a level's texts let a request whose keys are not the file's
/// meet a descriptor by its `KEY_VALUE` text (the header's note).
pub(super) fn key_value_matters(level: &[DescriptorSpec]) -> bool {
    level.iter().any(|spec| {
        spec.key.contains('_') || spec.value.contains('*') || key_value_matters(&spec.descriptors)
    })
}
