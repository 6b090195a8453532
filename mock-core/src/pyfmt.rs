//! Python `repr`/`str` formatting of numbers, strings and lists, so error messages read exactly as SGLang's f-strings do.

use std::fmt::Write;

/// A JSON number as Python sees it after `orjson.loads`: integers stay `int`, everything else is `float`; and
/// `true`/`false`, Python's `bool`, which compares as an `int`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PyNum {
    Int(i64),
    Float(f64),
    /// Python's `bool`, an `int` that prints as `True` or `False`.
    Bool(bool),
}

impl PyNum {
    pub(crate) fn as_f64(self) -> f64 {
        match self {
            PyNum::Int(i) => i as f64,
            PyNum::Float(f) => f,
            PyNum::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// The value as an `int` (a float is truncated).
    pub(crate) fn as_int(self) -> i64 {
        match self {
            PyNum::Int(i) => i,
            PyNum::Float(f) => f as i64,
            PyNum::Bool(b) => i64::from(b),
        }
    }
}

impl std::fmt::Display for PyNum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PyNum::Int(i) => write!(f, "{i}"),
            PyNum::Float(x) => f.write_str(&float_repr(*x)),
            PyNum::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
        }
    }
}

/// `repr(x)` for a Python float: shortest round-trip digits, fixed notation for exponents in [-4, 16),
/// scientific (`1e-05`, `1.5e+16`) otherwise.
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "1.5e-7" or "-1e16".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

/// `repr(s)` for a Python str: single quotes unless the string contains a single quote and no double quote.
pub(crate) fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `repr(b)` for Python bytes: `b'...'`, quoted as a str is, every byte outside printable ASCII as `\xNN`.
pub fn bytes_repr(bytes: &[u8]) -> String {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(bytes.len() + 3);
    out.push('b');
    out.push(quote);
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b if char::from(b) == quote => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(char::from(b)),
            b => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push(quote);
    out
}

/// `repr(list)` of strings: `['a', 'b']`.
pub(crate) fn str_list_repr<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let parts: Vec<String> = items.into_iter().map(str_repr).collect();
    format!("[{}]", parts.join(", "))
}

/// `repr(list)` of integers: `[1, 2, 3]`.
pub(crate) fn int_list_repr<T: std::fmt::Display>(items: &[T]) -> String {
    let mut out = String::with_capacity(items.len() * 7 + 2);
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{item}");
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (1.0, "1.0"),
            (-1.0, "-1.0"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123.456, "123.456"),
            (2.5e300, "2.5e+300"),
            (f64::INFINITY, "inf"),
            (0.1, "0.1"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "repr({x})");
        }
    }

    #[test]
    fn strings_print_like_python() {
        assert_eq!(str_repr("a"), "'a'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a\nb"), "'a\\nb'");
        // Python prints `repr(b'{"a": 1}\n\xc3\xa9\'')` as `b'{"a": 1}\n\xc3\xa9\''`.
        assert_eq!(
            bytes_repr("{\"a\": 1}\né'".as_bytes()),
            "b'{\"a\": 1}\\n\\xc3\\xa9\\''"
        );
        assert_eq!(bytes_repr(b"it's"), "b\"it's\"");
        assert_eq!(str_list_repr(["x", "y"]), "['x', 'y']");
        assert_eq!(int_list_repr(&[1, 2, 3]), "[1, 2, 3]");
    }
}
