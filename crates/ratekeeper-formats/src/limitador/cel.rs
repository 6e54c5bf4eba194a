//! The part of CEL that Limitador's limits use, parsed and evaluated over a
//! request's descriptors.
//!
//! # Why a small parser, not a CEL crate
//!
//! Limitador evaluates its `conditions` and `variables` with the
//! `cel-interpreter` crate, over one binding: `descriptors`, the list of
//! the request's descriptors, each a map from entry key to value. Every
//! example in its documentation, its fixtures and the issue this answers
//! uses a handful of forms: `descriptors[N]['key']` or `descriptors[N].key`
//! compared with `==` or `!=` to a string, joined by `&&`. A hand-written
//! recursive-descent parser of those forms (plus `||`, `!`, parentheses and
//! the scalar literals, which cost a few lines more) is about 400 lines
//! with no dependency, and it lets this module promise what a service
//! facing hostile configuration needs: parsing and evaluation linear in
//! the expression's length, operators capped ([`MAX_OPERATORS`]), no panic on
//! any text (a property test and a fuzz target check it), and errors that
//! say which character is wrong. The maintained crate, `cel-interpreter`
//! (0.10; Limitador itself now uses its successor `cel` 0.12), has no C
//! or C++ dependency, but it parses with `cel-parser`, about 500 KB of
//! ANTLR-generated Rust on the `antlr4rust` 0.3 *beta* runtime, and adds
//! `nom`, `regex`, `chrono` and a second major version of `thiserror` to
//! the build of a crate that compiles on two shared cores, for functions
//! (`size`, `matches`, timestamps, macros) no Limitador limit file we
//! know of uses; and how deep its parser recurses, or how long it works
//! on a hostile expression, would not be this crate's to bound. When such
//! files appear, this module is the one place to swap.
//!
//! # The grammar
//!
//! ```text
//! expression := or
//! or         := and ( "||" and )*
//! and        := unary ( "&&" unary )*
//! unary      := "!" unary | equality
//! equality   := primary ( ("==" | "!=") primary )?
//! primary    := "(" expression ")" | STRING | INT | "true" | "false" | "null"
//!             | "descriptors" "[" INT "]" ( "." IDENT | "[" STRING "]" )
//! ```
//!
//! Strings are quoted with `'` or `"` and take CEL's simple escapes
//! (`\\`, `\'`, `\"`, `\n`, `\r`, `\t`); raw and triple-quoted strings,
//! bytes, floats and unsigned literals are refused with an error.
//!
//! # Evaluation, as `cel-interpreter` does it in Limitador
//!
//! An entry the descriptor lacks (or a descriptor the request lacks) makes
//! the whole expression *unresolved*: a condition holding it is false, a
//! variable holding it leaves the limit unapplied. `&&` and `||` stop at
//! their left side when it decides (`false &&`, `true ||`), as there, so
//! an entry on the right that is missing then does not matter; values of
//! different types are never equal.

use std::fmt;

use thiserror::Error;

/// An expression longer than this is refused: Limitador's own are a few
/// dozen bytes.
pub const MAX_EXPRESSION_BYTES: usize = 4096;

/// An expression with more operators (`==`, `!=`, `&&`, `||`, `!`) and
/// parentheses than this is refused: a tree's depth is at most its number
/// of operators and parentheses, so parsing and evaluating recurse a
/// bounded depth. Limitador's conditions have one or two.
pub const MAX_OPERATORS: usize = 64;

/// The largest descriptor index an expression may name.
pub const MAX_DESCRIPTOR_INDEX: u32 = 1_000_000;

/// Why an expression was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("at character {column} of the expression: {message}")]
pub struct CelError {
    /// The character (from 1) where the problem starts.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// A parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expr {
    /// A literal.
    Literal(Literal),
    /// `descriptors[index].key`.
    Entry {
        /// Which descriptor of the request.
        descriptor: u32,
        /// The entry's key.
        key: String,
    },
    /// `left == right`, or `left != right` when `negated`.
    Equal {
        left: Box<Expr>,
        right: Box<Expr>,
        negated: bool,
    },
    /// `left && right`.
    And(Box<Expr>, Box<Expr>),
    /// `left || right`.
    Or(Box<Expr>, Box<Expr>),
    /// `!inner`.
    Not(Box<Expr>),
}

/// A literal value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Literal {
    Str(String),
    Int(i64),
    Bool(bool),
    Null,
}

/// What an expression evaluates to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    Null,
}

impl fmt::Display for Value<'_> {
    /// The text Limitador gives a variable of this value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(text) => f.write_str(text),
            Value::Int(n) => write!(f, "{n}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Null => f.write_str("null"),
        }
    }
}

/// The static type of an expression, checked at load time so that a
/// condition that could never be a boolean is an error in the file, not a
/// failure per request (where Limitador answers an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Type {
    Bool,
    /// A string, number or null.
    Scalar,
}

impl Expr {
    /// Parses `source`.
    pub(crate) fn parse(source: &str) -> Result<Expr, CelError> {
        if source.len() > MAX_EXPRESSION_BYTES {
            return Err(CelError {
                column: 1,
                message: format!(
                    "{} bytes long, more than the {MAX_EXPRESSION_BYTES} an expression may have",
                    source.len()
                ),
            });
        }
        let tokens = lex(source)?;
        let mut parser = Parser {
            tokens: &tokens,
            at: 0,
            depth: 0,
            end_column: source.chars().count() + 1,
        };
        let expr = parser.or()?;
        match parser.peek() {
            None => Ok(expr),
            Some(token) => Err(CelError {
                column: token.column,
                message: format!("unexpected {}", token.kind.describe()),
            }),
        }
    }

    /// Its static type.
    pub(crate) fn kind(&self) -> Type {
        match self {
            Expr::Literal(Literal::Bool(_))
            | Expr::Equal { .. }
            | Expr::And(..)
            | Expr::Or(..)
            | Expr::Not(_) => Type::Bool,
            Expr::Literal(_) | Expr::Entry { .. } => Type::Scalar,
        }
    }

    /// The operands of `&&`, `||` and `!` that are not booleans: CEL
    /// refuses them when evaluated; refused here when loaded.
    pub(crate) fn first_non_bool_operand(&self) -> Option<&Expr> {
        match self {
            Expr::And(left, right) | Expr::Or(left, right) => {
                [left, right]
                    .into_iter()
                    .find_map(|side| match side.kind() {
                        Type::Bool => side.first_non_bool_operand(),
                        Type::Scalar => Some(side.as_ref()),
                    })
            }
            Expr::Not(inner) => match inner.kind() {
                Type::Bool => inner.first_non_bool_operand(),
                Type::Scalar => Some(inner.as_ref()),
            },
            Expr::Equal { left, right, .. } => left
                .first_non_bool_operand()
                .or_else(|| right.first_non_bool_operand()),
            Expr::Literal(_) | Expr::Entry { .. } => None,
        }
    }

    /// The value over `descriptors`; `None` when an entry it reads is
    /// missing (unresolved).
    pub(crate) fn eval<'a>(&'a self, descriptors: &Descriptors<'a>) -> Option<Value<'a>> {
        Some(match self {
            Expr::Literal(Literal::Str(text)) => Value::Str(text),
            Expr::Literal(Literal::Int(n)) => Value::Int(*n),
            Expr::Literal(Literal::Bool(b)) => Value::Bool(*b),
            Expr::Literal(Literal::Null) => Value::Null,
            Expr::Entry { descriptor, key } => Value::Str(descriptors.get(*descriptor, key)?),
            Expr::Equal {
                left,
                right,
                negated,
            } => {
                let equal = left.eval(descriptors)? == right.eval(descriptors)?;
                Value::Bool(equal != *negated)
            }
            Expr::And(left, right) => match left.eval(descriptors)? {
                Value::Bool(false) => Value::Bool(false),
                Value::Bool(true) => Value::Bool(right.eval(descriptors)? == Value::Bool(true)),
                _ => return None,
            },
            Expr::Or(left, right) => match left.eval(descriptors)? {
                Value::Bool(true) => Value::Bool(true),
                Value::Bool(false) => Value::Bool(right.eval(descriptors)? == Value::Bool(true)),
                _ => return None,
            },
            Expr::Not(inner) => match inner.eval(descriptors)? {
                Value::Bool(b) => Value::Bool(!b),
                _ => return None,
            },
        })
    }

    /// The descriptor indices it reads, in order of appearance.
    pub(crate) fn descriptors(&self, into: &mut Vec<u32>) {
        match self {
            Expr::Literal(_) => {}
            Expr::Entry { descriptor, .. } => into.push(*descriptor),
            Expr::Equal { left, right, .. } | Expr::And(left, right) | Expr::Or(left, right) => {
                left.descriptors(into);
                right.descriptors(into);
            }
            Expr::Not(inner) => inner.descriptors(into),
        }
    }
}

/// A request's descriptors as Limitador's expressions see them: each a map
/// from entry key to value, a key given twice taking its last value (as
/// Limitador builds its map).
#[derive(Debug, Default)]
pub struct Descriptors<'a> {
    maps: Vec<std::collections::HashMap<&'a str, &'a str>>,
}

impl<'a> Descriptors<'a> {
    /// The descriptors of a request, each given as its `(key, value)`
    /// entries in order.
    pub fn new<D, E>(descriptors: D) -> Descriptors<'a>
    where
        D: IntoIterator<Item = E>,
        E: IntoIterator<Item = (&'a str, &'a str)>,
    {
        Descriptors {
            maps: descriptors
                .into_iter()
                .map(|entries| entries.into_iter().collect())
                .collect(),
        }
    }

    /// The value of `key` in descriptor `index`.
    pub fn get(&self, index: u32, key: &str) -> Option<&'a str> {
        let map = self.maps.get(usize::try_from(index).ok()?)?;
        map.get(key).copied()
    }

    /// How many descriptors there are.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq)]
enum TokenKind {
    Ident(String),
    Str(String),
    Int(i64),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Dot,
    EqEq,
    NotEq,
    AndAnd,
    OrOr,
    Bang,
}

impl TokenKind {
    fn describe(&self) -> String {
        match self {
            TokenKind::Ident(name) => format!("`{name}`"),
            TokenKind::Str(_) => "a string".to_owned(),
            TokenKind::Int(n) => format!("the number {n}"),
            TokenKind::LParen => "`(`".to_owned(),
            TokenKind::RParen => "`)`".to_owned(),
            TokenKind::LBracket => "`[`".to_owned(),
            TokenKind::RBracket => "`]`".to_owned(),
            TokenKind::Dot => "`.`".to_owned(),
            TokenKind::EqEq => "`==`".to_owned(),
            TokenKind::NotEq => "`!=`".to_owned(),
            TokenKind::AndAnd => "`&&`".to_owned(),
            TokenKind::OrOr => "`||`".to_owned(),
            TokenKind::Bang => "`!`".to_owned(),
        }
    }
}

#[derive(Clone, Debug)]
struct Token {
    kind: TokenKind,
    /// The character (from 1) where it starts.
    column: usize,
}

fn error<T>(column: usize, message: impl Into<String>) -> Result<T, CelError> {
    Err(CelError {
        column,
        message: message.into(),
    })
}

/// The tokens of `source`, in one pass.
fn lex(source: &str) -> Result<Vec<Token>, CelError> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        let two = |second: char| chars.get(i + 1) == Some(&second);
        let (kind, width) = match c {
            ' ' | '\t' | '\n' | '\r' => {
                i += 1;
                continue;
            }
            '(' => (TokenKind::LParen, 1),
            ')' => (TokenKind::RParen, 1),
            '[' => (TokenKind::LBracket, 1),
            ']' => (TokenKind::RBracket, 1),
            '.' => (TokenKind::Dot, 1),
            '=' if two('=') => (TokenKind::EqEq, 2),
            '!' if two('=') => (TokenKind::NotEq, 2),
            '!' => (TokenKind::Bang, 1),
            '&' if two('&') => (TokenKind::AndAnd, 2),
            '|' if two('|') => (TokenKind::OrOr, 2),
            '\'' | '"' => {
                let (text, end) = string(&chars, i)?;
                tokens.push(Token {
                    kind: TokenKind::Str(text),
                    column,
                });
                i = end;
                continue;
            }
            '0'..='9' => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                if i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                    return error(
                        i + 1,
                        "only whole decimal numbers are supported (no floats, hex or `u`)",
                    );
                }
                let digits: String = chars[start..i].iter().collect();
                let Ok(n) = digits.parse::<i64>() else {
                    return error(column, format!("{digits} is too large a number"));
                };
                tokens.push(Token {
                    kind: TokenKind::Int(n),
                    column,
                });
                continue;
            }
            c if c == '_' || c.is_ascii_alphabetic() => {
                let start = i;
                while i < chars.len() && (chars[i] == '_' || chars[i].is_ascii_alphanumeric()) {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if matches!(chars.get(i), Some('\'' | '"')) {
                    return error(
                        i + 1,
                        format!("`{name}` before a quote: raw and byte strings are not supported"),
                    );
                }
                tokens.push(Token {
                    kind: TokenKind::Ident(name),
                    column,
                });
                continue;
            }
            other => {
                return error(
                    column,
                    format!(
                        "unexpected {other:?}: supported are ==, !=, &&, ||, !, parentheses, \
                         strings, whole numbers, true, false, null and descriptors[N]['key']"
                    ),
                )
            }
        };
        tokens.push(Token { kind, column });
        i += width;
    }
    Ok(tokens)
}

/// The string literal starting at `chars[start]` (a quote), and the index
/// after it.
fn string(chars: &[char], start: usize) -> Result<(String, usize), CelError> {
    let quote = chars[start];
    if chars.get(start + 1) == Some(&quote) && chars.get(start + 2) == Some(&quote) {
        return error(start + 1, "triple-quoted strings are not supported");
    }
    let mut text = String::new();
    let mut i = start + 1;
    loop {
        match chars.get(i) {
            None | Some('\n') | Some('\r') => {
                return error(start + 1, "the string is not closed");
            }
            Some(&c) if c == quote => return Ok((text, i + 1)),
            Some('\\') => {
                let escaped = match chars.get(i + 1) {
                    Some('\\') => '\\',
                    Some('\'') => '\'',
                    Some('"') => '"',
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('t') => '\t',
                    _ => {
                        return error(
                            i + 1,
                            "unsupported escape: \\\\, \\', \\\", \\n, \\r and \\t are",
                        )
                    }
                };
                text.push(escaped);
                i += 2;
            }
            Some(&c) => {
                text.push(c);
                i += 1;
            }
        }
    }
}

struct Parser<'t> {
    tokens: &'t [Token],
    at: usize,
    depth: usize,
    /// The column just past the text, for "ends early" errors.
    end_column: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        if token.is_some() {
            self.at += 1;
        }
        token
    }

    fn eat(&mut self, kind: &TokenKind) -> bool {
        if self.peek().is_some_and(|token| &token.kind == kind) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, kind: TokenKind) -> Result<(), CelError> {
        match self.next() {
            Some(token) if token.kind == kind => Ok(()),
            Some(token) => error(
                token.column,
                format!(
                    "expected {}, found {}",
                    kind.describe(),
                    token.kind.describe()
                ),
            ),
            None => error(
                self.end_column,
                format!("expected {}, found the end", kind.describe()),
            ),
        }
    }

    /// Counts one operator or pair of parentheses, refusing to pass
    /// [`MAX_OPERATORS`].
    fn enter(&mut self) -> Result<(), CelError> {
        self.depth += 1;
        if self.depth > MAX_OPERATORS {
            let column = self.peek().map_or(self.end_column, |token| token.column);
            return error(
                column,
                format!("more than {MAX_OPERATORS} operators and parentheses"),
            );
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, CelError> {
        let mut left = self.and()?;
        while self.eat(&TokenKind::OrOr) {
            self.enter()?;
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, CelError> {
        let mut left = self.unary()?;
        while self.eat(&TokenKind::AndAnd) {
            self.enter()?;
            let right = self.unary()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, CelError> {
        if self.eat(&TokenKind::Bang) {
            self.enter()?;
            let inner = self.unary()?;
            return Ok(Expr::Not(Box::new(inner)));
        }
        let left = self.primary()?;
        let negated = if self.eat(&TokenKind::EqEq) {
            false
        } else if self.eat(&TokenKind::NotEq) {
            true
        } else {
            return Ok(left);
        };
        self.enter()?;
        let right = self.primary()?;
        if let Some(token) = self.peek() {
            if matches!(token.kind, TokenKind::EqEq | TokenKind::NotEq) {
                return error(token.column, "comparisons do not chain: add parentheses");
            }
        }
        Ok(Expr::Equal {
            left: Box::new(left),
            right: Box::new(right),
            negated,
        })
    }

    fn primary(&mut self) -> Result<Expr, CelError> {
        let Some(token) = self.next() else {
            return error(self.end_column, "the expression ends early");
        };
        match token.kind {
            TokenKind::LParen => {
                self.enter()?;
                let inner = self.or()?;
                self.expect(TokenKind::RParen)?;
                Ok(inner)
            }
            TokenKind::Str(text) => Ok(Expr::Literal(Literal::Str(text))),
            TokenKind::Int(n) => Ok(Expr::Literal(Literal::Int(n))),
            TokenKind::Ident(name) => match name.as_str() {
                "true" => Ok(Expr::Literal(Literal::Bool(true))),
                "false" => Ok(Expr::Literal(Literal::Bool(false))),
                "null" => Ok(Expr::Literal(Literal::Null)),
                "descriptors" => self.entry(token.column),
                _ => error(
                    token.column,
                    format!("unknown name `{name}`: Limitador's expressions read `descriptors`"),
                ),
            },
            other => error(token.column, format!("unexpected {}", other.describe())),
        }
    }

    /// `[N]` then `.key` or `['key']`, after `descriptors`.
    fn entry(&mut self, column: usize) -> Result<Expr, CelError> {
        let whole = "`descriptors` is read as descriptors[N]['key'] or descriptors[N].key";
        if !self.eat(&TokenKind::LBracket) {
            return error(column, whole);
        }
        let descriptor = match self.next() {
            Some(Token {
                kind: TokenKind::Int(n),
                column,
            }) => match u32::try_from(n) {
                Ok(n) if n <= MAX_DESCRIPTOR_INDEX => n,
                _ => {
                    return error(
                        column,
                        format!("descriptor index {n} is past {MAX_DESCRIPTOR_INDEX}"),
                    )
                }
            },
            Some(token) => return error(token.column, "a descriptor index is a whole number"),
            None => return error(self.end_column, whole),
        };
        self.expect(TokenKind::RBracket)?;
        let key = match self.next() {
            Some(Token {
                kind: TokenKind::Dot,
                ..
            }) => match self.next() {
                Some(Token {
                    kind: TokenKind::Ident(key),
                    ..
                }) => key,
                Some(token) => return error(token.column, "expected an entry's key after `.`"),
                None => return error(self.end_column, "expected an entry's key after `.`"),
            },
            Some(Token {
                kind: TokenKind::LBracket,
                ..
            }) => {
                let key = match self.next() {
                    Some(Token {
                        kind: TokenKind::Str(key),
                        ..
                    }) => key,
                    Some(token) => {
                        return error(token.column, "an entry's key in brackets is a string")
                    }
                    None => return error(self.end_column, whole),
                };
                self.expect(TokenKind::RBracket)?;
                key
            }
            Some(token) => return error(token.column, whole),
            None => return error(self.end_column, whole),
        };
        if let Some(token) = self.peek() {
            if matches!(
                token.kind,
                TokenKind::Dot | TokenKind::LBracket | TokenKind::LParen
            ) {
                return error(
                    token.column,
                    "an entry's value is a string: it has no fields, items or methods here",
                );
            }
        }
        Ok(Expr::Entry { descriptor, key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(entries: &'a [&'a [(&'a str, &'a str)]]) -> Descriptors<'a> {
        Descriptors::new(entries.iter().map(|d| d.iter().copied()))
    }

    fn test(source: &str, entries: &[&[(&str, &str)]]) -> Option<bool> {
        let expr = Expr::parse(source).unwrap();
        let descriptors = request(entries);
        match expr.eval(&descriptors)? {
            Value::Bool(b) => Some(b),
            other => panic!("{source} gave {other:?}"),
        }
    }

    #[test]
    fn both_accessors_read_an_entry() {
        let get = &[&[("req.method", "GET"), ("user", "alice")][..]][..];
        assert_eq!(
            test("descriptors[0]['req.method'] == 'GET'", get),
            Some(true)
        );
        assert_eq!(test("descriptors[0].user == \"alice\"", get), Some(true));
        assert_eq!(test("descriptors[0].user != 'alice'", get), Some(false));
        assert_eq!(test("descriptors[0].missing == 'x'", get), None);
        assert_eq!(test("descriptors[1].user == 'alice'", get), None);
    }

    #[test]
    fn logic_short_circuits_as_limitador_does() {
        let d = &[&[("a", "1")][..]][..];
        assert_eq!(
            test("descriptors[0].a == '1' && descriptors[0].a != '2'", d),
            Some(true)
        );
        assert_eq!(
            test("descriptors[0].a == '2' && descriptors[0].b == 'x'", d),
            Some(false)
        );
        assert_eq!(
            test("descriptors[0].a == '1' && descriptors[0].b == 'x'", d),
            None
        );
        assert_eq!(
            test("descriptors[0].a == '1' || descriptors[0].b == 'x'", d),
            Some(true)
        );
        assert_eq!(
            test("descriptors[0].b == 'x' || descriptors[0].a == '1'", d),
            None
        );
        assert_eq!(test("!(descriptors[0].a == '2')", d), Some(true));
        assert_eq!(test("descriptors[0].a == 1", d), Some(false));
        assert_eq!(test("true && (false || 'x' == 'x')", d), Some(true));
    }

    #[test]
    fn duplicate_keys_take_the_last_value() {
        let d = &[&[("k", "first"), ("k", "last")][..]][..];
        assert_eq!(test("descriptors[0].k == 'last'", d), Some(true));
    }

    #[test]
    fn errors_name_the_character() {
        let cases = [
            ("descriptors[0].a = 'x'", 18),
            ("descriptors[0]['a'] == 'x", 24),
            ("descriptors.a == 'x'", 1),
            ("descriptors[0].a == 'x' &&", 27),
            ("size(descriptors[0].a) == 1", 1),
            ("descriptors[0].a == 1.5", 22),
            ("request.path == '/'", 1),
            ("descriptors[0].a == 'x' == true", 25),
            ("descriptors[-1].a == 'x'", 13),
        ];
        for (source, column) in cases {
            let error = Expr::parse(source).unwrap_err();
            assert_eq!(error.column, column, "{source}: {error}");
        }
    }

    #[test]
    fn operators_are_capped() {
        let deep = format!("{}true{}", "(".repeat(70), ")".repeat(70));
        assert!(Expr::parse(&deep)
            .unwrap_err()
            .message
            .contains("operators"));
        let bangs = format!("{}true", "!".repeat(10_000));
        assert!(Expr::parse(&bangs).is_err());
        let long = "true && ".repeat(1_000) + "true";
        assert!(Expr::parse(&long).is_err());
        let shallow = format!("{}true{}", "(".repeat(10), ")".repeat(10));
        assert!(Expr::parse(&shallow).is_ok());
    }

    #[test]
    fn escapes_and_quotes() {
        let d = &[&[("q", "it's \"x\"\n")][..]][..];
        assert_eq!(test(r#"descriptors[0].q == 'it\'s "x"\n'"#, d), Some(true));
        assert_eq!(test(r#"descriptors[0].q == "it's \"x\"\n""#, d), Some(true));
    }
}
