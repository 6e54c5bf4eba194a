//! Which requests a rule applies to: methods and a path prefix, shared by
//! the rate layer's [`Rule`](super::Rule) and the in-flight layer's
//! [`CapRule`](crate::in_flight::CapRule).

use http::Method;

/// The methods and path prefix a rule applies to; all requests when both
/// are unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scope {
    pub(crate) methods: Vec<Method>,
    pub(crate) path_prefix: Option<String>,
}

impl Scope {
    /// Whether a request with `method` and `path` is in scope.
    pub(crate) fn applies_to(&self, method: &Method, path: &str) -> bool {
        (self.methods.is_empty() || self.methods.contains(method))
            && self
                .path_prefix
                .as_deref()
                .is_none_or(|prefix| path.starts_with(prefix))
    }

    /// Whether every request is in scope.
    pub(crate) fn is_everything(&self) -> bool {
        self.methods.is_empty() && self.path_prefix.is_none()
    }
}
