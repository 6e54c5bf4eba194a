//! Bearer tokens: where they come from (a file of one or more, or one
//! environment variable), how a token file is read, and how a presented
//! token is compared without its timing telling how close it came.
//!
//! Only SHA-256 digests of the tokens are kept. A presented token is
//! digested and compared with every stored digest in full, so the time a
//! comparison takes depends on neither the token nor where it differs.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use thiserror::Error;

/// The fewest characters a token may have: shorter ones can be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

/// The most tokens one file may hold (two or three during a rotation).
pub const MAX_TOKENS: usize = 64;

/// The largest token file read, in bytes: a token file holds a few lines,
/// and a path naming something else (`/dev/zero`) must not be read whole.
pub const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// Where a door's tokens come from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenSource {
    /// A file of tokens, one per line (`token_file`).
    File(PathBuf),
    /// One token in an environment variable (`token_env`).
    Env(String),
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::File(path) => write!(f, "the token file {}", path.display()),
            TokenSource::Env(name) => write!(f, "the environment variable {name}"),
        }
    }
}

/// Why a door's tokens could not be read. The messages name lines, never
/// a token's text.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenError {
    /// Nothing but blank lines and comments.
    #[error("holds no token (only blank lines and # comments)")]
    Empty,
    /// The environment variable is not set.
    #[error("is not set")]
    Unset,
    /// A token holds a space, a control character or a character that is
    /// not ASCII: it could not travel in an `Authorization` header.
    #[error("{}a token holds a space or a character that is not visible ASCII", at(*line))]
    Invalid {
        /// The line, in a file.
        line: Option<usize>,
    },
    /// A token shorter than [`MIN_TOKEN_LEN`].
    #[error(
        "{}the token is {len} characters; use at least {MIN_TOKEN_LEN} (`openssl rand -hex 32` makes one)",
        at(*line)
    )]
    TooShort {
        /// The line, in a file.
        line: Option<usize>,
        /// Its length.
        len: usize,
    },
    /// More than [`MAX_TOKENS`] tokens.
    #[error("holds more than {MAX_TOKENS} tokens")]
    TooMany,
    /// A file larger than [`MAX_TOKEN_FILE_BYTES`].
    #[error("is larger than {MAX_TOKEN_FILE_BYTES} bytes; a token file holds a few lines")]
    TooLarge,
    /// A file that is not UTF-8 text.
    #[error("is not UTF-8 text")]
    NotText,
    /// The file could not be read.
    #[error("cannot be read: {0}")]
    Read(String),
}

/// `line N: ` for a line of a file, nothing for an environment variable.
fn at(line: Option<usize>) -> String {
    line.map_or_else(String::new, |line| format!("line {line}: "))
}

/// The tokens of a token file's text: one per line, surrounding spaces
/// ignored, blank lines and lines starting with `#` skipped. Each must be
/// at least [`MIN_TOKEN_LEN`] visible ASCII characters; at most
/// [`MAX_TOKENS`] of them.
///
/// ```
/// use ratekeeper_server::access::parse_tokens;
///
/// let text = "# the new one\n0123456789abcdef0123\n\n  fedcba9876543210fedc  \n";
/// assert_eq!(parse_tokens(text)?, ["0123456789abcdef0123", "fedcba9876543210fedc"]);
/// assert!(parse_tokens("# nothing yet\n").is_err());
/// # Ok::<(), ratekeeper_server::access::TokenError>(())
/// ```
pub fn parse_tokens(text: &str) -> Result<Vec<&str>, TokenError> {
    let mut tokens = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let token = line.trim();
        if token.is_empty() || token.starts_with('#') {
            continue;
        }
        check_token(token, Some(index + 1))?;
        if tokens.len() == MAX_TOKENS {
            return Err(TokenError::TooMany);
        }
        tokens.push(token);
    }
    if tokens.is_empty() {
        return Err(TokenError::Empty);
    }
    Ok(tokens)
}

/// Whether `token` may be a token: visible ASCII, long enough.
fn check_token(token: &str, line: Option<usize>) -> Result<(), TokenError> {
    if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(TokenError::Invalid { line });
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenError::TooShort {
            line,
            len: token.len(),
        });
    }
    Ok(())
}

/// The tokens one door accepts: their SHA-256 digests and where they came
/// from. Its `Debug` shows the source and the count.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSet {
    source: TokenSource,
    digests: Vec<[u8; 32]>,
}

impl fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSet")
            .field("source", &self.source)
            .field("tokens", &self.digests.len())
            .finish()
    }
}

impl TokenSet {
    /// The set of `tokens`, said to come from `source` (for embedding and
    /// tests; the configuration reads them with [`TokenSet::load`]).
    pub fn new<T: AsRef<[u8]>>(
        source: TokenSource,
        tokens: impl IntoIterator<Item = T>,
    ) -> TokenSet {
        TokenSet {
            source,
            digests: tokens
                .into_iter()
                .map(|token| digest(token.as_ref()))
                .collect(),
        }
    }

    /// Reads the tokens of `source`: the file (see [`parse_tokens`]), or
    /// the environment variable among `vars` (one token, surrounding
    /// spaces ignored).
    pub fn load(source: TokenSource, vars: &[(String, String)]) -> Result<TokenSet, TokenError> {
        let set = match &source {
            TokenSource::File(path) => {
                let text = read_capped(path)?;
                let tokens = parse_tokens(&text)?;
                TokenSet::new(source.clone(), tokens)
            }
            TokenSource::Env(name) => {
                let value = vars
                    .iter()
                    .find(|(var, _)| var == name)
                    .map(|(_, value)| value.trim())
                    .ok_or(TokenError::Unset)?;
                if value.is_empty() {
                    return Err(TokenError::Empty);
                }
                check_token(value, None)?;
                TokenSet::new(source.clone(), [value])
            }
        };
        Ok(set)
    }

    /// Where the tokens came from.
    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether none is (a set made by [`TokenSet::new`] of nothing, which
    /// accepts nothing).
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Whether `presented` is one of the tokens. Every stored digest is
    /// compared in full, whatever matched.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let presented = digest(presented);
        self.digests
            .iter()
            .fold(false, |found, stored| found | same(stored, &presented))
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// Whether two digests are equal, looking at every byte.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The text of the file at `path`, read up to [`MAX_TOKEN_FILE_BYTES`].
fn read_capped(path: &Path) -> Result<String, TokenError> {
    let file = std::fs::File::open(path).map_err(|error| TokenError::Read(error.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| TokenError::Read(error.to_string()))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(TokenError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| TokenError::NotText)
}

/// A digest of what the files at `paths` hold now (a file that cannot be
/// read counts as its error), for the reloader to see a token file change
/// without keeping its text.
pub(crate) fn fingerprint<'a>(paths: impl IntoIterator<Item = &'a Path>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for path in paths {
        hasher.update(path.as_os_str().as_encoded_bytes());
        hasher.update([0]);
        match read_capped(path) {
            Ok(text) => {
                hasher.update([1]);
                hasher.update(digest(text.as_bytes()));
            }
            Err(error) => {
                hasher.update([2]);
                hasher.update(error.to_string().as_bytes());
            }
        }
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "0123456789abcdef";
    const B: &str = "fedcba9876543210-rotated";

    #[test]
    fn lines_comments_and_blanks() {
        let text = format!("# header\n\n  {A}  \r\n\t# {B}\n{B}\n");
        assert_eq!(parse_tokens(&text), Ok(vec![A, B]));
    }

    #[test]
    fn nothing_but_comments_is_empty() {
        assert_eq!(parse_tokens(""), Err(TokenError::Empty));
        assert_eq!(parse_tokens("\n  \n# x\n"), Err(TokenError::Empty));
    }

    #[test]
    fn bad_tokens_name_their_line_not_their_text() {
        let error = parse_tokens(&format!("{A}\nshort\n")).unwrap_err();
        assert_eq!(
            error,
            TokenError::TooShort {
                line: Some(2),
                len: 5
            }
        );
        assert!(!error.to_string().contains("short\n"));
        let error = parse_tokens(&format!("# x\n{A} {A}\n")).unwrap_err();
        assert_eq!(error, TokenError::Invalid { line: Some(2) });
        assert!(!error.to_string().contains(A), "{error}");
        assert!(parse_tokens("0123456789abcdéf").is_err());
    }

    #[test]
    fn too_many_tokens() {
        let text: String = (0..=MAX_TOKENS).map(|i| format!("{A}{i}\n")).collect();
        assert_eq!(parse_tokens(&text), Err(TokenError::TooMany));
        let text: String = (0..MAX_TOKENS).map(|i| format!("{A}{i}\n")).collect();
        assert_eq!(parse_tokens(&text).map(|t| t.len()), Ok(MAX_TOKENS));
    }

    #[test]
    fn accepts_only_its_tokens() {
        let set = TokenSet::new(TokenSource::Env("X".into()), [A, B]);
        assert!(set.accepts(A.as_bytes()));
        assert!(set.accepts(B.as_bytes()));
        assert!(!set.accepts(b""));
        assert!(!set.accepts(&A.as_bytes()[..15]));
        assert!(!set.accepts(format!("{A}x").as_bytes()));
        let debug = format!("{set:?}");
        assert!(!debug.contains(A) && debug.contains("tokens: 2"), "{debug}");
    }

    #[test]
    fn env_tokens_are_one_trimmed_value() {
        let source = TokenSource::Env("TOKEN".into());
        let vars = |value: &str| vec![("TOKEN".to_owned(), value.to_owned())];
        let set = TokenSet::load(source.clone(), &vars(&format!(" {A}\n"))).unwrap();
        assert!(set.accepts(A.as_bytes()));
        assert_eq!(
            TokenSet::load(source.clone(), &[]).unwrap_err(),
            TokenError::Unset
        );
        assert_eq!(
            TokenSet::load(source.clone(), &vars("  ")).unwrap_err(),
            TokenError::Empty
        );
        assert_eq!(
            TokenSet::load(source, &vars(&format!("{A}\n{B}"))).unwrap_err(),
            TokenError::Invalid { line: None }
        );
    }

    #[test]
    fn files_are_read_up_to_a_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("{A}\n")).unwrap();
        let set = TokenSet::load(TokenSource::File(path.clone()), &[]).unwrap();
        assert!(set.accepts(A.as_bytes()));
        let before = fingerprint([path.as_path()]);
        std::fs::write(&path, vec![b'a'; MAX_TOKEN_FILE_BYTES as usize + 1]).unwrap();
        assert_eq!(
            TokenSet::load(TokenSource::File(path.clone()), &[]).unwrap_err(),
            TokenError::TooLarge
        );
        assert_ne!(fingerprint([path.as_path()]), before);
        let missing = dir.path().join("missing");
        assert!(matches!(
            TokenSet::load(TokenSource::File(missing), &[]),
            Err(TokenError::Read(_))
        ));
    }

    proptest! {
        #[test]
        fn the_parser_never_panics(text in any::<String>()) {
            let _ = parse_tokens(&text);
        }

        #[test]
        fn parsed_tokens_are_visible_ascii_lines(
            lines in prop::collection::vec("[ -~\t]{0,40}", 0..12),
        ) {
            let text = lines.join("\n");
            if let Ok(tokens) = parse_tokens(&text) {
                prop_assert!(!tokens.is_empty() && tokens.len() <= MAX_TOKENS);
                for token in tokens {
                    prop_assert!(token.len() >= MIN_TOKEN_LEN);
                    prop_assert!(token.bytes().all(|b| b.is_ascii_graphic()));
                    prop_assert!(!token.starts_with('#'));
                }
            }
        }
    }
}
