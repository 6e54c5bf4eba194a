//! YAML files of the examples (Kubernetes manifests) as plain trees, read
//! with the event parser ratekeeper-formats reads envoyproxy/ratelimit's
//! and Limitador's files with, so the tests need no YAML crate of their own.

use saphyr_parser::{Event, Parser};

/// A YAML node: scalars stay text, as the manifests' readers see them.
#[derive(Clone, Debug, PartialEq)]
pub enum Yaml {
    Scalar(String),
    Seq(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    /// The value under `key` of a map; panics naming the key otherwise.
    pub fn get(&self, key: &str) -> &Yaml {
        self.try_get(key)
            .unwrap_or_else(|| panic!("no {key:?} in {self:?}"))
    }

    /// The value under `key` of a map, if there is one.
    pub fn try_get(&self, key: &str) -> Option<&Yaml> {
        match self {
            Yaml::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Follows `path`, keys separated by `.`.
    pub fn at(&self, path: &str) -> &Yaml {
        path.split('.').fold(self, |node, key| node.get(key))
    }

    /// The scalar's text; panics on a collection.
    pub fn str(&self) -> &str {
        match self {
            Yaml::Scalar(text) => text,
            other => panic!("not a scalar: {other:?}"),
        }
    }

    /// The sequence's items; panics otherwise.
    pub fn items(&self) -> &[Yaml] {
        match self {
            Yaml::Seq(items) => items,
            other => panic!("not a list: {other:?}"),
        }
    }
}

/// Every document of `text`; panics with the parser's message on bad YAML,
/// and on anchors, which the examples do not use.
pub fn documents(text: &str) -> Vec<Yaml> {
    enum Open {
        Seq(Vec<Yaml>),
        Map(Vec<(String, Yaml)>, Option<String>),
    }
    let mut docs = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.unwrap_or_else(|error| panic!("invalid YAML: {error}"));
        let node = match event {
            Event::SequenceStart(..) => {
                stack.push(Open::Seq(Vec::new()));
                continue;
            }
            Event::MappingStart(..) => {
                stack.push(Open::Map(Vec::new(), None));
                continue;
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Open::Seq(items)) => Yaml::Seq(items),
                _ => panic!("unbalanced YAML at line {}", span.start.line()),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Open::Map(entries, None)) => Yaml::Map(entries),
                _ => panic!("unbalanced YAML at line {}", span.start.line()),
            },
            Event::Scalar(text, ..) => Yaml::Scalar(text.into_owned()),
            Event::Alias(_) => panic!("the examples use no aliases (line {})", span.start.line()),
            _ => continue,
        };
        match stack.last_mut() {
            None => docs.push(node),
            Some(Open::Seq(items)) => items.push(node),
            Some(Open::Map(entries, key)) => match key.take() {
                Some(key) => entries.push((key, node)),
                None => match node {
                    Yaml::Scalar(text) => *key = Some(text),
                    other => panic!("a non-scalar map key: {other:?}"),
                },
            },
        }
    }
    docs
}
