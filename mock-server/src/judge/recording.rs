//! A recording: a JSON-lines file whose first line says what was recorded ([`Header`]) and whose every other
//! line is one HTTP exchange, stored exactly ([`Exchange`]): the request's method, path, headers and body
//! bytes, the response's status, headers and body bytes, the body as the chunks that arrived with the time
//! each arrived (a stream's frames). Bytes that are UTF-8 are stored as a string, others as base64, so a file
//! of text answers stays readable and diffable.
//!
//! Exchanges are written as they finish, so a recording stopped early keeps every exchange it finished; their
//! `seq` says the order in which the requests arrived.

use std::io::{BufRead, Write};
use std::path::Path;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The version of the file format this module writes and reads ([`Header::sglang_mock_recording`]).
pub const FORMAT: u32 = 1;

/// What a request header's value is replaced with when it carries a credential.
pub const REDACTED: &str = "<redacted>";

/// Request headers whose values are credentials: a recording keeps that they were sent, never their values.
const CREDENTIALS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
];

/// Headers that describe one connection or one encoding of a body, not the exchange: a recording leaves them
/// out, and a replay's server writes its own.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "content-length",
    "date",
    "host",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "te",
];

/// The first line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The file format ([`FORMAT`]).
    pub sglang_mock_recording: u32,
    /// The URL the exchanges went to.
    pub upstream: String,
    /// The SGLang release the upstream reported (`version` of its server info), if it reported one.
    pub release: Option<String>,
    /// The upstream's `/server_info` (or `/get_server_info`) when the recording started: its flags, its
    /// model, its limits. `null` when it had neither route.
    pub server_info: Option<Value>,
    /// The program that recorded it, with its version.
    pub recorded_by: String,
}

/// One request and the response it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The order in which the requests arrived, from 0.
    pub seq: u64,
    /// When the request arrived, in milliseconds from the start of the recording.
    pub at_ms: f64,
    pub request: RecordedRequest,
    pub response: RecordedResponse,
}

/// A request as it was sent upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    pub method: String,
    /// The path with its query string, as the request line gave it.
    pub path: String,
    /// Header names in lower case, in the order they came; credentials are [`REDACTED`].
    pub headers: Vec<(String, String)>,
    #[serde(flatten)]
    pub body: Bytes,
}

/// A response as it came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedResponse {
    pub status: u16,
    /// Header names in lower case, in the order they came, without the per-connection ones.
    pub headers: Vec<(String, String)>,
    /// The body as it arrived: one chunk for an answer read whole, one per arrival for a stream. The body is
    /// their concatenation.
    pub chunks: Vec<Chunk>,
    /// `false` when the body ended early: the upstream broke the connection, or the client went away.
    pub complete: bool,
    /// Why the upstream gave no answer, when it gave none (the status is then the proxy's 502).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_error: Option<String>,
}

/// Part of a body and when it arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Milliseconds from the arrival of the request.
    pub ms: f64,
    #[serde(flatten)]
    pub data: Bytes,
}

/// Bytes stored as a string when they are UTF-8 (`"body"`), as base64 otherwise (`"body_base64"`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bytes(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
struct BytesRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
}

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let repr = match std::str::from_utf8(&self.0) {
            Ok(text) => BytesRepr {
                body: Some(text.to_owned()),
                body_base64: None,
            },
            Err(_) => BytesRepr {
                body: None,
                body_base64: Some(base64::engine::general_purpose::STANDARD.encode(&self.0)),
            },
        };
        repr.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let repr = BytesRepr::deserialize(deserializer)?;
        match (repr.body, repr.body_base64) {
            (Some(text), None) => Ok(Bytes(text.into_bytes())),
            (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map(Bytes)
                .map_err(serde::de::Error::custom),
            (None, None) => Ok(Bytes::default()),
            (Some(_), Some(_)) => Err(serde::de::Error::custom(
                "both `body` and `body_base64` are given",
            )),
        }
    }
}

impl RecordedResponse {
    /// The whole body: the chunks, concatenated.
    pub fn body(&self) -> Vec<u8> {
        self.chunks
            .iter()
            .flat_map(|c| c.data.0.iter().copied())
            .collect()
    }

    /// The response's `content-type`, if it had one.
    pub fn content_type(&self) -> Option<&str> {
        header(&self.headers, "content-type")
    }
}

/// The value of the first header named `name` (lower case).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The headers a recording keeps of `headers`: names in lower case, per-connection headers left out,
/// credentials redacted when `redact` is set.
pub fn kept_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    redact: bool,
) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter_map(|(name, value)| {
            let name = name.to_ascii_lowercase();
            if HOP_BY_HOP.contains(&name.as_str()) {
                return None;
            }
            let value = if redact && CREDENTIALS.contains(&name.as_str()) {
                REDACTED.to_owned()
            } else {
                String::from_utf8_lossy(value).into_owned()
            };
            Some((name, value))
        })
        .collect()
}

/// A recording read from a file: its header and its exchanges in the order their requests arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    pub header: Header,
    pub exchanges: Vec<Exchange>,
}

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is empty: a recording's first line is its header")]
    Empty { path: String },
    #[error("{path}, line {line}: {what}")]
    Line {
        path: String,
        line: usize,
        what: String,
    },
}

impl Recording {
    /// Reads the JSON-lines file at `path`. A last line cut short (a recorder killed mid-write) is an error
    /// naming its line, as is any other line that is not a header or an exchange.
    pub fn read(path: &Path) -> Result<Recording, RecordingError> {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| RecordingError::Io {
            path: shown.clone(),
            source,
        })?;
        Self::parse(std::io::BufReader::new(file), &shown)
    }

    /// Reads a recording from `reader`; `name` names it in errors.
    pub fn parse(reader: impl BufRead, name: &str) -> Result<Recording, RecordingError> {
        let mut lines = reader.lines().enumerate();
        let line_error = |line: usize, what: String| RecordingError::Line {
            path: name.to_owned(),
            line: line + 1,
            what,
        };
        let io_error = |source| RecordingError::Io {
            path: name.to_owned(),
            source,
        };
        let header: Header = match lines.next() {
            None => {
                return Err(RecordingError::Empty {
                    path: name.to_owned(),
                });
            }
            Some((n, line)) => serde_json::from_str(&line.map_err(io_error)?)
                .map_err(|e| line_error(n, format!("not a recording header: {e}")))?,
        };
        if header.sglang_mock_recording != FORMAT {
            return Err(line_error(
                0,
                format!(
                    "format {} (this program reads format {FORMAT})",
                    header.sglang_mock_recording
                ),
            ));
        }
        let mut exchanges = Vec::new();
        for (n, line) in lines {
            let line = line.map_err(io_error)?;
            if line.trim().is_empty() {
                continue;
            }
            let exchange: Exchange = serde_json::from_str(&line)
                .map_err(|e| line_error(n, format!("not an exchange: {e}")))?;
            exchanges.push(exchange);
        }
        exchanges.sort_by_key(|e| e.seq);
        Ok(Recording { header, exchanges })
    }

    /// Writes the recording as a JSON-lines file, exchanges in `seq` order.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        write_line(out, &self.header)?;
        for exchange in &self.exchanges {
            write_line(out, exchange)?;
        }
        Ok(())
    }
}

/// One value as one line of JSON.
pub(crate) fn write_line(out: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(body: &[u8]) -> Exchange {
        Exchange {
            seq: 0,
            at_ms: 1.5,
            request: RecordedRequest {
                method: "POST".into(),
                path: "/generate".into(),
                headers: vec![("content-type".into(), "application/json".into())],
                body: Bytes(b"{\"text\":\"hi\"}".to_vec()),
            },
            response: RecordedResponse {
                status: 200,
                headers: vec![],
                chunks: vec![Chunk {
                    ms: 2.0,
                    data: Bytes(body.to_vec()),
                }],
                complete: true,
                upstream_error: None,
            },
        }
    }

    #[test]
    fn text_is_stored_as_a_string_and_other_bytes_as_base64() {
        let text = serde_json::to_value(exchange(b"data: {}\n\n")).unwrap();
        assert_eq!(text["response"]["chunks"][0]["body"], "data: {}\n\n");
        assert_eq!(text["request"]["body"], "{\"text\":\"hi\"}");
        // Half of a two-byte UTF-8 character, as a stream chunk can end.
        let cut = serde_json::to_value(exchange(&[b'a', 0xc3])).unwrap();
        assert_eq!(cut["response"]["chunks"][0]["body_base64"], "YcM=");
        assert!(cut["response"]["chunks"][0].get("body").is_none());
        for value in [text, cut] {
            let back: Exchange = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(back).unwrap(), value);
        }
    }

    #[test]
    fn credentials_are_redacted_and_connection_headers_left_out() {
        let kept = kept_headers(
            [
                ("Authorization", b"Bearer sk-secret".as_slice()),
                ("Content-Type", b"application/json"),
                ("Content-Length", b"12"),
                ("X-Api-Key", b"k"),
            ],
            true,
        );
        assert_eq!(
            kept,
            [
                ("authorization".to_owned(), REDACTED.to_owned()),
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-api-key".to_owned(), REDACTED.to_owned()),
            ]
        );
    }

    #[test]
    fn a_recording_reads_back_and_a_cut_line_is_named() {
        let recording = Recording {
            header: Header {
                sglang_mock_recording: FORMAT,
                upstream: "http://127.0.0.1:1".into(),
                release: Some("0.5.23".into()),
                server_info: None,
                recorded_by: "test".into(),
            },
            exchanges: vec![exchange(b"{}")],
        };
        let mut bytes = Vec::new();
        recording.write(&mut bytes).unwrap();
        assert_eq!(Recording::parse(&bytes[..], "r").unwrap(), recording);
        let cut = &bytes[..bytes.len() - 5];
        let err = Recording::parse(cut, "r.jsonl").unwrap_err().to_string();
        assert!(err.starts_with("r.jsonl, line 2: not an exchange"), "{err}");
        let err = Recording::parse(&b""[..], "r.jsonl")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is empty"), "{err}");
    }
}
