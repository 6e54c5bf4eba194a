//! Reading a pattern: `FromStr`, one phase at a time.

use std::str::FromStr;
use std::time::Duration;

use super::{
    ramp_count, steady_count, Pattern, PatternError, PatternErrorKind, Phase, DEFAULT_PHASE,
    MAX_REQUESTS, MAX_SPAN,
};

impl FromStr for Pattern {
    type Err = PatternError;

    fn from_str(s: &str) -> Result<Pattern, PatternError> {
        if s.trim().is_empty() {
            return Err(PatternError {
                column: 1,
                kind: PatternErrorKind::Empty,
            });
        }
        let mut phases = Vec::new();
        let mut total: u128 = 0;
        let mut cursor: u128 = 0;
        let mut end: u128 = 0;
        let mut start = 0;
        for piece in s.split(',') {
            let mut scanner = Scanner {
                src: s,
                pos: start,
                end: start + piece.len(),
            };
            let phase_start = {
                scanner.skip_ws();
                scanner.pos
            };
            let phase = scanner.phase()?;
            let at_phase = |kind| PatternError {
                column: column(s, phase_start),
                kind,
            };
            let (made, length) = match phase {
                Phase::Steady {
                    count,
                    per,
                    duration,
                } => (steady_count(count, per, duration), duration.as_nanos()),
                Phase::Ramp {
                    from,
                    to,
                    per,
                    duration,
                } => (ramp_count(from, to, per, duration), duration.as_nanos()),
                Phase::Idle { duration } => (0, duration.as_nanos()),
                Phase::Burst { count, at } => {
                    let when = at.map_or(cursor, |d| d.as_nanos());
                    end = end.max(when);
                    (u128::from(count), 0)
                }
            };
            cursor += length;
            end = end.max(cursor);
            if end > MAX_SPAN.as_nanos() {
                return Err(at_phase(PatternErrorKind::TooLong));
            }
            total += made;
            if total > MAX_REQUESTS as u128 {
                return Err(at_phase(PatternErrorKind::TooManyRequests {
                    requests: total,
                    max: MAX_REQUESTS,
                }));
            }
            phases.push(phase);
            start += piece.len() + 1;
        }
        Ok(Pattern {
            phases,
            // At most MAX_REQUESTS, checked above.
            len: usize::try_from(total).unwrap_or(MAX_REQUESTS),
        })
    }
}

/// The 1-based character column of byte offset `pos` in `src`.
fn column(src: &str, pos: usize) -> usize {
    src.get(..pos).map_or(pos, |s| s.chars().count()) + 1
}

/// A cursor over one phase, `src[pos..end]`, that reports errors by column
/// of the whole pattern.
struct Scanner<'a> {
    src: &'a str,
    pos: usize,
    end: usize,
}

impl<'a> Scanner<'a> {
    fn rest(&self) -> &str {
        self.src.get(self.pos..self.end).unwrap_or("")
    }

    fn error_at(&self, pos: usize, kind: PatternErrorKind) -> PatternError {
        PatternError {
            column: column(self.src, pos),
            kind,
        }
    }

    fn error(&self, kind: PatternErrorKind) -> PatternError {
        self.error_at(self.pos, kind)
    }

    /// The next token, for messages: a run of letters or digits, or one
    /// character.
    fn found(&self) -> String {
        let rest = self.rest().trim_end();
        let mut chars = rest.chars();
        match chars.next() {
            None => String::new(),
            Some(c) if c.is_alphanumeric() => rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
                .collect(),
            Some(c) => c.to_string(),
        }
    }

    fn expected(&self, expected: &'static str) -> PatternError {
        self.error(PatternErrorKind::Expected {
            expected,
            found: self.found(),
        })
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// Takes `token` (ASCII case-insensitively) and the whitespace after it.
    fn eat(&mut self, token: &str) -> bool {
        let rest = self.rest();
        match rest.get(..token.len()) {
            Some(head) if head.eq_ignore_ascii_case(token) => {
                self.pos += token.len();
                self.skip_ws();
                true
            }
            _ => false,
        }
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> (usize, &'a str) {
        let start = self.pos;
        let len = self
            .rest()
            .char_indices()
            .find(|&(_, c)| !keep(c))
            .map_or(self.rest().len(), |(i, _)| i);
        self.pos += len;
        let src: &'a str = self.src;
        (start, src.get(start..self.pos).unwrap_or(""))
    }

    fn finish(&mut self) -> Result<(), PatternError> {
        self.skip_ws();
        if self.rest().is_empty() {
            Ok(())
        } else {
            Err(self.expected("\",\" or the end of the pattern"))
        }
    }

    fn phase(&mut self) -> Result<Phase, PatternError> {
        if self.rest().is_empty() {
            return Err(self.error(PatternErrorKind::EmptyPhase));
        }
        let (start, name) = self.take_while(|c| c.is_alphanumeric() || c == '_' || c == '-');
        let name = name.to_ascii_lowercase();
        if !matches!(name.as_str(), "steady" | "ramp" | "idle" | "burst") {
            let name = if name.is_empty() { self.found() } else { name };
            return Err(self.error_at(start, PatternErrorKind::UnknownPhase { name }));
        }
        self.skip_ws();
        if !self.eat(":") {
            return Err(self.expected("\":\" after the phase name"));
        }
        let phase = match name.as_str() {
            "steady" => {
                let (count, per) = self.rate("the steady rate")?;
                Phase::Steady {
                    count,
                    per,
                    duration: self.for_duration()?,
                }
            }
            "ramp" => {
                let from = self.count()?;
                if !self.eat("..") {
                    return Err(self.expected("\"..\" between the ramp's two rates"));
                }
                let (to, per) = self.rate("")?;
                Phase::Ramp {
                    from,
                    to,
                    per,
                    duration: self.for_duration()?,
                }
            }
            "idle" => Phase::Idle {
                duration: self.duration()?,
            },
            _ => {
                let start = self.pos;
                let count = self.count()?;
                if count == 0 {
                    return Err(self.error_at(start, PatternErrorKind::Zero { what: "a burst" }));
                }
                let at = if self.eat("@") {
                    Some(self.duration()?)
                } else {
                    None
                };
                Phase::Burst { count, at }
            }
        };
        self.finish()?;
        Ok(phase)
    }

    /// `[for DURATION]`, [`DEFAULT_PHASE`] without it.
    fn for_duration(&mut self) -> Result<Duration, PatternError> {
        if self.rest().is_empty() {
            return Ok(DEFAULT_PHASE);
        }
        let rest = self.rest();
        let is_for = rest.len() >= 3
            && rest.is_char_boundary(3)
            && rest[..3].eq_ignore_ascii_case("for")
            && !rest[3..].starts_with(|c: char| c.is_alphanumeric());
        if !is_for {
            return Err(self.expected("\"for\" and a duration, \",\" or the end of the pattern"));
        }
        self.pos += 3;
        self.skip_ws();
        self.duration()
    }

    /// `COUNT "/" [COUNT] UNIT`; `zero` names the rate when 0 is refused.
    fn rate(&mut self, zero: &'static str) -> Result<(u64, Duration), PatternError> {
        let start = self.pos;
        let count = self.count()?;
        if count == 0 && !zero.is_empty() {
            return Err(self.error_at(start, PatternErrorKind::Zero { what: zero }));
        }
        if !self.eat("/") {
            return Err(self.expected("\"/\" and a time unit, as in \"50/s\""));
        }
        let multiple_at = self.pos;
        let multiple = if self.rest().starts_with(|c: char| c.is_ascii_digit()) {
            self.count()?
        } else {
            1
        };
        let unit = self.unit()?;
        let per = unit.saturating_mul(u32::try_from(multiple).unwrap_or(u32::MAX));
        if per.is_zero() {
            return Err(self.error_at(
                multiple_at,
                PatternErrorKind::Zero {
                    what: "the rate's period",
                },
            ));
        }
        if per > MAX_SPAN {
            return Err(self.error_at(multiple_at, PatternErrorKind::TooLong));
        }
        Ok((count, per))
    }

    /// `digit { digit | "_" }`, then whitespace.
    fn count(&mut self) -> Result<u64, PatternError> {
        if !self.rest().starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.expected("a whole number"));
        }
        let (start, text) = self.take_while(|c| c.is_ascii_digit() || c == '_');
        let digits: String = text.chars().filter(|&c| c != '_').collect();
        let value = digits.parse::<u64>().map_err(|_| {
            self.error_at(
                start,
                PatternErrorKind::InvalidNumber {
                    text: text.to_owned(),
                },
            )
        })?;
        self.skip_ws();
        Ok(value)
    }

    /// A time unit (see [`ratekeeper::duration`]), then whitespace.
    fn unit(&mut self) -> Result<Duration, PatternError> {
        let (start, unit) = self.take_while(|c| c.is_alphabetic());
        if unit.is_empty() {
            return Err(self.expected("a time unit (ms, s, m, h, d, w, ...)"));
        }
        let Some(duration) = ratekeeper::duration::unit(unit) else {
            return Err(self.error_at(
                start,
                PatternErrorKind::UnknownUnit {
                    unit: unit.to_owned(),
                },
            ));
        };
        self.skip_ws();
        Ok(duration)
    }

    /// `digits ["." digits] unit`, exact to the nanosecond, in the grammar
    /// of [`ratekeeper::duration`].
    fn duration(&mut self) -> Result<Duration, PatternError> {
        if !self.rest().starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.expected("a duration such as \"10s\" or \"250ms\""));
        }
        let digit = |c: char| c.is_ascii_digit() || c == '_';
        let (start, _) = self.take_while(digit);
        if self.rest().starts_with('.') && !self.rest().starts_with("..") {
            self.pos += 1;
            self.take_while(digit);
        }
        self.skip_ws();
        // The unit's own checks first, for its column; then the number and
        // unit as written, in the core's grammar.
        self.unit()?;
        let too_long = || self.error_at(start, PatternErrorKind::TooLong);
        let duration =
            ratekeeper::duration::parse(&self.src[start..self.pos]).map_err(|_| too_long())?;
        if duration > MAX_SPAN {
            return Err(too_long());
        }
        Ok(duration)
    }
}
