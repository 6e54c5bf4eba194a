//! Reservations: units held for a request whose real cost is known only
//! when it ends (an LLM's answer, a streamed download), then settled.
//!
//! A check of zero units would let every concurrent request through before
//! any of them reported what it cost. [`Store::reserve`](super::Store::reserve)
//! instead decides an *estimate* as a check does, and holds it: the units
//! are taken now, and the store remembers the reservation until its
//! `ttl`. When the request ends, [`Store::commit`](super::Store::commit)
//! settles it at the real cost (the difference is given back, or the excess
//! charged as a [report](super::Store::report), which may overdraw), or
//! [`Store::cancel`](super::Store::cancel) gives the estimate back. A
//! reservation nobody settles within its `ttl` is settled at its estimate:
//! the units stay taken, and the store forgets it.
//!
//! The reservation lives in the store, beside the key's state: on SQLite
//! and Redis it outlives the process that made it, and any process sharing
//! the store can settle it. Its id is 128 random bits, so it cannot be
//! guessed, and settling removes it, so it is settled once: a second
//! settle, or one after the `ttl`, is
//! [`ReservationError::Unknown`]. A key holds at most
//! [`MAX_OPEN_RESERVATIONS`] open at once.
//!
//! ```
//! use std::time::Duration;
//! use ratekeeper::{clock::ManualClock, Limit, MemoryStore, Store, Timestamp, TokenBucket};
//!
//! # futures_executor::block_on(async {
//! // A clock that stands still: the bucket refills nothing meanwhile.
//! let store = MemoryStore::builder().clock(ManualClock::new(Timestamp::ZERO)).build()?;
//! let tokens = Limit::new("llm-tokens", TokenBucket::per_minute(10_000)?)?;
//! // Before the call: hold 1,000 tokens, the usual answer's size.
//! let reserved = store.reserve(&tokens, b"key-1", 1_000, Duration::from_secs(60)).await?;
//! assert!(reserved.outcome.is_allowed());
//! let reservation = reserved.reservation.expect("held");
//! assert_eq!(store.peek(&tokens, b"key-1").await?.remaining(), 9_000);
//! // After it: the answer cost 400 tokens; 600 come back.
//! store.commit(&tokens, &reservation, 400).await?;
//! assert_eq!(store.peek(&tokens, b"key-1").await?.remaining(), 9_600);
//! // Settled once.
//! assert!(store.commit(&tokens, &reservation, 400).await.is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use thiserror::Error;

use crate::policy::{Algorithm, State};
use crate::{Decision, Outcome, Policy, Timestamp};

use super::limit::MAX_LIMIT_NAME;

mod ledger;

pub(crate) use ledger::Ledger;

/// The longest a reservation may stay open: an hour.
pub const MAX_RESERVATION_TTL: Duration = Duration::from_secs(3_600);

/// The most reservations one key of one limit holds open at once.
pub const MAX_OPEN_RESERVATIONS: usize = 1_000;

/// The longest key a reservation is made for: its token carries the key.
pub const MAX_RESERVATION_KEY: usize = 4_096;

/// What a token starts with, and its version.
const TOKEN_PREFIX: &str = "rk1_";

/// A reservation's id: 128 random bits from the operating system.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReservationId(u128);

impl ReservationId {
    /// A new id nobody can guess.
    ///
    /// # Panics
    ///
    /// When the operating system has no randomness to give, which a
    /// running system always has.
    pub fn random() -> ReservationId {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the operating system's random numbers");
        ReservationId(u128::from_le_bytes(bytes))
    }

    /// The id from its 16 bytes, as [`to_bytes`](ReservationId::to_bytes)
    /// gave them.
    pub const fn from_bytes(bytes: [u8; 16]) -> ReservationId {
        ReservationId(u128::from_le_bytes(bytes))
    }

    /// The id's 16 bytes, as stores keep it.
    pub const fn to_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }
}

/// Only a digest: an id is as good as a password until it is settled.
impl fmt::Debug for ReservationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReservationId({:04x}…)", (self.0 >> 112) as u16)
    }
}

/// An open reservation, as [`Store::reserve`](super::Store::reserve)
/// returns it: the limit and key it holds units of, and its id.
///
/// A service hands it to its client as a [token](Reservation::to_token)
/// and reads it back with [`Reservation::from_token`]; whoever holds the
/// token can settle it, once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reservation {
    limit: Box<str>,
    key: Box<[u8]>,
    id: ReservationId,
}

impl Reservation {
    /// A reservation of `key` under the limit named `limit`, with `id`.
    pub fn new(limit: &str, key: &[u8], id: ReservationId) -> Reservation {
        Reservation {
            limit: limit.into(),
            key: key.into(),
            id,
        }
    }

    /// The name of the limit it holds units of.
    pub fn limit(&self) -> &str {
        &self.limit
    }

    /// The key it holds units of.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Its id.
    pub fn id(&self) -> ReservationId {
        self.id
    }

    /// The reservation as text (URL- and JSON-safe): `rk1_` and the id,
    /// limit and key in base64url.
    pub fn to_token(&self) -> String {
        let mut raw = Vec::with_capacity(18 + self.limit.len() + self.key.len());
        raw.extend_from_slice(&self.id.to_bytes());
        raw.push(self.limit.len() as u8);
        raw.extend_from_slice(self.limit.as_bytes());
        raw.extend_from_slice(&self.key);
        let mut token = String::from(TOKEN_PREFIX);
        URL_SAFE_NO_PAD.encode_string(raw, &mut token);
        token
    }

    /// The reservation a [token](Reservation::to_token) names. Whether it
    /// is still open only the store can tell.
    pub fn from_token(token: &str) -> Result<Reservation, ReservationError> {
        let bad = || ReservationError::Malformed;
        let encoded = token.strip_prefix(TOKEN_PREFIX).ok_or_else(bad)?;
        // Checked before decoding: a token is never longer than this.
        if encoded.len() > (17 + MAX_LIMIT_NAME + MAX_RESERVATION_KEY).div_ceil(3) * 4 {
            return Err(bad());
        }
        let raw = URL_SAFE_NO_PAD.decode(encoded).map_err(|_| bad())?;
        let (id, rest) = raw.split_first_chunk::<16>().ok_or_else(bad)?;
        let (&len, rest) = rest.split_first().ok_or_else(bad)?;
        let len = usize::from(len);
        if len == 0 || len > MAX_LIMIT_NAME || rest.len() < len {
            return Err(bad());
        }
        let (name, key) = rest.split_at(len);
        let name = std::str::from_utf8(name).map_err(|_| bad())?;
        if key.len() > MAX_RESERVATION_KEY {
            return Err(bad());
        }
        Ok(Reservation::new(name, key, ReservationId::from_bytes(*id)))
    }
}

/// What [`Store::reserve`](super::Store::reserve) decided: the estimate's
/// outcome, as a check's, and the reservation when it was allowed.
#[derive(Clone, Debug, PartialEq)]
pub struct Reserved {
    /// The decision on the estimate.
    pub outcome: Outcome,
    /// The reservation holding it; `None` when it was refused (nothing is
    /// held then).
    pub reservation: Option<Reservation>,
}

/// Why a reservation could not be made or settled.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReservationError {
    /// No open reservation has this id under this limit and key: it was
    /// never made, was settled already, or outlived its `ttl` (and was
    /// settled at its estimate).
    #[error("no open reservation with this id: never made, settled already, or expired (settled at its estimate)")]
    Unknown,
    /// The key holds [`MAX_OPEN_RESERVATIONS`] open already.
    #[error("the key holds {max} open reservations already; settle some first", max = MAX_OPEN_RESERVATIONS)]
    TooMany,
    /// A `ttl` of zero or past [`MAX_RESERVATION_TTL`].
    #[error("a reservation's ttl must be more than 0 and at most {max:?}, not {ttl:?}", max = MAX_RESERVATION_TTL)]
    Ttl {
        /// The ttl asked for.
        ttl: Duration,
    },
    /// A key longer than [`MAX_RESERVATION_KEY`] bytes.
    #[error("a reservation's key is at most {max} bytes", max = MAX_RESERVATION_KEY)]
    KeyTooLong,
    /// A reservation of another limit than the one given to settle it.
    #[error("the reservation is of limit {reserved:?}, not {given:?}")]
    OtherLimit {
        /// The limit it was made under.
        reserved: String,
        /// The limit given.
        given: String,
    },
    /// A token that is not one [`Reservation::to_token`] made.
    #[error("not a reservation token")]
    Malformed,
}

/// Checks `ttl` against `(0, MAX_RESERVATION_TTL]`.
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), ReservationError> {
    if ttl.is_zero() || ttl > MAX_RESERVATION_TTL {
        Err(ReservationError::Ttl { ttl })
    } else {
        Ok(())
    }
}

/// A reservation of `held` units settled at `actual` (`None`: cancelled)
/// on `state` at `now`: the difference given back, or the excess charged
/// as a report. The decision is the key's after it: a peek's, or the
/// report's when there was an excess. For a store that keeps states and
/// its reservations beside them ([`Store::settle`](super::Store::settle)).
pub fn settle_state(
    policy: &Policy,
    state: &State,
    now: Timestamp,
    held: u64,
    actual: Option<u64>,
) -> (Decision, State) {
    let actual = actual.unwrap_or(0);
    if actual > held {
        return policy.report(state, now, actual - held);
    }
    let next = policy.refund(state, now, held - actual);
    (policy.peek(&next, now), next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_reservation() {
        let reservation = Reservation::new("llm", b"key:\x00\xff", ReservationId::random());
        let token = reservation.to_token();
        assert!(token.starts_with("rk1_"), "{token}");
        assert!(token[4..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(Reservation::from_token(&token).unwrap(), reservation);
    }

    #[test]
    fn ids_differ() {
        assert_ne!(ReservationId::random(), ReservationId::random());
    }

    #[test]
    fn bad_tokens_are_refused() {
        let long = format!("rk1_{}", "A".repeat(10_000));
        for token in [
            "",
            "rk1_",
            "rk2_AAAA",
            "rk1_!!!!",
            "rk1_AAAAAAAAAAAAAAAAAAAAAAA",
            &long,
        ] {
            assert_eq!(
                Reservation::from_token(token),
                Err(ReservationError::Malformed),
                "{token:?}"
            );
        }
        // A name length past the bytes there.
        let mut raw = vec![0u8; 16];
        raw.push(9);
        raw.extend_from_slice(b"abc");
        let token = format!("rk1_{}", URL_SAFE_NO_PAD.encode(raw));
        assert_eq!(
            Reservation::from_token(&token),
            Err(ReservationError::Malformed)
        );
    }

    #[test]
    fn ttls_are_bounded() {
        assert!(check_ttl(Duration::ZERO).is_err());
        assert!(check_ttl(MAX_RESERVATION_TTL + Duration::from_nanos(1)).is_err());
        assert!(check_ttl(Duration::from_millis(1)).is_ok());
        assert!(check_ttl(MAX_RESERVATION_TTL).is_ok());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any text: read or refused, never a panic, and what is read is
        /// written back the same.
        #[test]
        fn any_text_is_read_or_refused(text in ".{0,80}", prefix in prop::bool::ANY) {
            let text = if prefix { format!("{TOKEN_PREFIX}{text}") } else { text };
            if let Ok(reservation) = Reservation::from_token(&text) {
                prop_assert_eq!(Reservation::from_token(&reservation.to_token()), Ok(reservation));
            }
        }

        /// Every reservation's token reads back as it.
        #[test]
        fn every_token_reads_back(
            name in "[a-z][a-z0-9_-]{0,63}",
            key in prop::collection::vec(any::<u8>(), 0..200),
            id in any::<[u8; 16]>(),
        ) {
            let reservation = Reservation::new(&name, &key, ReservationId::from_bytes(id));
            prop_assert_eq!(Reservation::from_token(&reservation.to_token()), Ok(reservation));
        }
    }
}
