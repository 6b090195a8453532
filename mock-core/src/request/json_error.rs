//! Where and why a body is not JSON, in the words of the decoder the release's FastAPI reads bodies with:
//! Python's `json` (0.5.3, 0.5.15: `json.loads`, whose C scanner stops at the first error with messages such as
//! `Expecting ',' delimiter`) or orjson (0.5.23's `ORJSONRequest`: yyjson's messages, `unexpected end of data`).
//! FastAPI answers either as Pydantic's `json_invalid` error at `('body', position)` with the message in
//! `ctx.error`; positions count characters from the start of the body.

use crate::release::JsonDecoder;

/// The decoder's message and position for `body`, or `None` when the decoder reads it (or it is not UTF-8, which
/// neither decoder reports in these words).
pub(crate) fn decode_error(body: &[u8], decoder: JsonDecoder) -> Option<(&'static str, usize)> {
    let text = std::str::from_utf8(body).ok()?;
    let chars: Vec<char> = text.chars().collect();
    match decoder {
        JsonDecoder::Stdlib => Stdlib { s: &chars }.document().err(),
        JsonDecoder::Orjson => Orjson { s: &chars }.document().err(),
    }
}

type Scan = Result<usize, (&'static str, usize)>;

fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

fn skip_ws(s: &[char], mut i: usize) -> usize {
    while s.get(i).is_some_and(|&c| is_ws(c)) {
        i += 1;
    }
    i
}

fn starts_with(s: &[char], i: usize, word: &str) -> bool {
    word.chars()
        .enumerate()
        .all(|(k, c)| s.get(i + k) == Some(&c))
}

fn digits(s: &[char], mut i: usize) -> usize {
    while s.get(i).is_some_and(char::is_ascii_digit) {
        i += 1;
    }
    i
}

/// CPython's `json` (its C scanner, `Modules/_json.c`, with `json.decoder`'s document checks).
struct Stdlib<'a> {
    s: &'a [char],
}

impl Stdlib<'_> {
    fn document(&self) -> Scan {
        // `json.loads` of bytes decodes them as `utf-8-sig`: a byte-order mark is not the document's.
        let start = usize::from(self.s.first() == Some(&'\u{feff}'));
        let i = skip_ws(self.s, start);
        let end = self.value(i)?;
        let j = skip_ws(self.s, end);
        if j != self.s.len() {
            return Err(("Extra data", j));
        }
        Ok(j)
    }

    fn value(&self, i: usize) -> Scan {
        let s = self.s;
        match s.get(i) {
            Some('"') => self.string(i + 1),
            Some('{') => self.object(i + 1),
            Some('[') => self.array(i + 1),
            Some('n') if starts_with(s, i, "null") => Ok(i + 4),
            Some('t') if starts_with(s, i, "true") => Ok(i + 4),
            Some('f') if starts_with(s, i, "false") => Ok(i + 5),
            Some('N') if starts_with(s, i, "NaN") => Ok(i + 3),
            Some('I') if starts_with(s, i, "Infinity") => Ok(i + 8),
            Some('-') if starts_with(s, i, "-Infinity") => Ok(i + 9),
            _ => self.number(i).ok_or(("Expecting value", i)),
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, the longest match from `i`.
    fn number(&self, i: usize) -> Option<usize> {
        let s = self.s;
        let mut j = i + usize::from(s.get(i) == Some(&'-'));
        match s.get(j) {
            Some('0') => j += 1,
            Some('1'..='9') => j = digits(s, j),
            _ => return None,
        }
        if s.get(j) == Some(&'.') && s.get(j + 1).is_some_and(char::is_ascii_digit) {
            j = digits(s, j + 1);
        }
        if matches!(s.get(j), Some('e' | 'E')) {
            let mut k = j + 1;
            if matches!(s.get(k), Some('+' | '-')) {
                k += 1;
            }
            if s.get(k).is_some_and(char::is_ascii_digit) {
                j = digits(s, k);
            }
        }
        Some(j)
    }

    /// A string's body from `begin` (after its quote).
    fn string(&self, begin: usize) -> Scan {
        let s = self.s;
        let unterminated = ("Unterminated string starting at", begin - 1);
        let mut i = begin;
        loop {
            match s.get(i) {
                None => return Err(unterminated),
                Some('"') => return Ok(i + 1),
                Some('\\') => match s.get(i + 1) {
                    None => return Err(unterminated),
                    Some('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't') => i += 2,
                    Some('u') => {
                        let hex =
                            (i + 2..i + 6).all(|k| s.get(k).is_some_and(char::is_ascii_hexdigit));
                        if !hex {
                            return Err(("Invalid \\uXXXX escape", i + 1));
                        }
                        i += 6;
                    }
                    Some(_) => return Err(("Invalid \\escape", i)),
                },
                Some(&c) if c < ' ' => return Err(("Invalid control character at", i)),
                Some(_) => i += 1,
            }
        }
    }

    fn object(&self, i: usize) -> Scan {
        let s = self.s;
        let mut i = skip_ws(s, i);
        if s.get(i) == Some(&'}') {
            return Ok(i + 1);
        }
        loop {
            if s.get(i) != Some(&'"') {
                return Err(("Expecting property name enclosed in double quotes", i));
            }
            i = skip_ws(s, self.string(i + 1)?);
            if s.get(i) != Some(&':') {
                return Err(("Expecting ':' delimiter", i));
            }
            i = skip_ws(s, self.value(skip_ws(s, i + 1))?);
            match s.get(i) {
                Some('}') => return Ok(i + 1),
                Some(',') => i = skip_ws(s, i + 1),
                _ => return Err(("Expecting ',' delimiter", i)),
            }
        }
    }

    fn array(&self, i: usize) -> Scan {
        let s = self.s;
        let mut i = skip_ws(s, i);
        if s.get(i) == Some(&']') {
            return Ok(i + 1);
        }
        loop {
            i = skip_ws(s, self.value(i)?);
            match s.get(i) {
                Some(']') => return Ok(i + 1),
                Some(',') => i = skip_ws(s, i + 1),
                _ => return Err(("Expecting ',' delimiter", i)),
            }
        }
    }
}

/// orjson, which reads with yyjson and reports its messages.
struct Orjson<'a> {
    s: &'a [char],
}

const END: &str = "unexpected end of data";

impl Orjson<'_> {
    fn document(&self) -> Scan {
        if self.s.first() == Some(&'\u{feff}') {
            return Err(("UTF-8 byte order mark (BOM) is not supported", 0));
        }
        let i = skip_ws(self.s, 0);
        if i == self.s.len() {
            return Err(("input data is empty", 0));
        }
        let end = self.value(i)?;
        let j = skip_ws(self.s, end);
        if j != self.s.len() {
            return Err(("unexpected content after document", j));
        }
        Ok(j)
    }

    fn at(&self, i: usize, message: &'static str) -> (&'static str, usize) {
        if i >= self.s.len() {
            (END, self.s.len())
        } else {
            (message, i)
        }
    }

    fn value(&self, i: usize) -> Scan {
        let s = self.s;
        let literal = |word: &'static str, message: &'static str| {
            for (k, c) in word.chars().enumerate() {
                match s.get(i + k) {
                    None => return Err((END, s.len())),
                    Some(&d) if d != c => return Err((message, i)),
                    Some(_) => {}
                }
            }
            Ok(i + word.len())
        };
        match s.get(i) {
            None => Err((END, s.len())),
            Some('"') => self.string(i + 1),
            Some('{') => self.object(i + 1),
            Some('[') => self.array(i + 1),
            Some('n') => literal("null", "invalid literal, expected 'null'"),
            Some('t') => literal("true", "invalid literal, expected 'true'"),
            Some('f') => literal("false", "invalid literal, expected 'false'"),
            Some('-' | '+' | '.' | '0'..='9') => self.number(i),
            Some(_) => Err(("unexpected character, expected a JSON value", i)),
        }
    }

    fn number(&self, i: usize) -> Scan {
        let s = self.s;
        let mut j = i;
        if s.get(j) == Some(&'-') {
            j += 1;
        }
        match s.get(j) {
            None => return Err((END, s.len())),
            Some('0') if s.get(j + 1).is_some_and(char::is_ascii_digit) => {
                return Err(("number with leading zero is not allowed", i));
            }
            Some('0'..='9') => j = digits(s, j),
            Some(_) => return Err(("no digit after sign", j)),
        }
        if s.get(j) == Some(&'.') {
            j += 1;
            match s.get(j) {
                None => return Err((END, s.len())),
                Some(c) if c.is_ascii_digit() => j = digits(s, j),
                Some(_) => return Err(("no digit after decimal point", j)),
            }
        }
        if matches!(s.get(j), Some('e' | 'E')) {
            j += 1;
            if matches!(s.get(j), Some('+' | '-')) {
                j += 1;
            }
            match s.get(j) {
                None => return Err((END, s.len())),
                Some(c) if c.is_ascii_digit() => j = digits(s, j),
                Some(_) => return Err(("no digit after exponent sign", j)),
            }
        }
        let text: String = s[i..j].iter().collect();
        match text.parse::<f64>() {
            Ok(f) if f.is_infinite() => Err(("number is infinity when parsed as double", i)),
            _ => Ok(j),
        }
    }

    fn string(&self, begin: usize) -> Scan {
        let s = self.s;
        let mut i = begin;
        loop {
            match s.get(i) {
                None => return Err((END, s.len())),
                Some('"') => return Ok(i + 1),
                Some('\\') => match s.get(i + 1) {
                    None => return Err((END, s.len())),
                    Some('"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't') => i += 2,
                    Some('u')
                        if (i + 2..i + 6)
                            .all(|k| s.get(k).is_some_and(char::is_ascii_hexdigit)) =>
                    {
                        i += 6
                    }
                    Some(_) => return Err(("invalid escaped sequence in string", i)),
                },
                Some(&c) if c < ' ' => return Err(("unexpected control character in string", i)),
                Some(_) => i += 1,
            }
        }
    }

    fn object(&self, i: usize) -> Scan {
        let s = self.s;
        let mut i = skip_ws(s, i);
        if s.get(i) == Some(&'}') {
            return Ok(i + 1);
        }
        loop {
            if s.get(i) != Some(&'"') {
                return Err(self.at(i, "unexpected character, expected a string key"));
            }
            i = skip_ws(s, self.string(i + 1)?);
            if s.get(i) != Some(&':') {
                return Err(self.at(i, "unexpected character, expected ':' after key"));
            }
            i = skip_ws(s, self.value(skip_ws(s, i + 1))?);
            match s.get(i) {
                Some('}') => return Ok(i + 1),
                Some(',') => {
                    let comma = i;
                    i = skip_ws(s, i + 1);
                    if s.get(i) == Some(&'}') {
                        return Err(("trailing comma is not allowed", comma));
                    }
                }
                _ => return Err(self.at(i, "unexpected character, expected ',' or '}'")),
            }
        }
    }

    fn array(&self, i: usize) -> Scan {
        let s = self.s;
        let mut i = skip_ws(s, i);
        if s.get(i) == Some(&']') {
            return Ok(i + 1);
        }
        loop {
            i = skip_ws(s, self.value(i)?);
            match s.get(i) {
                Some(']') => return Ok(i + 1),
                Some(',') => {
                    let comma = i;
                    i = skip_ws(s, i + 1);
                    if s.get(i) == Some(&']') {
                        return Err(("trailing comma is not allowed", comma));
                    }
                }
                _ => return Err(self.at(i, "unexpected character, expected ',' or ']'")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case's message and position as CPython 3.11's `json.loads` and orjson 3 (in the venv of 0.5.23)
    /// report them for the same bytes; `None` where the decoder reads the body.
    #[test]
    fn both_decoders_stop_where_and_as_the_originals_do() {
        let data: Vec<serde_json::Value> =
            serde_json::from_str(include_str!("../../tests/data/json_errors.json")).expect("cases");
        let expect = |v: &serde_json::Value| -> Option<(String, usize)> {
            v.as_array().map(|p| {
                (
                    p[0].as_str().unwrap_or_default().to_owned(),
                    p[1].as_u64().unwrap_or(0) as usize,
                )
            })
        };
        for case in &data {
            let input = case["input"].as_str().expect("an input");
            for (decoder, key) in [
                (JsonDecoder::Stdlib, "json"),
                (JsonDecoder::Orjson, "orjson"),
            ] {
                let got = decode_error(input.as_bytes(), decoder).map(|(m, p)| (m.to_owned(), p));
                assert_eq!(got, expect(&case[key]), "{key} of {input:?}");
            }
        }
        assert!(data.len() > 50);
    }
}
