//! The YAML reader both formats share, and belongs to neither: text to a
//! tree of nodes that remember where they start, with the caps every file
//! is held to ([`MAX_DEPTH`], [`MAX_NODES`]), the places errors name
//! ([`Position`]) and the reader's own error ([`YamlError`]).
//!
//! The tree itself is the crate's own: [`envoy`](crate::envoy) and
//! [`limitador`](crate::limitador) read their fields from it, and each
//! wraps a [`YamlError`] in its own error.
//!
//! The parser is [`saphyr_parser`], the event layer of the saphyr project
//! (the maintained successor of yaml-rust and yaml-rust2): each event
//! comes with its span, so every error can name a line and a column, and
//! the event stream lets this module build the tree with its own stack,
//! so that nesting is capped here ([`MAX_DEPTH`]) instead of by the
//! thread's stack. `serde_yaml` was not an option: it is unmaintained and
//! its values forget their positions.
//!
//! envoyproxy/ratelimit reads its files with Go's `gopkg.in/yaml.v2`,
//! which resolves plain scalars by YAML 1.1's rules (`yes` and `on` are
//! booleans, `0x1f` is an integer). saphyr follows YAML 1.2, so this
//! module resolves plain scalars itself, the way yaml.v2 does, to accept
//! and refuse the same files. Limitador's reader reads the same tree with
//! its own rules (see [`limitador`](crate::limitador)).

use std::collections::HashMap;
use std::rc::Rc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

mod error;
#[cfg(test)]
mod tests;

pub use error::{Position, YamlError};

/// Collections nested deeper than this are refused: real configurations
/// nest descriptors a handful of levels, and a cap keeps every later walk
/// over the tree shallow.
pub const MAX_DEPTH: usize = 64;

/// Nodes (scalars, lists and maps, aliases counted as the nodes they
/// stand for) one file may have: a 16 MiB file of descriptors has about
/// 1.6 million, and a tree costs about a hundred bytes a node, so this
/// keeps a file of one-character nodes (`[a,a,a,...]`) from costing more
/// memory than a real configuration does.
pub const MAX_NODES: usize = 2_000_000;

/// What a scalar resolves to, as yaml.v2 would decode it into an
/// `interface{}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScalarKind {
    /// `~`, `null`, or nothing at all.
    Null,
    /// YAML 1.1's booleans, `yes`/`no`/`on`/`off`/`y`/`n` included.
    Bool(bool),
    /// An integer that fits an `i64`.
    Int(i64),
    /// A float, or an integer too large for an `i64` (yaml.v2 gives those
    /// a type that envoyproxy/ratelimit's key check refuses, as floats).
    OtherNumber,
    /// Anything else, and every quoted or block scalar.
    Str,
}

/// A YAML node.
#[derive(Debug)]
pub(crate) struct Node {
    /// Where the node starts.
    pub(crate) line: usize,
    /// The column (1-based, in characters) where the node starts.
    pub(crate) column: usize,
    /// The node itself.
    pub(crate) value: Value,
    /// Nodes in this subtree, itself included: what expanding an alias
    /// to it costs.
    size: usize,
    /// Collections on the longest path down from here (0 for a scalar),
    /// aliases followed: an alias may not nest a tree deeper than
    /// [`MAX_DEPTH`] where it stands, or chained anchors could build one
    /// as deep as the file is long.
    height: usize,
}

/// A node's content.
#[derive(Debug)]
pub(crate) enum Value {
    /// A scalar: its text, and what it resolves to.
    Scalar(String, ScalarKind),
    /// A sequence.
    Seq(Vec<Rc<Node>>),
    /// A mapping, in the file's order, merge keys (`<<`) expanded and
    /// repeated keys kept (the reader takes the last, as yaml.v2 does).
    Map(Vec<(Rc<Node>, Rc<Node>)>),
}

impl Node {
    /// The node's text if it is a scalar.
    pub(crate) fn scalar(&self) -> Option<(&str, ScalarKind)> {
        match &self.value {
            Value::Scalar(text, kind) => Some((text, *kind)),
            _ => None,
        }
    }

    /// What the node is, for messages.
    pub(crate) fn describe(&self) -> String {
        match &self.value {
            Value::Scalar(text, kind) => {
                let shown: String = text.chars().take(40).collect();
                let shown = if shown.len() < text.len() {
                    format!("{shown}...")
                } else {
                    shown
                };
                match kind {
                    ScalarKind::Null => "null".to_owned(),
                    ScalarKind::Bool(_) => format!("the boolean {shown}"),
                    ScalarKind::Int(_) => format!("the integer {shown}"),
                    ScalarKind::OtherNumber => format!("the number {shown}"),
                    ScalarKind::Str => format!("the string {shown:?}"),
                }
            }
            Value::Seq(_) => "a list".to_owned(),
            Value::Map(_) => "a map".to_owned(),
        }
    }
}

/// A parsed file: its first document, and whether more followed.
#[derive(Debug)]
pub(crate) struct Document {
    /// The first document's root; `None` for a file with no document.
    pub(crate) root: Option<Rc<Node>>,
    /// Where a second document starts, if there is one (yaml.v2 reads
    /// only the first).
    pub(crate) extra_document: Option<(usize, usize)>,
    /// Keys written twice in one map, where the second stands: yaml.v2
    /// keeps the last value without a word.
    pub(crate) repeated: Vec<(usize, usize, String)>,
}

/// A collection being built.
enum Open {
    Seq {
        start: Span,
        anchor: usize,
        items: Vec<Rc<Node>>,
        size: usize,
    },
    Map {
        start: Span,
        anchor: usize,
        entries: Vec<(Rc<Node>, Rc<Node>)>,
        key: Option<Rc<Node>>,
        size: usize,
    },
}

/// Parses `text` (the file `file`) into its first document.
///
/// Anchors and aliases are supported, since yaml.v2 supports them; an
/// alias shares its node instead of copying it, and the nodes reachable
/// through aliases are counted, so that a small file cannot stand for an
/// exponentially large tree (at most twice the text's length plus a
/// constant).
pub(crate) fn parse(text: &str, file: &str) -> Result<Document, YamlError> {
    parse_capped(text, file, MAX_NODES)
}

/// [`parse`] with a node cap of `max_nodes` instead of [`MAX_NODES`].
fn parse_capped(text: &str, file: &str, max_nodes: usize) -> Result<Document, YamlError> {
    let budget = text
        .len()
        .saturating_mul(2)
        .saturating_add(10_000)
        .min(max_nodes);
    // Nodes so far, aliases counted as what they stand for.
    let mut expanded = 0usize;
    let mut parser = Parser::new_from_str(text);
    let mut anchors: HashMap<usize, Rc<Node>> = HashMap::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut root: Option<Rc<Node>> = None;
    let mut documents = 0usize;
    let mut repeated = Vec::new();
    let at = |span: &Span| Position::new(file, span.start.line(), span.start.col() + 1);
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                let marker = error.marker();
                return Err(YamlError::Syntax {
                    at: Position::new(file, marker.line(), marker.col() + 1),
                    message: error.info().to_owned(),
                });
            }
        };
        if matches!(
            event,
            Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..)
        ) {
            expanded += 1;
            if expanded > budget {
                return Err(YamlError::TooManyNodes {
                    at: at(&span),
                    max: budget,
                });
            }
        }
        let node = match event {
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents == 2 {
                    return Ok(Document {
                        root,
                        extra_document: Some((span.start.line(), span.start.col() + 1)),
                        repeated,
                    });
                }
                continue;
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => continue,
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(YamlError::TooDeep {
                        at: at(&span),
                        max: MAX_DEPTH,
                    });
                }
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Open::Seq {
                        start: span,
                        anchor,
                        items: Vec::new(),
                        size: 1,
                    }
                } else {
                    Open::Map {
                        start: span,
                        anchor,
                        entries: Vec::new(),
                        key: None,
                        size: 1,
                    }
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(open) = stack.pop() else {
                    continue;
                };
                let (start, anchor, value, size) = match open {
                    Open::Seq {
                        start,
                        anchor,
                        items,
                        size,
                    } => (start, anchor, Value::Seq(items), size),
                    Open::Map {
                        start,
                        anchor,
                        entries,
                        size,
                        ..
                    } => (
                        start,
                        anchor,
                        Value::Map(resolve_map(entries, &mut repeated)),
                        size,
                    ),
                };
                let height = 1 + match &value {
                    Value::Seq(items) => items.iter().map(|i| i.height).max().unwrap_or(0),
                    Value::Map(entries) => entries
                        .iter()
                        .map(|(k, v)| k.height.max(v.height))
                        .max()
                        .unwrap_or(0),
                    Value::Scalar(..) => 0,
                };
                let node = Rc::new(Node {
                    line: start.start.line(),
                    column: start.start.col() + 1,
                    value,
                    size,
                    height,
                });
                if anchor != 0 {
                    anchors.insert(anchor, Rc::clone(&node));
                }
                node
            }
            Event::Scalar(text, style, anchor, tag) => {
                let is_str_tag = tag
                    .as_ref()
                    .is_some_and(|tag| tag.handle == "tag:yaml.org,2002:" && tag.suffix == "str")
                    || tag
                        .as_ref()
                        .is_some_and(|tag| tag.handle == "!!" && tag.suffix == "str");
                let kind = if style == ScalarStyle::Plain && !is_str_tag {
                    resolve_plain(&text)
                } else {
                    ScalarKind::Str
                };
                let node = Rc::new(Node {
                    line: span.start.line(),
                    column: span.start.col() + 1,
                    value: Value::Scalar(text.into_owned(), kind),
                    size: 1,
                    height: 0,
                });
                if anchor != 0 {
                    anchors.insert(anchor, Rc::clone(&node));
                }
                node
            }
            Event::Alias(anchor) => match anchors.get(&anchor) {
                Some(node) => {
                    if stack.len() + node.height > MAX_DEPTH {
                        return Err(YamlError::TooDeep {
                            at: at(&span),
                            max: MAX_DEPTH,
                        });
                    }
                    expanded = expanded.saturating_add(node.size);
                    if expanded > budget {
                        return Err(YamlError::TooManyNodes {
                            at: at(&span),
                            max: budget,
                        });
                    }
                    Rc::clone(node)
                }
                None => {
                    return Err(YamlError::Syntax {
                        at: at(&span),
                        message: "an alias to an anchor that is not defined before it".to_owned(),
                    })
                }
            },
        };
        match stack.last_mut() {
            None => {
                if root.is_none() {
                    root = Some(node);
                }
            }
            Some(Open::Seq { items, size, .. }) => {
                *size = size.saturating_add(node.size);
                items.push(node);
            }
            Some(Open::Map {
                entries, key, size, ..
            }) => {
                *size = size.saturating_add(node.size);
                match key.take() {
                    None => *key = Some(node),
                    Some(k) => entries.push((k, node)),
                }
            }
        }
    }
    Ok(Document {
        root,
        extra_document: None,
        repeated,
    })
}

/// A map's entries as yaml.v2 leaves them: one per key, the last
/// assignment winning, with YAML 1.1 merge keys (`<<: *base`, or a list of
/// them) applied where they stand: the merged map's keys are assigned
/// there, so a later key overrides them and they override an earlier one
/// (and in a list, the first map wins). Keys written twice by hand are
/// reported in `repeated`; those a merge overrides are not, as overriding
/// is what a merge is for.
fn resolve_map(
    entries: Vec<(Rc<Node>, Rc<Node>)>,
    repeated: &mut Vec<(usize, usize, String)>,
) -> Vec<(Rc<Node>, Rc<Node>)> {
    let mut out: Vec<(Rc<Node>, Rc<Node>)> = Vec::with_capacity(entries.len());
    // A key's slot in `out`, by its text and whether it is a string (an
    // integer key `1` and a string key `"1"` differ).
    // Where each key's entry is in `out`, and whether it was written by
    // hand (not merged).
    let mut slots: HashMap<(bool, String), (usize, bool)> = HashMap::new();
    // Assigns `key`; true when it replaces a hand-written entry by hand.
    let mut assign = |key: &Rc<Node>, value: &Rc<Node>, explicit: bool, out: &mut Vec<_>| -> bool {
        let Some((text, kind)) = key.scalar() else {
            out.push((Rc::clone(key), Rc::clone(value)));
            return false;
        };
        let id = (kind == ScalarKind::Str, text.to_owned());
        match slots.get_mut(&id) {
            Some((slot, was_explicit)) => {
                out[*slot] = (Rc::clone(key), Rc::clone(value));
                let twice = explicit && *was_explicit;
                *was_explicit = explicit;
                twice
            }
            None => {
                slots.insert(id, (out.len(), explicit));
                out.push((Rc::clone(key), Rc::clone(value)));
                false
            }
        }
    };
    for (key, value) in &entries {
        let is_merge = matches!(&key.value, Value::Scalar(text, ScalarKind::Str) if text == "<<");
        let sources: Vec<&Rc<Node>> = match &value.value {
            Value::Map(_) if is_merge => vec![value],
            Value::Seq(items)
                if is_merge && items.iter().all(|i| matches!(i.value, Value::Map(_))) =>
            {
                items.iter().rev().collect()
            }
            // Not a merge, or not a mergeable value: an ordinary key (the
            // field check then refuses `<<` as unknown, as yaml.v2 refuses
            // the merge).
            _ => {
                if assign(key, value, true, &mut out) {
                    if let Some((text, _)) = key.scalar() {
                        repeated.push((key.line, key.column, text.to_owned()));
                    }
                }
                continue;
            }
        };
        for source in sources {
            if let Value::Map(merged) = &source.value {
                for (k, v) in merged {
                    assign(k, v, false, &mut out);
                }
            }
        }
    }
    out
}

/// Resolves a plain scalar as yaml.v2 does.
pub(crate) fn resolve_plain(text: &str) -> ScalarKind {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return ScalarKind::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return ScalarKind::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return ScalarKind::Bool(false)
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => return ScalarKind::OtherNumber,
        _ => {}
    }
    let first = text.as_bytes()[0];
    if first == b'.' {
        // yaml.v2 tries these as floats as written, underscores included.
        return if is_float(text) {
            ScalarKind::OtherNumber
        } else {
            ScalarKind::Str
        };
    }
    if !(first.is_ascii_digit() || first == b'+' || first == b'-') {
        return ScalarKind::Str;
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if let Some(value) = parse_int(&plain) {
        return match i64::try_from(value) {
            Ok(value) => ScalarKind::Int(value),
            Err(_) => ScalarKind::OtherNumber,
        };
    }
    if is_float(&plain) {
        return ScalarKind::OtherNumber;
    }
    ScalarKind::Str
}

/// An integer as Go's `strconv.ParseInt(s, 0, 64)` then `ParseUint` read
/// it: a sign, then decimal, `0x` hex, `0o` or leading-`0` octal, or `0b`
/// binary. Wider than `i64` so that an integer too large for it is still
/// told from a string.
fn parse_int(text: &str) -> Option<i128> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) = if let Some(rest) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (16, rest)
    } else if let Some(rest) = digits
        .strip_prefix("0o")
        .or_else(|| digits.strip_prefix("0O"))
    {
        (8, rest)
    } else if let Some(rest) = digits
        .strip_prefix("0b")
        .or_else(|| digits.strip_prefix("0B"))
    {
        (2, rest)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // Too large for a u128 is no integer for Go either: the float syntax
    // (decimal) or a string (the others) decides, as there.
    let value = u128::from_str_radix(digits, radix).ok()?;
    let value = i128::try_from(value).unwrap_or(i128::MAX);
    Some(if negative { -value } else { value })
}

/// yaml.v2's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == bytes.len()
}
