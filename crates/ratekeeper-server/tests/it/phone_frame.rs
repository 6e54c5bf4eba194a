//! The dashboard at a phone's width. Headless Chromium will not make a
//! window narrower than 500 px, so the page is loaded in a 390 px frame
//! instead: a test server relays the admin port's `/` and `/v1/stats`
//! (so that the frame is of the wrapper's origin and its DOM readable)
//! and serves, at `/phone`, a wrapper that waits for the dashboard to
//! draw and copies its DOM, as text, into its own for `--dump-dom`.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;

/// An iPhone's CSS width and height.
pub(crate) const PHONE: (u32, u32) = (390, 844);

/// The wrapper: the dashboard in a frame of [`PHONE`]'s size.
const WRAPPER: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><style>body { margin: 0; } iframe { border: 0; display: block; }</style></head>
<body><iframe id="phone" src="/" width="390" height="844"></iframe><pre id="dom" hidden></pre>
<script>
  (function wait() {
    const doc = document.getElementById("phone").contentDocument;
    if (doc && doc.body && doc.body.getAttribute("data-loaded") === "true") {
      document.getElementById("dom").textContent = doc.documentElement.outerHTML;
    } else {
      setTimeout(wait, 50);
    }
  })();
</script></body></html>"#;

/// Serves the wrapper at `/phone` and relays everything else to `admin`
/// (`http://host:port`); the wrapper's address.
pub(crate) async fn serve(admin: String) -> String {
    async fn relay(State(admin): State<String>, path: Option<Path<String>>) -> impl IntoResponse {
        let path = path.map(|Path(path)| path).unwrap_or_default();
        let response = reqwest::get(format!("{admin}/{path}"))
            .await
            .expect("the admin port answers");
        let kind = response
            .headers()
            .get(header::CONTENT_TYPE)
            .cloned()
            .expect("a content type");
        let body = response.bytes().await.expect("a body");
        ([(header::CONTENT_TYPE, kind)], body)
    }
    let app = Router::new()
        .route("/phone", get(|| async { Html(WRAPPER) }))
        .route("/", get(relay))
        .route("/{*path}", get(relay))
        .with_state(admin);
    format!("http://{}/phone", crate::common::serve_app(app).await)
}

/// The dashboard's DOM from the wrapper's `dom`, as the frame had it.
pub(crate) fn framed_dom(dom: &str) -> String {
    let start = dom.find(r#"<pre id="dom" hidden="">"#).expect("the copy") + 24;
    let end = start + dom[start..].find("</pre>").expect("its end");
    dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}
