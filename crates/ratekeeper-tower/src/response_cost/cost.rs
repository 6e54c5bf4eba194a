//! What a response cost: read from a header, a trailer, or its status.

use http::{HeaderMap, HeaderName, StatusCode};

/// Where [`ResponseCostLayer`](super::ResponseCostLayer) reads what a
/// response cost.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Cost {
    /// A response header holding a whole number (`x-llm-tokens: 1843`).
    Header(HeaderName),
    /// A trailer holding a whole number, read when the body ends: for
    /// streamed answers whose count is known only at the end.
    Trailer(HeaderName),
    /// One unit for each response whose status `counts` says, nothing for
    /// the others: [`Cost::failures`], [`Cost::successes`].
    Status(fn(StatusCode) -> bool),
}

impl Cost {
    /// The cost in the header `name`.
    pub fn header(name: HeaderName) -> Cost {
        Cost::Header(name)
    }

    /// The cost in the trailer `name`.
    pub fn trailer(name: HeaderName) -> Cost {
        Cost::Trailer(name)
    }

    /// One unit per failed response (status 400 and above): failed logins,
    /// say, counted once their answer is known.
    pub fn failures() -> Cost {
        Cost::Status(|status| status.is_client_error() || status.is_server_error())
    }

    /// One unit per successful response (status below 400).
    pub fn successes() -> Cost {
        Cost::Status(|status| !status.is_client_error() && !status.is_server_error())
    }

    /// The cost the response head says: `Some` for a header or a status,
    /// `None` when it is for the trailers to say. A header that is absent
    /// or not a whole number says `otherwise`.
    pub(crate) fn read_head(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        otherwise: u64,
    ) -> Option<u64> {
        match self {
            Cost::Header(name) => Some(read(headers, name).unwrap_or(otherwise)),
            Cost::Status(counts) => Some(u64::from(counts(status))),
            Cost::Trailer(_) => None,
        }
    }

    /// The cost trailers say, for [`Cost::Trailer`].
    pub(crate) fn read_trailers(&self, trailers: &HeaderMap) -> Option<u64> {
        match self {
            Cost::Trailer(name) => read(trailers, name),
            _ => None,
        }
    }
}

/// A whole number in `name` (surrounding spaces allowed), if there is one.
fn read(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_read_as_a_whole_number_or_not_at_all() {
        let cost = Cost::header(HeaderName::from_static("x-llm-tokens"));
        let mut headers = HeaderMap::new();
        assert_eq!(cost.read_head(StatusCode::OK, &headers, 7), Some(7));
        headers.insert("x-llm-tokens", " 1843 ".parse().unwrap());
        assert_eq!(cost.read_head(StatusCode::OK, &headers, 7), Some(1843));
        for bad in ["-1", "1.5", "lots", "99999999999999999999999"] {
            headers.insert("x-llm-tokens", bad.parse().unwrap());
            assert_eq!(
                cost.read_head(StatusCode::OK, &headers, 7),
                Some(7),
                "{bad}"
            );
        }
    }

    #[test]
    fn statuses_count_one_unit() {
        let failures = Cost::failures();
        let headers = HeaderMap::new();
        assert_eq!(
            failures.read_head(StatusCode::UNAUTHORIZED, &headers, 0),
            Some(1)
        );
        assert_eq!(
            failures.read_head(StatusCode::BAD_GATEWAY, &headers, 0),
            Some(1)
        );
        assert_eq!(failures.read_head(StatusCode::OK, &headers, 0), Some(0));
        assert_eq!(
            Cost::successes().read_head(StatusCode::OK, &headers, 0),
            Some(1)
        );
        let trailer = Cost::trailer(HeaderName::from_static("x-llm-tokens"));
        assert_eq!(trailer.read_head(StatusCode::OK, &headers, 0), None);
    }
}
