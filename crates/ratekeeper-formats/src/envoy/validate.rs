//! From a YAML tree to typed descriptors, with envoyproxy/ratelimit's
//! checks in its order: field names first over the whole file, then the
//! types, then (while the tree is built, see `tree.rs`) each descriptor's
//! key, its limit and its `share_threshold`.

use std::collections::HashMap;
use std::rc::Rc;

use ratekeeper::policy::PolicyKind;

use super::error::{EnvoyConfigError, EnvoyWarning};
use super::model::{FileRateLimit, Metadata, Unit};
use crate::yaml::{Node, Position, ScalarKind, Value};

/// Every field name envoyproxy/ratelimit accepts, plus ratekeeper's
/// `policy`.
///
/// envoyproxy/ratelimit checks names against this one set at every level,
/// so a name in the wrong place (`unit` beside `key`) is accepted there
/// and ignored; this loader does the same, with an [`EnvoyWarning`].
pub(crate) const FIELDS: [&str; 17] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "policy",
];

const ROOT_FIELDS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];
const LIMIT_FIELDS: &[&str] = &[
    "requests_per_unit",
    "unit",
    "unlimited",
    "name",
    "replaces",
    "policy",
];
const REPLACES_FIELDS: &[&str] = &["name"];

/// One file, typed.
#[derive(Debug)]
pub(crate) struct FileSpec {
    /// The domain, `""` when absent.
    pub(crate) domain: String,
    /// Where the domain is, or the document when it has none.
    pub(crate) domain_at: Position,
    /// The top-level descriptors.
    pub(crate) descriptors: Vec<DescriptorSpec>,
}

/// One descriptor, typed but not yet checked.
#[derive(Debug)]
pub(crate) struct DescriptorSpec {
    pub(crate) at: Position,
    pub(crate) key: String,
    pub(crate) key_at: Position,
    pub(crate) value: String,
    pub(crate) rate_limit: Option<LimitSpec>,
    pub(crate) descriptors: Vec<DescriptorSpec>,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) detailed_metric: bool,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
    pub(crate) metadata: Option<Metadata>,
}

/// One `rate_limit` block, typed but not yet checked.
#[derive(Debug)]
pub(crate) struct LimitSpec {
    pub(crate) at: Position,
    pub(crate) requests_per_unit: u32,
    pub(crate) requests_per_unit_at: Option<Position>,
    pub(crate) unit: String,
    pub(crate) unit_at: Option<Position>,
    pub(crate) unlimited: bool,
    pub(crate) name: String,
    pub(crate) replaces: Vec<(String, Position)>,
    pub(crate) policy: Option<(String, Position)>,
}

/// Reads one file's tree.
pub(crate) struct Reader<'a> {
    file: &'a str,
    pub(crate) warnings: Vec<EnvoyWarning>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(file: &'a str) -> Reader<'a> {
        Reader {
            file,
            warnings: Vec::new(),
        }
    }

    fn at(&self, node: &Node) -> Position {
        Position::new(self.file, node.line, node.column)
    }

    fn warn(&mut self, node: &Node, message: String) {
        let at = self.at(node);
        self.warnings.push(EnvoyWarning { at, message });
    }

    /// The whole file: `root` is `None` for an empty one.
    pub(crate) fn file(&mut self, root: Option<&Rc<Node>>) -> Result<FileSpec, EnvoyConfigError> {
        let start = Position::new(self.file, 1, 1);
        let Some(root) = root else {
            return Ok(FileSpec {
                domain: String::new(),
                domain_at: start,
                descriptors: Vec::new(),
            });
        };
        match &root.value {
            Value::Map(_) => {}
            Value::Scalar(_, ScalarKind::Null) => {
                return Ok(FileSpec {
                    domain: String::new(),
                    domain_at: self.at(root),
                    descriptors: Vec::new(),
                })
            }
            _ => {
                return Err(EnvoyConfigError::WrongType {
                    at: self.at(root),
                    field: "the document".to_owned(),
                    expected: "a map",
                    found: root.describe(),
                })
            }
        }
        self.check_names(root)?;
        let fields = self.fields(root, ROOT_FIELDS, "the top level");
        let (domain, domain_at) = match fields.get("domain") {
            Some(node) => (self.string(node, "domain")?, self.at(node)),
            None => (String::new(), self.at(root)),
        };
        let descriptors = match fields.get("descriptors") {
            Some(node) => self.descriptors(node)?,
            None => Vec::new(),
        };
        Ok(FileSpec {
            domain,
            domain_at,
            descriptors,
        })
    }

    /// envoyproxy/ratelimit's first pass: every map key is a string and a
    /// known field name, every list holds maps, and no value is a float,
    /// except inside `metadata`, which may hold anything.
    fn check_names(&self, root: &Rc<Node>) -> Result<(), EnvoyConfigError> {
        let mut pending: Vec<&Node> = vec![root];
        while let Some(map) = pending.pop() {
            let Value::Map(entries) = &map.value else {
                continue;
            };
            for (key, value) in entries {
                let name = match key.scalar() {
                    Some((text, ScalarKind::Str)) => text,
                    _ => {
                        return Err(EnvoyConfigError::NonStringKey {
                            at: self.at(key),
                            found: key.describe(),
                        })
                    }
                };
                if !FIELDS.contains(&name) {
                    return Err(EnvoyConfigError::UnknownField {
                        at: self.at(key),
                        key: name.to_owned(),
                    });
                }
                if name == "metadata" {
                    continue;
                }
                match &value.value {
                    Value::Map(_) => pending.push(value),
                    Value::Seq(items) => {
                        for item in items {
                            if !matches!(item.value, Value::Map(_)) {
                                return Err(EnvoyConfigError::NonMapListEntry {
                                    at: self.at(item),
                                    found: item.describe(),
                                });
                            }
                            pending.push(item);
                        }
                    }
                    Value::Scalar(_, ScalarKind::OtherNumber) => {
                        return Err(EnvoyConfigError::WrongType {
                            at: self.at(value),
                            field: name.to_owned(),
                            expected: "a string, an integer or a boolean",
                            found: value.describe(),
                        })
                    }
                    Value::Scalar(..) => {}
                }
            }
        }
        Ok(())
    }

    /// A map's fields by name (the parser left one entry per name); names
    /// that mean nothing at this level are warned about.
    fn fields<'n>(
        &mut self,
        map: &'n Node,
        allowed: &[&str],
        level: &str,
    ) -> HashMap<&'n str, &'n Rc<Node>> {
        let mut fields = HashMap::new();
        let Value::Map(entries) = &map.value else {
            return fields;
        };
        for (key, value) in entries {
            let Some((name, _)) = key.scalar() else {
                continue;
            };
            if !allowed.contains(&name) {
                self.warn(
                    key,
                    format!("`{name}` is not a field of {level}: ignored, as envoyproxy/ratelimit ignores it"),
                );
                continue;
            }
            fields.insert(name, value);
        }
        fields
    }

    fn string(&self, node: &Node, field: &str) -> Result<String, EnvoyConfigError> {
        match &node.value {
            Value::Scalar(_, ScalarKind::Null) => Ok(String::new()),
            // yaml.v2 decodes any scalar into a string field as written.
            Value::Scalar(text, _) => Ok(text.clone()),
            _ => Err(self.wrong(node, field, "a string")),
        }
    }

    fn boolean(&self, node: Option<&&Rc<Node>>, field: &str) -> Result<bool, EnvoyConfigError> {
        let Some(node) = node else {
            return Ok(false);
        };
        match node.value {
            Value::Scalar(_, ScalarKind::Null) => Ok(false),
            Value::Scalar(_, ScalarKind::Bool(value)) => Ok(value),
            _ => Err(self.wrong(node, field, "a boolean")),
        }
    }

    fn wrong(&self, node: &Node, field: &str, expected: &'static str) -> EnvoyConfigError {
        EnvoyConfigError::WrongType {
            at: self.at(node),
            field: field.to_owned(),
            expected,
            found: node.describe(),
        }
    }

    fn descriptors(&mut self, node: &Node) -> Result<Vec<DescriptorSpec>, EnvoyConfigError> {
        let items = match &node.value {
            Value::Scalar(_, ScalarKind::Null) => return Ok(Vec::new()),
            Value::Seq(items) => items,
            _ => return Err(self.wrong(node, "descriptors", "a list of descriptors")),
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(self.descriptor(item)?);
        }
        Ok(out)
    }

    fn descriptor(&mut self, node: &Node) -> Result<DescriptorSpec, EnvoyConfigError> {
        let fields = self.fields(node, DESCRIPTOR_FIELDS, "a descriptor");
        let (key, key_at) = match fields.get("key") {
            Some(k) => (self.string(k, "key")?, self.at(k)),
            None => (String::new(), self.at(node)),
        };
        let value = match fields.get("value") {
            Some(v) => self.string(v, "value")?,
            None => String::new(),
        };
        let rate_limit = match fields.get("rate_limit") {
            Some(limit) => self.limit(limit)?,
            None => None,
        };
        let descriptors = match fields.get("descriptors") {
            Some(children) => self.descriptors(children)?,
            None => Vec::new(),
        };
        let metadata = match fields.get("metadata") {
            None => None,
            Some(meta) => match &meta.value {
                Value::Scalar(_, ScalarKind::Null) => None,
                Value::Map(entries) if entries.is_empty() => None,
                Value::Map(_) => Some(self.metadata(meta)?),
                _ => return Err(self.wrong(meta, "metadata", "a map")),
            },
        };
        Ok(DescriptorSpec {
            at: self.at(node),
            key,
            key_at,
            value,
            rate_limit,
            descriptors,
            shadow_mode: self.boolean(fields.get("shadow_mode"), "shadow_mode")?,
            quota_mode: self.boolean(fields.get("quota_mode"), "quota_mode")?,
            detailed_metric: self.boolean(fields.get("detailed_metric"), "detailed_metric")?,
            value_to_metric: self.boolean(fields.get("value_to_metric"), "value_to_metric")?,
            share_threshold: self.boolean(fields.get("share_threshold"), "share_threshold")?,
            metadata,
        })
    }

    fn limit(&mut self, node: &Node) -> Result<Option<LimitSpec>, EnvoyConfigError> {
        match &node.value {
            Value::Scalar(_, ScalarKind::Null) => return Ok(None),
            Value::Map(_) => {}
            _ => return Err(self.wrong(node, "rate_limit", "a map")),
        }
        let fields = self.fields(node, LIMIT_FIELDS, "a rate_limit");
        let (requests_per_unit, requests_per_unit_at) = match fields.get("requests_per_unit") {
            None => (0, None),
            Some(n) => {
                let value = match n.value {
                    Value::Scalar(_, ScalarKind::Null) => 0,
                    Value::Scalar(_, ScalarKind::Int(i)) => u32::try_from(i).map_err(|_| {
                        self.wrong(n, "requests_per_unit", "an integer from 0 to 4294967295")
                    })?,
                    _ => {
                        return Err(self.wrong(
                            n,
                            "requests_per_unit",
                            "an integer from 0 to 4294967295",
                        ))
                    }
                };
                (value, Some(self.at(n)))
            }
        };
        let (unit, unit_at) = match fields.get("unit") {
            None => (String::new(), None),
            Some(u) => (self.string(u, "unit")?, Some(self.at(u))),
        };
        let name = match fields.get("name") {
            None => String::new(),
            Some(n) => self.string(n, "name")?,
        };
        let mut replaces = Vec::new();
        match fields.get("replaces").map(|r| (r, &r.value)) {
            None | Some((_, Value::Scalar(_, ScalarKind::Null))) => {}
            Some((_, Value::Seq(items))) => {
                for item in items {
                    let entry = self.fields(item, REPLACES_FIELDS, "a replaces entry");
                    let name = match entry.get("name") {
                        None => String::new(),
                        Some(n) => self.string(n, "name")?,
                    };
                    // The `name` key, not the map: an empty value's span
                    // (and so its map's) can start on the next line.
                    let at = name_key(item).map_or_else(|| self.at(item), |key| self.at(key));
                    replaces.push((name, at));
                }
            }
            Some((r, _)) => return Err(self.wrong(r, "replaces", "a list of `name:` maps")),
        }
        let policy = match fields.get("policy") {
            None => None,
            Some(p) => match p.value {
                Value::Scalar(_, ScalarKind::Null) => None,
                _ => Some((self.string(p, "policy")?, self.at(p))),
            },
        };
        Ok(Some(LimitSpec {
            at: self.at(node),
            requests_per_unit,
            requests_per_unit_at,
            unit,
            unit_at,
            unlimited: self.boolean(fields.get("unlimited"), "unlimited")?,
            name,
            replaces,
            policy,
        }))
    }

    /// `metadata`, which may nest (within the parser's depth cap).
    fn metadata(&self, node: &Node) -> Result<Metadata, EnvoyConfigError> {
        Ok(match &node.value {
            Value::Scalar(_, ScalarKind::Null) => Metadata::Null,
            Value::Scalar(_, ScalarKind::Bool(b)) => Metadata::Bool(*b),
            Value::Scalar(_, ScalarKind::Int(i)) => Metadata::Int(*i),
            Value::Scalar(text, ScalarKind::OtherNumber) => Metadata::Number(text.clone()),
            Value::Scalar(text, ScalarKind::Str) => Metadata::String(text.clone()),
            Value::Seq(items) => Metadata::List(
                items
                    .iter()
                    .map(|item| self.metadata(item))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Map(entries) => {
                let mut out: Vec<(String, Metadata)> = Vec::with_capacity(entries.len());
                let mut index: HashMap<&str, usize> = HashMap::with_capacity(entries.len());
                for (key, value) in entries {
                    let Some((text, _)) = key.scalar() else {
                        return Err(self.wrong(key, "metadata", "a map with scalar keys"));
                    };
                    let value = self.metadata(value)?;
                    // As in a Go map, a repeated key keeps its last value.
                    match index.get(text) {
                        Some(&slot) => out[slot].1 = value,
                        None => {
                            index.insert(text, out.len());
                            out.push((text.to_owned(), value));
                        }
                    }
                }
                Metadata::Map(out)
            }
        })
    }
}

/// The last `name` key of a map, where a reader would look.
fn name_key(map: &Node) -> Option<&Node> {
    let Value::Map(entries) = &map.value else {
        return None;
    };
    entries
        .iter()
        .rev()
        .find(|(key, _)| key.scalar().is_some_and(|(text, _)| text == "name"))
        .map(|(key, _)| &**key)
}

/// A `rate_limit` block checked as envoyproxy/ratelimit checks it: the
/// unit (unless unlimited, which must have none), then `replaces`.
pub(crate) fn check_limit(
    spec: &LimitSpec,
    descriptor: &DescriptorSpec,
    warnings: &mut Vec<EnvoyWarning>,
) -> Result<FileRateLimit, EnvoyConfigError> {
    let unit = Unit::parse(&spec.unit);
    let unit_at = || spec.unit_at.clone().unwrap_or_else(|| spec.at.clone());
    if spec.unlimited {
        if unit.is_some() {
            return Err(EnvoyConfigError::UnlimitedWithUnit { at: unit_at() });
        }
        if let Some(at) = &spec.unit_at {
            warnings.push(EnvoyWarning {
                at: at.clone(),
                message: format!("unit `{}` is ignored: the limit is unlimited", spec.unit),
            });
        }
        if let Some(at) = &spec.requests_per_unit_at {
            warnings.push(EnvoyWarning {
                at: at.clone(),
                message: "requests_per_unit is ignored: the limit is unlimited".to_owned(),
            });
        }
    } else if unit.is_none() {
        return Err(EnvoyConfigError::BadUnit {
            at: unit_at(),
            unit: spec.unit.clone(),
        });
    }
    for (name, at) in &spec.replaces {
        if name.is_empty() {
            return Err(EnvoyConfigError::EmptyReplaces { at: at.clone() });
        }
        if *name == spec.name {
            return Err(EnvoyConfigError::ReplacesSelf {
                at: at.clone(),
                name: name.clone(),
            });
        }
    }
    let policy = match &spec.policy {
        None => PolicyKind::FixedWindow,
        Some((text, at)) => {
            text.parse::<PolicyKind>()
                .map_err(|_| EnvoyConfigError::BadPolicy {
                    at: at.clone(),
                    policy: text.clone(),
                })?
        }
    };
    Ok(FileRateLimit {
        unit: if spec.unlimited { None } else { unit },
        requests_per_unit: spec.requests_per_unit,
        unlimited: spec.unlimited,
        name: (!spec.name.is_empty()).then(|| spec.name.clone()),
        replaces: spec.replaces.iter().map(|(name, _)| name.clone()).collect(),
        shadow_mode: descriptor.shadow_mode,
        quota_mode: descriptor.quota_mode,
        detailed_metric: descriptor.detailed_metric,
        policy,
        metadata: descriptor.metadata.clone(),
        at: spec.at.clone(),
        id: 0,
    })
}
