//! Which requests a limit's `match` can ever meet: HTTP requests, Envoy
//! descriptors, or none. The doors' matching starts from this, and
//! `ratekeeper check` says it per limit, so that a limit that never
//! applies is told, not found out.

use std::fmt;

use super::Match;

/// The kind of request a `match` can apply to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reach {
    /// HTTP requests: no domain and no descriptors (methods and a path
    /// prefix may narrow it). The JSON API by method and path, nginx's
    /// `auth_request` and the proxy decide them; the gRPC door never does.
    Http,
    /// Envoy descriptors of one domain: a domain and descriptors, no
    /// methods or path. The gRPC door and the JSON API's `descriptors`
    /// decide them; nginx's `auth_request` and the proxy never do.
    Descriptors,
    /// Nothing: no request of any door matches it.
    Nowhere(Unreachable),
}

/// Why a `match` meets no request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unreachable {
    /// A domain without descriptors: descriptors are matched whole, and
    /// a limit with none matches none.
    DomainWithoutDescriptors,
    /// Descriptors without a domain: every Envoy request names one.
    DescriptorsWithoutDomain,
    /// Methods or a path prefix beside a domain or descriptors: no request
    /// has both.
    HttpAndDescriptors,
}

impl Match {
    /// The kind of request this `match` can apply to.
    #[inline]
    pub fn reach(&self) -> Reach {
        let http_conditions = !self.methods.is_empty() || self.path_prefix.is_some();
        match (self.domain.is_some(), !self.descriptors.is_empty()) {
            (false, false) => Reach::Http,
            _ if http_conditions => Reach::Nowhere(Unreachable::HttpAndDescriptors),
            (true, true) => Reach::Descriptors,
            (true, false) => Reach::Nowhere(Unreachable::DomainWithoutDescriptors),
            (false, true) => Reach::Nowhere(Unreachable::DescriptorsWithoutDomain),
        }
    }
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unreachable::DomainWithoutDescriptors => {
                "it names a domain but no descriptors, and descriptors match whole: add \
                 match.descriptors, or remove match.domain to limit HTTP requests"
            }
            Unreachable::DescriptorsWithoutDomain => {
                "it names descriptors but no domain, and every Envoy request has one: add \
                 match.domain"
            }
            Unreachable::HttpAndDescriptors => {
                "it names HTTP methods or a path prefix beside a domain or descriptors, and \
                 no request has both: make it two limits"
            }
        })
    }
}

impl Reach {
    /// The doors that can decide by a limit of this reach, in words.
    pub fn doors(&self) -> &'static str {
        match self {
            Reach::Http => {
                "HTTP requests: the JSON API by method and path, nginx auth_request, the \
                 proxy (never gRPC: Envoy's requests need match.domain and match.descriptors)"
            }
            Reach::Descriptors => {
                "Envoy descriptors: gRPC ShouldRateLimit and the JSON API's \"descriptors\" \
                 (never nginx auth_request or the proxy)"
            }
            Reach::Nowhere(_) => "no door",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn reach(matcher: &str) -> Reach {
        let toml = format!(
            "[[limits]]\nname = \"l\"\nrate = \"1/s\"\nkey = [\"global\"]\nmatch = {matcher}\n"
        );
        Config::from_toml_str(&toml, "t.toml").unwrap().limits[0]
            .matcher
            .reach()
    }

    #[test]
    fn each_shape_of_match_reaches_its_doors_or_none() {
        assert_eq!(reach("{}"), Reach::Http);
        assert_eq!(
            reach(r#"{ methods = ["POST"], path_prefix = "/a" }"#),
            Reach::Http
        );
        assert_eq!(
            reach(r#"{ domain = "d", descriptors = [{ key = "k" }] }"#),
            Reach::Descriptors
        );
        assert_eq!(
            reach(r#"{ domain = "d" }"#),
            Reach::Nowhere(Unreachable::DomainWithoutDescriptors)
        );
        assert_eq!(
            reach(r#"{ descriptors = [{ key = "k" }] }"#),
            Reach::Nowhere(Unreachable::DescriptorsWithoutDomain)
        );
        assert_eq!(
            reach(r#"{ domain = "d", descriptors = [{ key = "k" }], methods = ["GET"] }"#),
            Reach::Nowhere(Unreachable::HttpAndDescriptors)
        );
        assert_eq!(
            reach(r#"{ domain = "d", path_prefix = "/a" }"#),
            Reach::Nowhere(Unreachable::HttpAndDescriptors)
        );
    }
}
