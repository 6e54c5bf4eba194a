//! The decision API's JSON bodies, read as axum's [`Json`] reads them and
//! refused with its rejections, for less work on the bodies that parse.
//!
//! axum's extractor deserializes through `serde_path_to_error`, which
//! tracks where it is in the document so that an error can name the
//! field. Measured with callgrind on `POST /v1/check`, that tracking was
//! about 4,000 of the 50,000 instructions a decision cost, spent on every
//! body though only a broken one needs it. This extractor parses with
//! plain `serde_json`; a body that fails is parsed again by
//! [`Json::from_bytes`], so its rejection (and the path it names) is
//! axum's own. Content types other than a plain `application/json` take
//! axum's whole path, which knows every form it accepts.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::Json;
use http::header::CONTENT_TYPE;
use serde::de::DeserializeOwned;

/// A request body of JSON, deserialized into `T`.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = JsonRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, JsonRejection> {
        let plain = request
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"application/json"));
        if !plain {
            let Json(value) = Json::<T>::from_request(request, state).await?;
            return Ok(JsonBody(value));
        }
        let bytes = Bytes::from_request(request, state).await?;
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(JsonBody(value)),
            Err(_) => Json::<T>::from_bytes(&bytes).map(|Json(value)| JsonBody(value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        cost: u64,
    }

    fn request(content_type: Option<&str>, body: &'static str) -> Request {
        let mut request = http::Request::post("/v1/check");
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        request.body(axum::body::Body::from(body)).unwrap()
    }

    async fn read(content_type: Option<&str>, body: &'static str) -> Result<Body, JsonRejection> {
        let request = request(content_type, body);
        JsonBody::<Body>::from_request(request, &())
            .await
            .map(|JsonBody(b)| b)
    }

    /// What axum's own extractor answers for the same request.
    async fn axum(content_type: Option<&str>, body: &'static str) -> Result<Body, JsonRejection> {
        let request = request(content_type, body);
        Json::<Body>::from_request(request, &())
            .await
            .map(|Json(b)| b)
    }

    #[tokio::test]
    async fn bodies_and_rejections_are_axums() {
        let cases = [
            (Some("application/json"), r#"{"cost": 3}"#),
            (Some("Application/JSON"), r#"{"cost": 3}"#),
            (Some("application/json; charset=utf-8"), r#"{"cost": 3}"#),
            (Some("application/cloudevents+json"), r#"{"cost": 3}"#),
            (Some("text/json"), r#"{"cost": 3}"#),
            (None, r#"{"cost": 3}"#),
            (Some("application/json"), r#"{"cost": "three"}"#),
            (Some("application/json"), r#"{"cost": 3"#),
            (Some("application/json"), r#"{"cost": -1}"#),
            (Some("application/json"), ""),
        ];
        for (content_type, body) in cases {
            let ours = read(content_type, body).await;
            let theirs = axum(content_type, body).await;
            match (ours, theirs) {
                (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs),
                (Err(ours), Err(theirs)) => {
                    assert_eq!(ours.status(), theirs.status(), "{content_type:?} {body:?}");
                    assert_eq!(
                        ours.body_text(),
                        theirs.body_text(),
                        "{content_type:?} {body:?}"
                    );
                }
                (ours, theirs) => panic!("{content_type:?} {body:?}: {ours:?} against {theirs:?}"),
            }
        }
        assert_eq!(
            read(Some("application/json"), r#"{"cost": 3}"#)
                .await
                .unwrap(),
            Body { cost: 3 }
        );
    }
}
