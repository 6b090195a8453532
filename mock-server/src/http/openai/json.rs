//! How the typed OpenAI answers are written: compact JSON in the key order each type lists, scalars through
//! serde_json (so strings and floats read exactly as serde_json writes them), and, for a fault, a bare token
//! that JSON itself cannot express (Python's `NaN`, a number kept as its fault spec wrote it).

/// A value of an OpenAI answer, written as JSON.
pub(crate) trait Json {
    fn write(&self, out: &mut Vec<u8>);

    /// A member whose value says it is absent is left out of its object (an unset msgspec field).
    fn absent(&self) -> bool {
        false
    }
}

/// An object: `fields` in order, those whose value is [`Json::absent`] left out.
pub(crate) fn object(out: &mut Vec<u8>, fields: &[(&str, &dyn Json)]) {
    out.push(b'{');
    let mut first = true;
    for (key, value) in fields {
        if value.absent() {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        key.write(out);
        out.push(b':');
        value.write(out);
    }
    out.push(b'}');
}

/// A member that is either left out or written (`null` included, when `T` is an `Option`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Omit<T> {
    Absent,
    Present(T),
}

impl Omit<Null> {
    /// A `null` member where `present`, else none.
    pub(crate) fn null_when(present: bool) -> Omit<Null> {
        if present {
            Omit::Present(Null)
        } else {
            Omit::Absent
        }
    }
}

impl<T: Json> Json for Omit<T> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Omit::Absent => Null.write(out),
            Omit::Present(value) => value.write(out),
        }
    }

    fn absent(&self) -> bool {
        matches!(self, Omit::Absent)
    }
}

/// A `null`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Null;

impl Json for Null {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"null");
    }
}

/// JSON text written exactly as it stands: a fault's literal (short, checked by its parser), or a chat
/// answer's `meta_info`, which the native encoder wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bare(pub(crate) String);

impl Json for Bare {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0.as_bytes());
    }
}

/// Scalars as serde_json writes them; writing into a `Vec` cannot fail.
fn serde<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, value);
}

macro_rules! serde_scalars {
    ($($ty:ty),*) => {$(
        impl Json for $ty {
            fn write(&self, out: &mut Vec<u8>) {
                serde(self, out);
            }
        }
    )*};
}

serde_scalars!(str, String, u8, u16, u32, u64, usize, i32, f64);

impl<T: Json + ?Sized> Json for &T {
    fn write(&self, out: &mut Vec<u8>) {
        (**self).write(out);
    }

    fn absent(&self) -> bool {
        (**self).absent()
    }
}

impl<T: Json> Json for Option<T> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            None => Null.write(out),
            Some(value) => value.write(out),
        }
    }
}

impl<T: Json> Json for [T] {
    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, value) in self.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            value.write(out);
        }
        out.push(b']');
    }
}

impl<T: Json> Json for Vec<T> {
    fn write(&self, out: &mut Vec<u8>) {
        self.as_slice().write(out);
    }
}

/// The bytes of a typed answer.
pub(crate) fn to_vec(value: &dyn Json) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    value.write(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sample {
        text: String,
        skipped: Omit<u32>,
        nothing: Omit<Option<u32>>,
        list: Vec<f64>,
        bare: Bare,
    }

    impl Json for Sample {
        fn write(&self, out: &mut Vec<u8>) {
            object(
                out,
                &[
                    ("text", &self.text),
                    ("skipped", &self.skipped),
                    ("nothing", &self.nothing),
                    ("list", &self.list),
                    ("bare", &self.bare),
                ],
            );
        }
    }

    /// The writer agrees with serde_json's compact output for what both can write, keeps the listed order,
    /// leaves absent members out and writes a bare token as it stands.
    #[test]
    fn writes_as_serde_json_in_listed_order() {
        let sample = Sample {
            text: "a \"quoted\"\n\u{1} é".to_owned(),
            skipped: Omit::Absent,
            nothing: Omit::Present(None),
            list: vec![-0.5, 1e-7, 3.0],
            bare: Bare("NaN".to_owned()),
        };
        let expected = format!(
            r#"{{"text":{},"nothing":null,"list":{},"bare":NaN}}"#,
            serde_json::to_string(&sample.text).unwrap(),
            serde_json::to_string(&sample.list).unwrap(),
        );
        assert_eq!(String::from_utf8(to_vec(&sample)).unwrap(), expected);
    }
}
