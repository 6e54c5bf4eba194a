//! `[requests]`: how much one decision request may hold, on the gRPC door
//! and the JSON API alike, and the check of a request against it.
//!
//! The caps keep the work of one request bounded whatever a client sends:
//! the message size limits of gRPC (4 MiB) and of the JSON API (2 MiB)
//! alone would let one request carry hundreds of thousands of descriptors.
//! The defaults are far above what Envoy sends (a handful of descriptors of
//! a few entries each) while keeping the worst request small.

use thiserror::Error;

/// The caps on one request, and on the requests held waiting, from
/// `[requests]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestCaps {
    /// Descriptors in one request (`requests.max_descriptors`); also limit
    /// names in one JSON `"limits"` list.
    pub max_descriptors: usize,
    /// Entries in one descriptor (`requests.max_entries`); also parts in
    /// one JSON `"key"` object.
    pub max_entries: usize,
    /// Bytes of one entry's key or value, of the domain, and of a JSON
    /// key part, method or path (`requests.max_value_bytes`).
    pub max_value_bytes: usize,
    /// Distinct Envoy limit overrides (`requests_per_unit` and `unit`)
    /// the service keeps a count for (`requests.max_override_rates`). Each
    /// is a table of its own in the in-memory store, so without a cap a
    /// client could make the service allocate one per request.
    pub max_override_rates: usize,
    /// Bytes of one request's body (JSON API) or message (gRPC)
    /// (`requests.max_body_bytes`); a larger one is refused before it is
    /// read whole: 413 on the JSON API, `OUT_OF_RANGE` on gRPC (tonic's
    /// code for a message over its size limit). Unwritten in a file that
    /// raises `max_value_bytes`, it grows to hold one value at that cap.
    pub max_body_bytes: usize,
    /// Requests the proxy holds at once for a limit's `max_wait`
    /// (`requests.max_waiting`); past it a request is refused as it would
    /// have been without the wait. Read when the service starts.
    pub max_waiting: usize,
    /// Of them, requests of one key of one limit
    /// (`requests.max_waiting_per_key`).
    pub max_waiting_per_key: usize,
}

impl RequestCaps {
    /// The default `max_waiting`.
    pub(crate) const DEFAULT_MAX_WAITING: usize = 1024;
    /// The default `max_waiting_per_key`.
    pub(crate) const DEFAULT_MAX_WAITING_PER_KEY: usize = 16;
    /// The largest `max_waiting` (and `max_waiting_per_key`) a
    /// configuration may set: each held request keeps a connection.
    pub(crate) const LIMIT_MAX_WAITING: usize = 65_536;
    /// The default `max_descriptors`.
    pub(crate) const DEFAULT_MAX_DESCRIPTORS: usize = 256;
    /// The default `max_entries`.
    pub(crate) const DEFAULT_MAX_ENTRIES: usize = 64;
    /// The default `max_value_bytes`: room for a large JWT in a header.
    pub(crate) const DEFAULT_MAX_VALUE_BYTES: usize = 16 * 1024;
    /// The default `max_override_rates`: Envoy's overrides come from route
    /// configuration, a few distinct rates in a deployment.
    pub(crate) const DEFAULT_MAX_OVERRIDE_RATES: usize = 32;
    /// The largest `max_override_rates` a configuration may set.
    pub(crate) const LIMIT_MAX_OVERRIDE_RATES: usize = 1024;
    /// The largest `max_descriptors` a configuration may set.
    pub(crate) const LIMIT_MAX_DESCRIPTORS: usize = 65_536;
    /// The largest `max_entries` a configuration may set.
    pub(crate) const LIMIT_MAX_ENTRIES: usize = 4_096;
    /// The largest `max_value_bytes` a configuration may set.
    pub(crate) const LIMIT_MAX_VALUE_BYTES: usize = 1024 * 1024;
    /// The default `max_body_bytes`: a few hundred descriptors of Envoy's
    /// usual size, or four values at `max_value_bytes`.
    pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;
    /// The largest `max_body_bytes` a configuration may set.
    pub(crate) const LIMIT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

    /// Refuses more than `max_descriptors` descriptors.
    pub fn descriptors(&self, count: usize) -> Result<(), CapError> {
        if count > self.max_descriptors {
            return Err(CapError::Descriptors {
                count,
                max: self.max_descriptors,
            });
        }
        Ok(())
    }

    /// Refuses a JSON `"limits"` list of more than `max_descriptors` names.
    pub fn limit_names(&self, count: usize) -> Result<(), CapError> {
        if count > self.max_descriptors {
            return Err(CapError::LimitNames {
                count,
                max: self.max_descriptors,
            });
        }
        Ok(())
    }

    /// Refuses a JSON `"key"` object of more than `max_entries` parts.
    pub fn key_parts(&self, count: usize) -> Result<(), CapError> {
        if count > self.max_entries {
            return Err(CapError::KeyParts {
                count,
                max: self.max_entries,
            });
        }
        Ok(())
    }

    /// Refuses `text` if longer than `max_value_bytes`; `field` names it
    /// in the error, and is only called then.
    pub fn value(&self, text: &str, field: impl FnOnce() -> String) -> Result<(), CapError> {
        if text.len() > self.max_value_bytes {
            return Err(CapError::ValueBytes {
                field: field(),
                bytes: text.len(),
                max: self.max_value_bytes,
            });
        }
        Ok(())
    }

    /// Checks a request's descriptors, each a list of `(key, value)`
    /// entries: their count, each one's entries, and every key and value.
    /// The count is checked before any descriptor is looked at, so a
    /// request over the cap costs no more than one at it.
    pub(crate) fn check_descriptors<'a, D, E>(&self, descriptors: D) -> Result<(), CapError>
    where
        D: ExactSizeIterator<Item = E>,
        E: ExactSizeIterator<Item = (&'a str, &'a str)>,
    {
        self.descriptors(descriptors.len())?;
        for (index, entries) in descriptors.enumerate() {
            let count = entries.len();
            if count > self.max_entries {
                return Err(CapError::Entries {
                    index,
                    count,
                    max: self.max_entries,
                });
            }
            for (position, (key, value)) in entries.enumerate() {
                self.value(key, || {
                    format!("descriptors[{index}].entries[{position}].key")
                })?;
                self.value(value, || {
                    format!("descriptors[{index}].entries[{position}].value")
                })?;
            }
        }
        Ok(())
    }
}

impl Default for RequestCaps {
    /// 256 descriptors of up to 64 entries, keys and values up to 16 KiB;
    /// 32 distinct override rates; bodies up to 64 KiB; 1,024 requests
    /// held waiting, 16 of one key.
    fn default() -> Self {
        RequestCaps {
            max_descriptors: Self::DEFAULT_MAX_DESCRIPTORS,
            max_entries: Self::DEFAULT_MAX_ENTRIES,
            max_value_bytes: Self::DEFAULT_MAX_VALUE_BYTES,
            max_override_rates: Self::DEFAULT_MAX_OVERRIDE_RATES,
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            max_waiting: Self::DEFAULT_MAX_WAITING,
            max_waiting_per_key: Self::DEFAULT_MAX_WAITING_PER_KEY,
        }
    }
}

/// A request over one of the [`RequestCaps`]: gRPC answers it with
/// `INVALID_ARGUMENT`, the JSON API with 413. Each message names the cap
/// and the configuration field that sets it.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapError {
    /// Too many descriptors.
    #[error("the request has {count} descriptors, more than requests.max_descriptors ({max})")]
    Descriptors {
        /// Descriptors in the request.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A descriptor with too many entries.
    #[error("descriptors[{index}] has {count} entries, more than requests.max_entries ({max})")]
    Entries {
        /// The descriptor's position.
        index: usize,
        /// Its entries.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A JSON `"limits"` list too long.
    #[error("\"limits\" names {count} limits, more than requests.max_descriptors ({max})")]
    LimitNames {
        /// Names in the list.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A JSON `"key"` object with too many parts.
    #[error("\"key\" has {count} parts, more than requests.max_entries ({max})")]
    KeyParts {
        /// Parts in the object.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// An Envoy limit override at a rate the service has no count for,
    /// when it already keeps counts for `max` distinct ones.
    #[error(
        "descriptors[{index}].limit asks for {requests} per {unit}, but the service already counts \
         {max} distinct override rates, the most requests.max_override_rates allows"
    )]
    OverrideRates {
        /// The descriptor's position.
        index: usize,
        /// Its `requests_per_unit`.
        requests: u32,
        /// Its unit, in lower case.
        unit: String,
        /// The cap.
        max: usize,
    },
    /// A key, value, domain, method or path too long.
    #[error("{field} is {bytes} bytes, more than requests.max_value_bytes ({max})")]
    ValueBytes {
        /// Where it is in the request, such as `descriptors[0].entries[1].value`.
        field: String,
        /// Its length.
        bytes: usize,
        /// The cap.
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(max_descriptors: usize, max_entries: usize, max_value_bytes: usize) -> RequestCaps {
        RequestCaps {
            max_descriptors,
            max_entries,
            max_value_bytes,
            ..RequestCaps::default()
        }
    }

    fn check(caps: &RequestCaps, descriptors: &[Vec<(&str, &str)>]) -> Result<(), CapError> {
        caps.check_descriptors(descriptors.iter().map(|entries| entries.iter().copied()))
    }

    #[test]
    fn requests_at_each_cap_pass_and_one_over_is_refused() {
        let caps = caps(2, 2, 3);
        let entry = ("k", "abc");
        assert_eq!(check(&caps, &[vec![entry; 2], vec![entry; 2]]), Ok(()));
        assert_eq!(
            check(&caps, &[vec![entry], vec![entry], vec![entry]]),
            Err(CapError::Descriptors { count: 3, max: 2 })
        );
        assert_eq!(
            check(&caps, &[vec![entry], vec![entry; 3]]),
            Err(CapError::Entries {
                index: 1,
                count: 3,
                max: 2
            })
        );
        let error = check(&caps, &[vec![entry, ("k", "abcd")]]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "descriptors[0].entries[1].value is 4 bytes, more than requests.max_value_bytes (3)"
        );
        assert!(check(&caps, &[vec![("long", "v")]]).is_err());
        assert_eq!(caps.limit_names(2), Ok(()));
        assert!(caps.limit_names(3).is_err());
        assert_eq!(caps.key_parts(2), Ok(()));
        assert!(caps.key_parts(3).is_err());
    }
}
