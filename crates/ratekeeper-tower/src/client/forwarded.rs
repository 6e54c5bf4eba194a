//! RFC 7239 `Forwarded` headers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

/// Who a `for=` or `by=` parameter names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    /// An address, with the port if one was given.
    Ip(IpAddr, Option<u16>),
    /// `unknown`: the proxy did not know.
    Unknown,
    /// An obfuscated identifier such as `_hidden` (and its port, if any).
    Obfuscated(String),
}

/// One element of a `Forwarded` header: what one proxy recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ForwardedElement {
    /// `for=`: the node the proxy received the request from.
    pub for_node: Option<Node>,
    /// `by=`: the proxy's own interface.
    pub by_node: Option<Node>,
    /// `host=`: the Host the proxy received.
    pub host: Option<String>,
    /// `proto=`: the scheme the proxy received.
    pub proto: Option<String>,
}

/// Why a `Forwarded` header could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ForwardedError {
    /// A pair without `=`, or with an empty name.
    #[error("a Forwarded pair must be name=value")]
    MissingValue,
    /// A character that is neither a token character nor allowed here.
    #[error("unexpected character {0:?} in a Forwarded header")]
    UnexpectedCharacter(char),
    /// A quoted string without its closing quote.
    #[error("unterminated quoted string in a Forwarded header")]
    UnterminatedQuote,
    /// The same parameter twice in one element (RFC 7239, section 4).
    #[error("parameter {0:?} appears twice in one Forwarded element")]
    Duplicate(String),
    /// A `for=` or `by=` value that is not a node.
    #[error("{0:?} is not an address, \"unknown\" or an obfuscated identifier")]
    BadNode(String),
    /// The header is too long to be a proxy's.
    #[error("Forwarded header longer than {0} bytes")]
    TooLong(usize),
}

/// Headers longer than this are refused rather than parsed.
pub(crate) const MAX_FORWARDED_LEN: usize = 8 * 1024;

/// Parses a `Forwarded` header value into its elements, in order (the
/// nearest proxy's last). Parameter names are case-insensitive; values are
/// tokens or quoted strings; unknown parameters are skipped.
///
/// ```
/// use std::net::IpAddr;
/// use ratekeeper_tower::client::{parse_forwarded, Node};
///
/// let elements = parse_forwarded(r#"for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711""#)?;
/// assert_eq!(elements.len(), 2);
/// assert_eq!(elements[0].proto.as_deref(), Some("http"));
/// let ip: IpAddr = "2001:db8:cafe::17".parse()?;
/// assert_eq!(elements[1].for_node, Some(Node::Ip(ip, Some(4711))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_forwarded(value: &str) -> Result<Vec<ForwardedElement>, ForwardedError> {
    if value.len() > MAX_FORWARDED_LEN {
        return Err(ForwardedError::TooLong(MAX_FORWARDED_LEN));
    }
    let mut parser = Parser { rest: value };
    let mut elements = Vec::new();
    loop {
        elements.push(parser.element()?);
        parser.skip_spaces();
        match parser.next_char() {
            None => return Ok(elements),
            Some(',') => continue,
            Some(other) => return Err(ForwardedError::UnexpectedCharacter(other)),
        }
    }
}

/// Parses the value of a `for=` or `by=` parameter (already unquoted).
pub fn parse_node(value: &str) -> Result<Node, ForwardedError> {
    let bad = || ForwardedError::BadNode(value.to_owned());
    if value.eq_ignore_ascii_case("unknown") {
        return Ok(Node::Unknown);
    }
    if value.starts_with('_') {
        return obfuscated(value)
            .then(|| Node::Obfuscated(value.to_owned()))
            .ok_or_else(bad);
    }
    if let Some(bracketed) = value.strip_prefix('[') {
        let (address, after) = bracketed.split_once(']').ok_or_else(bad)?;
        let ip = address.parse::<Ipv6Addr>().map_err(|_| bad())?;
        let port = if after.is_empty() {
            None
        } else {
            port(after.strip_prefix(':').ok_or_else(bad)?).ok_or_else(bad)?
        };
        return Ok(Node::Ip(IpAddr::V6(ip), port));
    }
    let (address, port_text) = match value.split_once(':') {
        Some((address, port_text)) => (address, Some(port_text)),
        None => (value, None),
    };
    let ip = address.parse::<Ipv4Addr>().map_err(|_| bad())?;
    let port = match port_text {
        None => None,
        Some(text) => port(text).ok_or_else(bad)?,
    };
    Ok(Node::Ip(IpAddr::V4(ip), port))
}

/// A node port: digits (a port number) or an obfuscated `_name` (no number).
fn port(text: &str) -> Option<Option<u16>> {
    if text.starts_with('_') {
        return obfuscated(text).then_some(None);
    }
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().map(Some)
}

/// `_` then letters, digits, `.`, `_` or `-`.
fn obfuscated(text: &str) -> bool {
    text.len() > 1
        && text.starts_with('_')
        && text[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

struct Parser<'a> {
    rest: &'a str,
}

impl<'a> Parser<'a> {
    fn skip_spaces(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t']);
    }

    fn peek(&self) -> Option<char> {
        self.rest.chars().next()
    }

    fn next_char(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.rest = &self.rest[c.len_utf8()..];
        Some(c)
    }

    fn token(&mut self) -> &'a str {
        let end = self
            .rest
            .find(|c: char| !is_token_char(c))
            .unwrap_or(self.rest.len());
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        token
    }

    fn quoted(&mut self) -> Result<String, ForwardedError> {
        let mut value = String::new();
        loop {
            match self.next_char() {
                None => return Err(ForwardedError::UnterminatedQuote),
                Some('"') => return Ok(value),
                Some('\\') => {
                    value.push(self.next_char().ok_or(ForwardedError::UnterminatedQuote)?)
                }
                Some(c) if c == '\t' || (' '..='~').contains(&c) => value.push(c),
                Some(c) => return Err(ForwardedError::UnexpectedCharacter(c)),
            }
        }
    }

    /// `[pair] *(";" [pair])`
    fn element(&mut self) -> Result<ForwardedElement, ForwardedError> {
        let mut element = ForwardedElement::default();
        loop {
            self.skip_spaces();
            match self.peek() {
                None | Some(',') => return Ok(element),
                Some(';') => {
                    self.next_char();
                    continue;
                }
                Some(_) => {}
            }
            let name = self.token();
            if name.is_empty() {
                return Err(self.peek().map_or(
                    ForwardedError::MissingValue,
                    ForwardedError::UnexpectedCharacter,
                ));
            }
            if self.next_char() != Some('=') {
                return Err(ForwardedError::MissingValue);
            }
            let value = match self.peek() {
                Some('"') => {
                    self.next_char();
                    self.quoted()?
                }
                _ => {
                    let token = self.token();
                    if token.is_empty() {
                        return Err(ForwardedError::MissingValue);
                    }
                    token.to_owned()
                }
            };
            let slot = match name.to_ascii_lowercase().as_str() {
                "for" => {
                    let node = parse_node(&value)?;
                    set(&mut element.for_node, node, name)?;
                    None
                }
                "by" => {
                    let node = parse_node(&value)?;
                    set(&mut element.by_node, node, name)?;
                    None
                }
                "host" => Some((&mut element.host, value)),
                "proto" => Some((&mut element.proto, value)),
                _ => None,
            };
            if let Some((field, value)) = slot {
                set(field, value, name)?;
            }
            self.skip_spaces();
            match self.peek() {
                None | Some(',') => return Ok(element),
                Some(';') => {
                    self.next_char();
                }
                Some(other) => return Err(ForwardedError::UnexpectedCharacter(other)),
            }
        }
    }
}

fn set<T>(field: &mut Option<T>, value: T, name: &str) -> Result<(), ForwardedError> {
    if field.is_some() {
        return Err(ForwardedError::Duplicate(name.to_ascii_lowercase()));
    }
    *field = Some(value);
    Ok(())
}
