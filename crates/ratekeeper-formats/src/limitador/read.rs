//! From the YAML tree to typed limits, with Limitador's checks (its
//! serde model: required fields, types, duplicate fields refused) and the
//! caps of this loader.

use std::rc::Rc;

use ratekeeper::policy::{MAX_PERIOD, MAX_QUOTA};

use super::cel::{Expr, Type};
use super::error::{LimitadorConfigError, LimitadorWarning};
use super::{Expression, LimitadorLimit, MAX_EXPRESSIONS, MAX_LIMITS, MAX_TEXT_BYTES};
use crate::yaml::{Document, Node, Position, ScalarKind, Value};

/// The fields of a limit, as Limitador's `Limit` deserializes them.
const FIELDS: [&str; 7] = [
    "namespace",
    "max_value",
    "seconds",
    "name",
    "id",
    "conditions",
    "variables",
];

/// Reads one file's tree.
pub(super) struct Reader<'a> {
    file: &'a str,
    pub(super) warnings: Vec<LimitadorWarning>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(file: &'a str) -> Reader<'a> {
        Reader {
            file,
            warnings: Vec::new(),
        }
    }

    fn at(&self, node: &Node) -> Position {
        Position::new(self.file, node.line, node.column)
    }

    /// Every limit of the document, in the file's order.
    pub(super) fn document(
        &mut self,
        document: &Document,
    ) -> Result<Vec<LimitadorLimit>, LimitadorConfigError> {
        if let Some((line, column)) = document.extra_document {
            return Err(LimitadorConfigError::SecondDocument {
                at: Position::new(self.file, line, column),
            });
        }
        // Limitador's YAML reader refuses a key given twice in a map,
        // where the parser keeps the last.
        if let Some((line, column, key)) = document.repeated.first() {
            return Err(LimitadorConfigError::DuplicateField {
                at: Position::new(self.file, *line, *column),
                field: key.chars().take(64).collect(),
            });
        }
        let Some(root) = &document.root else {
            return Ok(Vec::new());
        };
        let items = match &root.value {
            Value::Seq(items) => items,
            Value::Scalar(_, ScalarKind::Null) => return Ok(Vec::new()),
            _ => {
                return Err(LimitadorConfigError::NotAList {
                    at: self.at(root),
                    found: root.describe(),
                })
            }
        };
        if let Some(extra) = items.get(MAX_LIMITS) {
            return Err(LimitadorConfigError::TooManyLimits {
                at: self.at(extra),
                max: MAX_LIMITS,
            });
        }
        items.iter().map(|item| self.limit(item)).collect()
    }

    fn limit(&mut self, node: &Node) -> Result<LimitadorLimit, LimitadorConfigError> {
        let Value::Map(entries) = &node.value else {
            return Err(LimitadorConfigError::WrongType {
                at: self.at(node),
                field: "a limit".to_owned(),
                expected: "a map",
                found: node.describe(),
            });
        };
        let mut fields: [Option<&Rc<Node>>; FIELDS.len()] = [None; FIELDS.len()];
        for (key, value) in entries {
            let name = match key.scalar() {
                Some((text, ScalarKind::Str)) => text,
                _ => {
                    return Err(LimitadorConfigError::WrongType {
                        at: self.at(key),
                        field: "a field name".to_owned(),
                        expected: "a string",
                        found: key.describe(),
                    })
                }
            };
            let Some(index) = FIELDS.iter().position(|field| *field == name) else {
                return Err(LimitadorConfigError::UnknownField {
                    at: self.at(key),
                    field: name.chars().take(64).collect(),
                });
            };
            // A repeated key was refused with the document; the last one
            // stands here in any case.
            fields[index] = Some(value);
        }
        let [namespace, max_value, seconds, name, id, conditions, variables] = fields;
        let missing = |field| LimitadorConfigError::MissingField {
            at: self.at(node),
            field,
        };
        let namespace_node = namespace.ok_or_else(|| missing("namespace"))?;
        let namespace = self
            .text(namespace_node, "namespace")?
            .ok_or_else(|| missing("namespace"))?;
        if namespace.is_empty() {
            return Err(LimitadorConfigError::EmptyNamespace {
                at: self.at(namespace_node),
            });
        }
        let max_value = self.number(
            max_value.ok_or_else(|| missing("max_value"))?,
            "max_value",
            0,
            MAX_QUOTA,
        )?;
        let seconds = self.number(
            seconds.ok_or_else(|| missing("seconds"))?,
            "seconds",
            1,
            MAX_PERIOD.as_secs(),
        )?;
        let name = match name {
            Some(node) => self.text(node, "name")?,
            None => None,
        };
        let id = match id {
            Some(node) => self.text(node, "id")?,
            None => None,
        };
        let conditions = self.expressions(
            conditions.ok_or_else(|| missing("conditions"))?,
            "conditions",
        )?;
        let variables =
            self.expressions(variables.ok_or_else(|| missing("variables"))?, "variables")?;
        Ok(LimitadorLimit::new(
            namespace,
            max_value,
            seconds,
            name,
            id,
            conditions,
            variables,
            self.at(node),
        ))
    }

    /// A text field; `None` for null.
    fn text(
        &self,
        node: &Node,
        field: &'static str,
    ) -> Result<Option<String>, LimitadorConfigError> {
        let text = match node.scalar() {
            Some((_, ScalarKind::Null)) => return Ok(None),
            Some((text, kind)) if is_text(text, kind) => text,
            _ => {
                return Err(LimitadorConfigError::WrongType {
                    at: self.at(node),
                    field: field.to_owned(),
                    expected: "a string",
                    found: node.describe(),
                })
            }
        };
        if text.len() > MAX_TEXT_BYTES {
            return Err(LimitadorConfigError::TooLong {
                at: self.at(node),
                field,
                len: text.len(),
                max: MAX_TEXT_BYTES,
            });
        }
        Ok(Some(text.to_owned()))
    }

    /// A whole number from `min` to `max`.
    fn number(
        &self,
        node: &Node,
        field: &'static str,
        min: u64,
        max: u64,
    ) -> Result<u64, LimitadorConfigError> {
        let (text, kind) = node.scalar().unwrap_or(("", ScalarKind::Null));
        let ScalarKind::Int(value) = kind else {
            return Err(LimitadorConfigError::WrongType {
                at: self.at(node),
                field: field.to_owned(),
                expected: "a whole number",
                found: node.describe(),
            });
        };
        match u64::try_from(value) {
            Ok(value) if (min..=max).contains(&value) => Ok(value),
            _ => Err(LimitadorConfigError::OutOfRange {
                at: self.at(node),
                field,
                value: text.to_owned(),
                why: match field {
                    "seconds" => format!(
                        "a window is from 1 to {max} seconds (Limitador takes 0, which counts nothing)"
                    ),
                    _ => format!("from {min} to {max}"),
                },
            }),
        }
    }

    /// `conditions` or `variables`: a list of expressions, null being none.
    fn expressions(
        &self,
        node: &Node,
        field: &'static str,
    ) -> Result<Vec<Expression>, LimitadorConfigError> {
        let items = match &node.value {
            Value::Seq(items) => items,
            Value::Scalar(_, ScalarKind::Null) => return Ok(Vec::new()),
            _ => {
                return Err(LimitadorConfigError::WrongType {
                    at: self.at(node),
                    field: field.to_owned(),
                    expected: "a list of strings",
                    found: node.describe(),
                })
            }
        };
        if items.len() > MAX_EXPRESSIONS {
            return Err(LimitadorConfigError::TooManyExpressions {
                at: self.at(node),
                field,
                max: MAX_EXPRESSIONS,
            });
        }
        let mut parsed = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let place = format!("{field}[{index}]");
            let source = match item.scalar() {
                Some((text, kind)) if is_text(text, kind) => text,
                _ => {
                    return Err(LimitadorConfigError::WrongType {
                        at: self.at(item),
                        field: place,
                        expected: "a string (a CEL expression)",
                        found: item.describe(),
                    })
                }
            };
            let expr = Expr::parse(source).map_err(|source_error| LimitadorConfigError::Cel {
                at: self.at(item),
                field: place.clone(),
                expression: shorten(source),
                source: source_error,
            })?;
            let bad_type = |why| LimitadorConfigError::BadType {
                at: self.at(item),
                field: place.clone(),
                expression: shorten(source),
                why,
            };
            if expr.first_non_bool_operand().is_some() {
                return Err(bad_type(
                    "gives `&&`, `||` or `!` something other than a boolean",
                ));
            }
            if field == "conditions" && expr.kind() != Type::Bool {
                return Err(bad_type(
                    "is not a boolean: a condition compares, such as descriptors[0]['key'] == 'value'",
                ));
            }
            parsed.push(Expression {
                source: source.to_owned(),
                expr,
            });
        }
        Ok(parsed)
    }
}

/// Whether a scalar is text for Limitador's YAML reader, which follows YAML
/// 1.2: the parser here resolves plain scalars by YAML 1.1's rules (for
/// envoyproxy/ratelimit), so its booleans other than 1.2's (`yes`, `on`)
/// are text.
fn is_text(text: &str, kind: ScalarKind) -> bool {
    match kind {
        ScalarKind::Str => true,
        ScalarKind::Bool(_) => {
            !matches!(text, "true" | "True" | "TRUE" | "false" | "False" | "FALSE")
        }
        _ => false,
    }
}

/// An expression as an error shows it: at most 80 characters.
fn shorten(source: &str) -> String {
    let mut shown: String = source.chars().take(80).collect();
    if shown.len() < source.len() {
        shown.push_str("...");
    }
    shown
}
