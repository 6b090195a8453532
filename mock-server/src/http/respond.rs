//! Response helpers shared by the handlers: JSON bodies (with Python's key order), empty 200s, SSE.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

pub(crate) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn json_value(value: &impl serde::Serialize) -> Response {
    json_response(
        StatusCode::OK,
        serde_json::to_vec(value).unwrap_or_default(),
    )
}

/// A JSON object whose keys keep the order given, as Python dicts do, written straight from the list (no map is
/// built for a body the handler writes once).
pub(crate) struct Ordered(pub(crate) Vec<(&'static str, serde_json::Value)>);

impl serde::Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `ordered! {"a": x, "b": y}`: an [`Ordered`] object of `json!` values.
macro_rules! ordered {
    ($($key:literal : $value:expr),* $(,)?) => {
        $crate::http::respond::Ordered(vec![$(($key, serde_json::json!($value))),*])
    };
}

pub(crate) fn empty_ok() -> Response {
    StatusCode::OK.into_response()
}
pub(crate) use ordered;

/// An SSE body with SGLang's content type.
pub(crate) fn sse_response(body: Body) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")],
        body,
    )
        .into_response()
}
