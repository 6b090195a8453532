//! A strict fast path for `/generate` bodies: the big token arrays are scanned by hand, the rest goes to serde.
//!
//! A 4,096-token body is almost entirely `output_token_logprobs` and `output_ids`, and serde_json
//! spends most of its time there. This module walks the top-level object and `meta_info` itself,
//! parses those arrays (and `input_token_logprobs`) with a tight loop, and copies every other
//! entry into a small JSON object that the derived serde impls then decode and validate as usual.
//!
//! It never decides that a body is wrong. Whenever anything is not the plain, valid case (an
//! escaped key, a `null` array, a number with more than 19 digits or an exponent beyond ±22, a
//! `\u` escape in a token text, a duplicate key, a syntax error) it returns `None`, and the caller
//! runs the serde_json path, which then produces the result or the precise typed error. On the
//! plain case the results are bit-identical to that path: numbers are converted exactly as
//! serde_json 1.0 does without `float_roundtrip` (`significand as f64` divided or multiplied by an
//! exact power of ten), which `tests` check on every fixture and on generated bodies.

use crate::wire::{GenerateResponse, MetaInfo, TokenLogprobs};

/// Decodes one response object, or `None` to send the body down the serde path.
pub(crate) fn response(body: &[u8]) -> Option<GenerateResponse> {
    let mut c = Cur { b: body, i: 0 };
    c.ws();
    let r = object(&mut c)?;
    c.ws();
    (c.i == body.len()).then_some(r)
}

/// Decodes an array of response objects (batch or `n > 1`), or `None`.
pub(crate) fn responses(body: &[u8]) -> Option<Vec<GenerateResponse>> {
    let mut c = Cur { b: body, i: 0 };
    c.ws();
    c.eat(b'[')?;
    c.ws();
    let mut out = Vec::new();
    if c.eat(b']').is_none() {
        loop {
            out.push(object(&mut c)?);
            c.ws();
            match c.next()? {
                b',' => c.ws(),
                b']' => break,
                _ => return None,
            }
        }
    }
    c.ws();
    (c.i == body.len()).then_some(out)
}

struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    #[inline]
    fn eat_null(&mut self) -> bool {
        let hit = self.b[self.i..].starts_with(b"null");
        if hit {
            self.i += 4;
        }
        hit
    }

    /// An object key without escapes; the cursor ends after the `:`.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let len = self.b[start..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if self.b[start + len] != b'"' {
            return None;
        }
        self.i = start + len + 1;
        self.ws();
        self.eat(b':')?;
        self.ws();
        let b: &'a [u8] = self.b;
        Some(&b[start..start + len])
    }

    /// Skips any JSON value without validating it (serde validates the copy later).
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => self.skip_string()?,
                        b'{' | b'[' => {
                            depth += 1;
                            self.i += 1;
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            self.i += 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                        _ => self.i += 1,
                    }
                }
            }
            _ => {
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    fn skip_string(&mut self) -> Option<()> {
        self.i += 1;
        loop {
            let n = self.b[self.i..]
                .iter()
                .position(|&c| c == b'"' || c == b'\\')?;
            self.i += n;
            if self.b[self.i] == b'"' {
                self.i += 1;
                return Some(());
            }
            self.i += 2;
        }
    }

    /// A token text: validated like serde_json would (no control characters, valid escapes,
    /// UTF-8), except that `\u` escapes are left to the serde path.
    fn token_text(&mut self) -> Option<()> {
        self.i += 1;
        let start = self.i;
        loop {
            let n = self.b[self.i..]
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            self.i += n;
            match self.b[self.i] {
                b'"' => break,
                b'\\' => match self.b.get(self.i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                    _ => return None,
                },
                _ => return None,
            }
        }
        let s = &self.b[start..self.i];
        self.i += 1;
        (s.is_ascii() || std::str::from_utf8(s).is_ok()).then_some(())
    }

    /// Appends decimal digits to `sig` (wrapping; callers reject more than 19 digits) and
    /// returns how many there were. Eight at a time where possible: a logprob as Python writes it
    /// has 16 or 17 of them.
    #[inline]
    fn digits(&mut self, sig: &mut u64) -> u32 {
        let start = self.i;
        while let Some(v) = self.b.get(self.i..self.i + 8).and_then(eight_digits) {
            *sig = sig.wrapping_mul(100_000_000).wrapping_add(v);
            self.i += 8;
        }
        while let Some(c @ b'0'..=b'9') = self.peek() {
            *sig = sig.wrapping_mul(10).wrapping_add((c - b'0') as u64);
            self.i += 1;
        }
        (self.i - start) as u32
    }

    /// A JSON number as serde_json turns it into an f64 (see the module docs), or `None` when it
    /// is malformed or outside the range where that conversion is a single exact operation.
    #[inline]
    fn number(&mut self) -> Option<f64> {
        let neg = self.eat(b'-').is_some();
        let mut sig: u64 = 0;
        let mut digits = 0u32;
        let mut exp: i32 = 0;
        match self.next()? {
            b'0' => {}
            c @ b'1'..=b'9' => {
                sig = (c - b'0') as u64;
                digits = 1 + self.digits(&mut sig);
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            let n = self.digits(&mut sig);
            if n == 0 {
                return None;
            }
            digits += n;
            exp -= n as i32;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            let neg_exp = match self.peek()? {
                b'-' => {
                    self.i += 1;
                    true
                }
                b'+' => {
                    self.i += 1;
                    false
                }
                _ => false,
            };
            let start = self.i;
            let mut e: i32 = 0;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                e = e.saturating_mul(10).saturating_add((c - b'0') as i32);
                self.i += 1;
            }
            if self.i == start {
                return None;
            }
            exp = exp.saturating_add(if neg_exp { -e } else { e });
        }
        // 19 digits always fit a u64 (the wrapping ops above never wrapped), so this is the value
        // serde_json accumulates too.
        if digits > 19 || !(-22..=22).contains(&exp) {
            return None;
        }
        let f = sig as f64;
        let f = if exp >= 0 {
            f * POW10[exp as usize]
        } else {
            f / POW10[(-exp) as usize]
        };
        Some(if neg { -f } else { f })
    }

    /// A non-negative integer that fits a u32 and is followed by a delimiter.
    #[inline]
    fn uint(&mut self) -> Option<u32> {
        let mut v: u64 = match self.next()? {
            b'0' => 0,
            c @ b'1'..=b'9' => (c - b'0') as u64,
            _ => return None,
        };
        if v != 0 {
            while let Some(c @ b'0'..=b'9') = self.peek() {
                v = v * 10 + (c - b'0') as u64;
                if v > u32::MAX as u64 {
                    return None;
                }
                self.i += 1;
            }
        }
        match self.peek()? {
            b',' | b']' | b' ' | b'\n' | b'\r' | b'\t' => Some(v as u32),
            _ => None,
        }
    }

    /// `[id, ...]`
    fn ids(&mut self) -> Option<Vec<u32>> {
        self.eat(b'[')?;
        self.ws();
        let mut out = Vec::new();
        if self.eat(b']').is_some() {
            return Some(out);
        }
        loop {
            out.push(self.uint()?);
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b']' => return Some(out),
                _ => return None,
            }
        }
    }

    /// `[[logprob|null, id, text|null], ...]`
    fn triples(&mut self) -> Option<TokenLogprobs> {
        self.eat(b'[')?;
        self.ws();
        // A triple takes at least 12 bytes on the wire, and usually about 30; reserving for the
        // short case avoids most regrowth without over-reserving much.
        let cap = (self.b.len() - self.i) / 32;
        let mut out = TokenLogprobs {
            ids: Vec::with_capacity(cap),
            logprobs: Vec::with_capacity(cap),
            nulls: Vec::new(),
        };
        if self.eat(b']').is_some() {
            out.ids.shrink_to_fit();
            out.logprobs.shrink_to_fit();
            return Some(out);
        }
        loop {
            self.eat(b'[')?;
            self.ws();
            if self.eat_null() {
                out.nulls.push(out.ids.len());
                out.logprobs.push(f32::NAN);
            } else {
                out.logprobs.push(self.number()? as f32);
            }
            self.ws();
            self.eat(b',')?;
            self.ws();
            out.ids.push(self.uint()?);
            self.ws();
            self.eat(b',')?;
            self.ws();
            if !self.eat_null() {
                if self.peek()? != b'"' {
                    return None;
                }
                self.token_text()?;
            }
            self.ws();
            self.eat(b']')?;
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b']' => break,
                _ => return None,
            }
        }
        // The guess above is from the rest of the body, which in a batch holds other items too.
        if out.ids.capacity() > 2 * out.ids.len() + 64 {
            out.ids.shrink_to_fit();
            out.logprobs.shrink_to_fit();
        }
        Some(out)
    }
}

/// Collects the entries the fast path does not handle, as a JSON object for serde.
struct Rest {
    buf: Vec<u8>,
}

impl Rest {
    fn new() -> Rest {
        let mut buf = Vec::with_capacity(256);
        buf.push(b'{');
        Rest { buf }
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.buf.len() > 1 {
            self.buf.push(b',');
        }
        self.buf.push(b'"');
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(b"\":");
        self.buf.extend_from_slice(value);
    }

    fn finish(mut self) -> Vec<u8> {
        self.buf.push(b'}');
        self.buf
    }
}

/// Walks one object, handing `hot` keys to `on_hot` (which must consume the value) and copying
/// the rest. Returns the copied rest as a JSON object.
fn walk<'a>(
    c: &mut Cur<'a>,
    hot: &[&[u8]],
    mut on_hot: impl FnMut(usize, &mut Cur<'a>) -> Option<()>,
) -> Option<Vec<u8>> {
    c.eat(b'{')?;
    c.ws();
    let mut rest = Rest::new();
    let mut seen = 0u32;
    if c.eat(b'}').is_some() {
        return Some(rest.finish());
    }
    loop {
        let key = c.key()?;
        match hot.iter().position(|h| *h == key) {
            Some(k) => {
                // A duplicate key is an error in serde's derive; let that path report it.
                if seen & (1 << k) != 0 || c.peek()? == b'n' {
                    return None;
                }
                seen |= 1 << k;
                on_hot(k, c)?;
            }
            None => {
                let start = c.i;
                c.skip_value()?;
                rest.push(key, &c.b[start..c.i]);
            }
        }
        c.ws();
        match c.next()? {
            b',' => c.ws(),
            b'}' => return Some(rest.finish()),
            _ => return None,
        }
    }
}

fn object(c: &mut Cur<'_>) -> Option<GenerateResponse> {
    let mut ids = None;
    let mut meta = None;
    let rest = walk(c, &[b"output_ids", b"meta_info"], |k, c| {
        if k == 0 {
            ids = Some(c.ids()?);
        } else {
            meta = Some(meta_info(c)?);
        }
        Some(())
    })?;
    let mut r: GenerateResponse = serde_json::from_slice(&rest).ok()?;
    r.output_ids = ids;
    r.meta_info = meta;
    Some(r)
}

fn meta_info(c: &mut Cur<'_>) -> Option<MetaInfo> {
    let mut out_lps = None;
    let mut in_lps = None;
    let rest = walk(
        c,
        &[b"output_token_logprobs", b"input_token_logprobs"],
        |k, c| {
            let t = c.triples()?;
            if k == 0 {
                out_lps = Some(t);
            } else {
                in_lps = Some(t);
            }
            Some(())
        },
    )?;
    let mut m: MetaInfo = serde_json::from_slice(&rest).ok()?;
    m.output_token_logprobs = out_lps;
    m.input_token_logprobs = in_lps;
    Some(m)
}

/// The value of eight ASCII digits, or `None` if any byte is not a digit (the SWAR trick from
/// simdjson: the first byte is the least significant in little-endian order).
#[inline]
fn eight_digits(b: &[u8]) -> Option<u64> {
    let v = u64::from_le_bytes(b.try_into().ok()?);
    let all_digits = ((v & 0xF0F0_F0F0_F0F0_F0F0)
        | ((v.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) >> 4))
        == 0x3333_3333_3333_3333;
    if !all_digits {
        return None;
    }
    let v = (v & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561) >> 8;
    let v = (v & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601) >> 16;
    Some((v & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001) >> 32)
}

/// Exact powers of ten; every one up to 1e22 is representable in an f64, and serde_json's table
/// holds the same values.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

#[cfg(test)]
mod tests {
    use super::eight_digits;

    #[test]
    fn eight_digits_reads_digits_and_nothing_else() {
        assert_eq!(eight_digits(b"00000000"), Some(0));
        assert_eq!(eight_digits(b"12345678"), Some(12_345_678));
        assert_eq!(eight_digits(b"99999999"), Some(99_999_999));
        assert_eq!(eight_digits(b"90000001"), Some(90_000_001));
        // The bytes just below '0' and just above '9', in every position, and the usual neighbours.
        for bad in [
            b'/', b':', b'.', b'-', b'e', b',', b']', b' ', 0x00, 0xB0, 0xFF,
        ] {
            for at in 0..8 {
                let mut b = *b"12345678";
                b[at] = bad;
                assert_eq!(eight_digits(&b), None, "{:?}", String::from_utf8_lossy(&b));
            }
        }
        assert_eq!(eight_digits(b"1234567"), None);
    }
}
