//! The samples an audit reads, in the field names of the trainers that make them (`WITNESS.md` section 3.1):
//! slime's and miles' `Sample.to_dict()`, verl's `AgentLoopOutput`, AReaL's `ModelResponse` and its trajectory
//! dicts, and a generic form. Each becomes one [`AuditSample`]: the prompt, the ids the per-token arrays cover,
//! and those arrays.
//!
//! A numeric column is a JSON list (nested for a tensor), or a typed array `{"dtype", "shape", "b64"}` of
//! little-endian values, which is how the Python package sends NumPy and torch arrays and long lists.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

/// What an audit tolerates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditOptions {
    /// Generated tokens with loss mask 0 are deliberate (slime's `--mask-offpolicy-in-partial-rollout`, an
    /// overlong filter), not a `generated-untrained` problem.
    pub allow_masked_generated: bool,
}

/// The trainer whose field names a sample uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// slime's (and miles') `Sample`: `tokens` (prompt then response), `response_length`, `loss_mask`,
    /// `rollout_log_probs`, `rollout_routed_experts` (`[len(tokens) - 1, layers, topk]`), `index`.
    Slime,
    /// verl's `AgentLoopOutput`: `prompt_ids`, `response_ids`, `response_mask`, `response_logprobs`,
    /// `routed_experts`.
    Verl,
    /// AReaL's `ModelResponse`: `input_tokens`, `output_tokens` (all trained), `output_logprobs`,
    /// `output_versions`, `routed_experts` (`[prompt + output - 1, layers * topk]`).
    ArealResponse,
    /// AReaL's trajectory dict: `input_ids`, `loss_mask`, `logprobs`, `versions` over the whole sequence (prompt
    /// positions are mask 0, logprob 0.0, version -1), with or without a batch dimension of 1.
    ArealTrajectory,
    /// `prompt_ids`, `response_ids`, `loss_mask`, `logprobs`, optional `routed_experts` and per-token
    /// `versions`.
    Generic,
}

impl Layout {
    /// Every layout, in the order detection tries them.
    pub const ALL: [Layout; 5] = [
        Layout::Slime,
        Layout::Verl,
        Layout::ArealResponse,
        Layout::ArealTrajectory,
        Layout::Generic,
    ];

    /// The layout's name in requests and reports.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Slime => "slime",
            Layout::Verl => "verl",
            Layout::ArealResponse => "areal-response",
            Layout::ArealTrajectory => "areal-trajectory",
            Layout::Generic => "generic",
        }
    }

    /// The names of a sample's fields in this layout, for reports.
    pub fn fields(self) -> Fields {
        match self {
            Layout::Slime => Fields {
                tokens: "tokens",
                loss_mask: Some("loss_mask"),
                logprobs: "rollout_log_probs",
                routed_experts: "rollout_routed_experts",
                versions: "weight_version_spans",
            },
            Layout::Verl => Fields {
                tokens: "response_ids",
                loss_mask: Some("response_mask"),
                logprobs: "response_logprobs",
                routed_experts: "routed_experts",
                versions: "versions",
            },
            Layout::ArealResponse => Fields {
                tokens: "output_tokens",
                loss_mask: None,
                logprobs: "output_logprobs",
                routed_experts: "routed_experts",
                versions: "output_versions",
            },
            Layout::ArealTrajectory => Fields {
                tokens: "input_ids",
                loss_mask: Some("loss_mask"),
                logprobs: "logprobs",
                routed_experts: "routed_experts",
                versions: "versions",
            },
            Layout::Generic => Fields {
                tokens: "response_ids",
                loss_mask: Some("loss_mask"),
                logprobs: "logprobs",
                routed_experts: "routed_experts",
                versions: "versions",
            },
        }
    }

    /// The layout of a sample with these keys: an explicit one wins, then the first whose keys it has.
    fn detect(raw: &RawSample) -> Option<Layout> {
        let has = |c: &Option<Column>| c.is_some();
        if raw.response_length.is_some() && has(&raw.tokens) {
            Some(Layout::Slime)
        } else if has(&raw.input_tokens) && has(&raw.output_tokens) {
            Some(Layout::ArealResponse)
        } else if has(&raw.prompt_ids)
            && has(&raw.response_ids)
            && (raw.response_mask.is_some() || raw.response_logprobs.is_some())
        {
            Some(Layout::Verl)
        } else if has(&raw.input_ids) && has(&raw.loss_mask) {
            Some(Layout::ArealTrajectory)
        } else if has(&raw.prompt_ids) && has(&raw.response_ids) {
            Some(Layout::Generic)
        } else {
            None
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a layout calls a sample's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    /// The ids the per-token arrays cover (for slime, `tokens` holds the prompt too).
    pub tokens: &'static str,
    pub loss_mask: Option<&'static str>,
    pub logprobs: &'static str,
    pub routed_experts: &'static str,
    pub versions: &'static str,
}

/// One sample as the audit reads it, whatever its layout.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuditSample {
    /// How reports name it: its `id` or `index` when it has one, else its position in the input.
    pub id: String,
    pub layout: Option<Layout>,
    /// The ids before the first position the per-token arrays cover.
    pub prompt: Vec<u32>,
    /// The ids the per-token arrays cover: the response (the whole sequence for AReaL's trajectories).
    pub response: Vec<u32>,
    /// 1 for a trained token, 0 for one that is not; one per response id (unless the sample is wrong).
    pub loss_mask: Vec<u8>,
    /// The rollout logprobs; `None` when the sample has none (the key is absent or `None`). An element is
    /// `None` where the list holds `null`.
    pub logprobs: Option<Vec<Option<f32>>>,
    /// The routed experts, if the sample has them: row `r` is sequence position `r` (prompt included).
    pub routed_experts: Option<Rows>,
    /// The weight version of each response token, if the sample says; `None` where it labels a token as not
    /// generated (AReaL's `-1`).
    pub versions: Option<Vec<Option<VersionLabel>>>,
    /// The `weight_version` of each request that answered the sample, in order (slime's
    /// `Sample.weight_versions`, one per turn), if the sample keeps them (an empty list keeps none).
    pub turn_versions: Option<Vec<String>>,
}

/// A weight-version label as a trainer writes it (`WITNESS.md` section 3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionLabel {
    /// A version string: the `weight_version` the server reported (slime, the rollout client's spans).
    Name(String),
    /// A whole number: which weights the server had loaded, counted in weight updates (AReaL's and verl's
    /// integer versions, 0 for the weights the server started with); it also stands for a version string that
    /// is that number (a trainer that sends `weight_version=str(k)`).
    Number(u64),
}

impl VersionLabel {
    /// Whether the label names the weights of `span`.
    pub fn names(&self, span: &super::ledger::Span) -> bool {
        match self {
            VersionLabel::Name(name) => *name == span.version,
            VersionLabel::Number(n) => *n == span.weights || span.version == n.to_string(),
        }
    }

    /// The label as the sample holds it: the string, or the number.
    pub fn text(&self) -> String {
        match self {
            VersionLabel::Name(name) => name.clone(),
            VersionLabel::Number(n) => n.to_string(),
        }
    }

    fn of(label: Label) -> Option<VersionLabel> {
        match label {
            Label::Text(t) => Some(VersionLabel::Name(t)),
            Label::Number(n) if n >= 0.0 && n.fract() == 0.0 => {
                Some(VersionLabel::Number(n as u64))
            }
            Label::Number(_) => None,
        }
    }
}

impl fmt::Display for VersionLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionLabel::Name(name) => write!(f, "{name:?}"),
            VersionLabel::Number(n) => write!(f, "{n}"),
        }
    }
}

impl AuditSample {
    /// The field names of the sample's layout (the generic ones when it has none).
    pub fn fields(&self) -> Fields {
        self.layout.unwrap_or(Layout::Generic).fields()
    }

    /// Whether response position `i` is trained (a position past the mask is not).
    pub fn trained(&self, i: usize) -> bool {
        self.loss_mask.get(i) == Some(&1)
    }
}

/// Routed experts as rows of equal length.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rows {
    pub data: Vec<i32>,
    pub row_len: usize,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.row_len).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn row(&self, r: usize) -> &[i32] {
        self.data
            .get(r * self.row_len..(r + 1) * self.row_len)
            .unwrap_or(&[])
    }
}

/// A sample the audit cannot read, or a body it cannot read samples from: where, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.place())]
pub struct SampleError {
    /// The sample's position in the input; `None` when the body itself cannot be read.
    pub sample: Option<usize>,
    /// The field, with the position in it where one is known (`rollout_log_probs[7]`); empty when the sample
    /// as a whole is wrong.
    pub field: String,
    pub message: String,
}

impl SampleError {
    /// `samples[3].rollout_log_probs[7]: ...`, `samples[3]: ...` or `the body: ...`.
    fn place(&self) -> String {
        match (self.sample, self.field.as_str()) {
            (Some(k), "") => format!("samples[{k}]: {}", self.message),
            (Some(k), field) => format!("samples[{k}].{field}: {}", self.message),
            (None, _) => format!("the body: {}", self.message),
        }
    }
}

/// What is wrong inside a column: the position (`[7]`, `[0][3]`; empty for the column as a whole) and what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bad {
    at: String,
    message: String,
}

impl Bad {
    fn whole(message: String) -> Bad {
        Bad {
            at: String::new(),
            message,
        }
    }
}

/// `[2][1]` for the index path `[2, 1]`.
fn path(indices: &[usize]) -> String {
    indices.iter().map(|i| format!("[{i}]")).collect()
}

/// A value as a report shows it: `null` for a `null`, else the number.
fn shown(v: f64, null: bool) -> String {
    if null {
        "null".to_owned()
    } else {
        format!("{v}")
    }
}

/// A numeric column: its values (nulls as NaN, listed in `nulls`) and its shape.
///
/// A value that cannot stand in a column (a string, an object, a list where numbers stand) does not fail the
/// JSON reader: the first one is kept in `bad`, with its position, and the rest of the column is skipped, so
/// that the sample's reader can name the field it is in.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Column {
    values: Vec<f64>,
    nulls: Vec<usize>,
    shape: Vec<usize>,
    /// While a list is read: the depth its numbers stand at, once one was read.
    leaf: Option<usize>,
    /// While a list is read: the index of the element being read at each depth.
    at: Vec<usize>,
    /// The strings that stand where numbers do, by value index (their value is NaN): only a column of version
    /// labels may hold them.
    texts: Vec<(usize, String)>,
    /// The first value that cannot stand in a column.
    bad: Option<Bad>,
    /// A leading batch dimension of 1 was dropped ([`Column::unbatched`]).
    batched: bool,
}

impl Column {
    /// Keeps the first bad value, at the element being read to `depth`.
    fn fail(&mut self, depth: usize, message: String) {
        if self.bad.is_none() {
            let at = path(&self.at[..depth.min(self.at.len())]);
            self.bad = Some(Bad { at, message });
        }
    }

    /// The column, or its first bad value.
    fn checked(self) -> Result<Column, Bad> {
        match self.bad {
            Some(bad) => Err(bad),
            None => Ok(self),
        }
    }

    /// The column of numbers, or its first bad value (a string among them is one).
    fn numeric(self) -> Result<Column, Bad> {
        let column = self.checked()?;
        match column.texts.first() {
            Some((i, text)) => Err(Bad {
                at: column.position(*i),
                message: format!(
                    "expected a number, got the string {text:?} (only \"NaN\", \"Infinity\" and \"-Infinity\" \
                     stand for numbers)"
                ),
            }),
            None => Ok(column),
        }
    }

    /// The position of flat value `i` in the column's shape: `[3]`, `[0][3]`.
    fn position(&self, i: usize) -> String {
        let mut rest = i;
        let mut indices = vec![0; self.shape.len()];
        for (slot, &dim) in indices.iter_mut().zip(&self.shape).rev() {
            *slot = rest % dim.max(1);
            rest /= dim.max(1);
        }
        path(&indices)
    }
}

impl<'de> Deserialize<'de> for Column {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Column, D::Error> {
        deserializer.deserialize_any(ColumnVisitor)
    }
}

struct ColumnVisitor;

/// What a column must be, for the reports.
const A_COLUMN: &str =
    "a list of numbers (nested for a tensor) or a typed array {\"dtype\", \"shape\", \"b64\"}";

/// A column that is a single value: bad as a whole.
fn not_a_column(got: String) -> Column {
    Column {
        bad: Some(Bad::whole(format!("expected {A_COLUMN}, got {got}"))),
        shape: vec![0],
        ..Column::default()
    }
}

impl<'de> Visitor<'de> for ColumnVisitor {
    type Value = Column;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(A_COLUMN)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Column, E> {
        Ok(not_a_column(format!("the number {v}")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Column, E> {
        Ok(not_a_column(format!("the number {v}")))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Column, E> {
        Ok(not_a_column(format!("the number {v}")))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Column, E> {
        Ok(not_a_column(format!("{v}")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Column, E> {
        Ok(not_a_column(format!("the string {v:?}")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Column, A::Error> {
        let mut column = Column::default();
        Level {
            column: &mut column,
            depth: 0,
        }
        .visit_seq(seq)?;
        if column.shape.is_empty() {
            column.shape.push(0);
        }
        Ok(column)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Column, A::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Typed {
            dtype: String,
            shape: Vec<usize>,
            b64: String,
        }
        let typed = Typed::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(
            typed_column(&typed.dtype, typed.shape, &typed.b64).unwrap_or_else(|message| Column {
                bad: Some(Bad::whole(message)),
                shape: vec![0],
                ..Column::default()
            }),
        )
    }
}

/// One nesting level of a list column being read: each element goes straight into `column` (a number, or
/// `null` as NaN listed in `nulls`, or a list one level deeper), and every list of a level must have the length
/// the first one had (`column.shape[depth]`), so that the column is rectangular. Once the column holds a bad
/// value, the rest is read and dropped.
struct Level<'a> {
    column: &'a mut Column,
    depth: usize,
}

impl Level<'_> {
    /// A scalar at this level: numbers stand at one depth only, under lists that are the column's whole shape.
    fn scalar(self, value: f64, null: bool) {
        let Level { column, depth } = self;
        if column.bad.is_some() {
            return;
        }
        let leaf = *column.leaf.get_or_insert(depth);
        if leaf != depth || column.shape.len() != depth {
            let message = format!(
                "a number where the first element had shape {:?}: a column is a rectangular list",
                &column.shape[depth.min(column.shape.len())..]
            );
            column.fail(depth, message);
            return;
        }
        if null {
            column.nulls.push(column.values.len());
        }
        column.values.push(value);
    }

    /// A value that cannot stand in a column.
    fn wrong(self, got: String) {
        let message = format!("expected a number, got {got}");
        self.column.fail(self.depth, message);
    }
}

impl<'de> de::DeserializeSeed<'de> for Level<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Level<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number, null or a list")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(v, false);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(v as f64, false);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(v as f64, false);
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(f64::from(u8::from(v)), false);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar(f64::NAN, true);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let value = match v {
            "NaN" | "nan" => f64::NAN,
            "Infinity" | "inf" => f64::INFINITY,
            "-Infinity" | "-inf" => f64::NEG_INFINITY,
            _ => {
                // Kept for a column of version labels; every other column refuses it (`Column::numeric`).
                let column = &mut *self.column;
                let before = column.values.len();
                Level {
                    column: &mut *column,
                    depth: self.depth,
                }
                .scalar(f64::NAN, false);
                if column.values.len() > before {
                    column.texts.push((before, v.to_owned()));
                }
                return Ok(());
            }
        };
        self.scalar(value, false);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {}
        self.wrong("an object".to_owned());
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Level { column, depth } = self;
        let skip = |seq: &mut A| -> Result<(), A::Error> {
            while seq.next_element::<de::IgnoredAny>()?.is_some() {}
            Ok(())
        };
        if column.bad.is_some() {
            return skip(&mut seq);
        }
        if column.leaf.is_some_and(|leaf| leaf <= depth) {
            column.fail(
                depth,
                "a list where the first element had a number: a column is a rectangular list"
                    .to_owned(),
            );
            return skip(&mut seq);
        }
        // The first list of a level sets its length for the others.
        let first = column.shape.len() == depth;
        if first {
            column.shape.push(0);
        }
        // `at[depth]` is the element being read; deeper levels keep their own indices after it.
        column.at.truncate(depth);
        column.at.push(0);
        let mut len = 0;
        while seq
            .next_element_seed(Level {
                column: &mut *column,
                depth: depth + 1,
            })?
            .is_some()
        {
            len += 1;
            column.at[depth] = len;
        }
        column.at.truncate(depth);
        if column.bad.is_some() {
            return Ok(());
        }
        if first {
            column.shape[depth] = len;
        } else if column.shape[depth] != len {
            let message = format!(
                "a list of {len} where the first had {}: a column is a rectangular list",
                column.shape[depth]
            );
            column.fail(depth, message);
        }
        Ok(())
    }
}

/// The values of a typed array: `dtype` one of NumPy's little-endian names (`float32`, `float64`, `int16`,
/// `int32`, `int64`, `uint8`, `bool`), `shape` its dimensions, `b64` the standard base64 of its bytes.
fn typed_column(dtype: &str, shape: Vec<usize>, b64: &str) -> Result<Column, String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("the typed array's b64 is not base64: {e}"))?;
    let size = match dtype {
        "float64" | "int64" => 8,
        "float32" | "int32" => 4,
        "int16" => 2,
        "uint8" | "bool" => 1,
        other => {
            return Err(format!(
                "dtype {other:?} is not one of float32, float64, int16, int32, int64, uint8, bool"
            ));
        }
    };
    let count: usize = shape.iter().product();
    if bytes.len() != count * size {
        return Err(format!(
            "a {dtype} array of shape {shape:?} holds {} bytes, not {}",
            count * size,
            bytes.len()
        ));
    }
    let values = bytes
        .chunks_exact(size)
        .map(|b| match dtype {
            "float64" => f64::from_le_bytes(b.try_into().unwrap_or_default()),
            "float32" => f64::from(f32::from_le_bytes(b.try_into().unwrap_or_default())),
            "int64" => i64::from_le_bytes(b.try_into().unwrap_or_default()) as f64,
            "int32" => f64::from(i32::from_le_bytes(b.try_into().unwrap_or_default())),
            "int16" => f64::from(i16::from_le_bytes(b.try_into().unwrap_or_default())),
            _ => f64::from(b[0]),
        })
        .collect();
    Ok(Column {
        values,
        nulls: Vec::new(),
        shape,
        ..Column::default()
    })
}

impl Column {
    /// Without a leading batch dimension of 1 (`[1, L]` is `[L]`).
    fn unbatched(mut self) -> Column {
        if self.shape.len() >= 2 && self.shape[0] == 1 {
            self.shape.remove(0);
            self.batched = true;
        }
        self
    }

    /// The position of value `i` in the column as it was sent: `[i]`, or `[0][i]` under a batch dimension.
    fn at(&self, i: usize) -> String {
        if self.batched {
            format!("[0][{i}]")
        } else {
            format!("[{i}]")
        }
    }

    /// One value per token (a batch dimension of 1 dropped), each read by `read` from its value and whether it
    /// was `null` (then the value is NaN); what `read` refuses is bad at its position.
    fn per_token<T>(self, read: impl Fn(f64, bool) -> Result<T, String>) -> Result<Vec<T>, Bad> {
        self.numeric()?.labels(|v, null, _| read(v, null))
    }

    /// As [`Column::per_token`], with the string at each position where the column holds one.
    fn labels<T>(
        self,
        read: impl Fn(f64, bool, Option<&str>) -> Result<T, String>,
    ) -> Result<Vec<T>, Bad> {
        let column = self.checked()?.unbatched();
        if column.shape.len() != 1 {
            return Err(Bad::whole(format!(
                "has shape {:?}; one value per token was expected",
                column.shape
            )));
        }
        let mut texts = column.texts.iter().peekable();
        column
            .values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let text = texts.next_if(|(at, _)| *at == i).map(|(_, t)| t.as_str());
                read(v, column.nulls.binary_search(&i).is_ok(), text).map_err(|message| Bad {
                    at: column.at(i),
                    message,
                })
            })
            .collect()
    }

    fn ids(self) -> Result<Vec<u32>, Bad> {
        self.per_token(|v, null| {
            if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
                Ok(v as u32)
            } else {
                Err(format!("expected a token id, got {}", shown(v, null)))
            }
        })
    }

    fn mask(self) -> Result<Vec<u8>, Bad> {
        self.per_token(|v, null| match v {
            0.0 => Ok(0),
            1.0 => Ok(1),
            _ => Err(format!(
                "expected 0 or 1 (a loss mask holds 0 and 1), got {}",
                shown(v, null)
            )),
        })
    }

    fn logprobs(self) -> Result<Vec<Option<f32>>, Bad> {
        self.per_token(|v, null| Ok((!null).then_some(v as f32)))
    }

    /// Version labels: a string, or a whole number (AReaL's), none where it is negative (AReaL's `-1` for a
    /// token no version made) or `null`.
    fn versions(self) -> Result<Vec<Option<VersionLabel>>, Bad> {
        self.labels(|v, null, text| match text {
            Some(text) => Ok(Some(VersionLabel::Name(text.to_owned()))),
            None if null || v < 0.0 => Ok(None),
            None if v.fract() == 0.0 => Ok(Some(VersionLabel::Number(v as u64))),
            None => Err(format!(
                "expected a weight version (a string, or a whole number of weight updates), got {v}"
            )),
        })
    }

    /// Rows of expert ids. Not unbatched: a leading 1 is one position (`[1, layers, topk]`), as no framework
    /// batches a sample's routes.
    fn rows(self) -> Result<Rows, Bad> {
        let column = self.numeric()?;
        if column.shape.len() < 2 {
            return Err(Bad::whole(format!(
                "has shape {:?}; rows of expert ids ([positions, layers, topk] or [positions, layers * \
                 topk]) were expected",
                column.shape
            )));
        }
        let row_len = column.shape[1..].iter().product();
        let data = column
            .values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if v.fract() == 0.0 && (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&v) {
                    Ok(v as i32)
                } else {
                    let null = column.nulls.binary_search(&i).is_ok();
                    Err(Bad {
                        at: column.position(i),
                        message: format!("expected an expert id, got {}", shown(v, null)),
                    })
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Rows { data, row_len })
    }
}

/// A version label: a string, or a number (AReaL counts versions).
#[derive(Debug, Clone, PartialEq)]
enum Label {
    Text(String),
    Number(f64),
}

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Label, D::Error> {
        struct LabelVisitor;
        impl Visitor<'_> for LabelVisitor {
            type Value = Label;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Label, E> {
                Ok(Label::Text(v.to_owned()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Label, E> {
                Ok(Label::Number(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Label, E> {
                Ok(Label::Number(v as f64))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Label, E> {
                Ok(Label::Number(v as f64))
            }
        }
        deserializer.deserialize_any(LabelVisitor)
    }
}

/// `{"version", "start", "end"}`: response tokens `start..end` came from `version` (the rollout client's
/// `weight_version_spans`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct RawSpan {
    version: Label,
    start: usize,
    end: usize,
}

/// Every key any layout reads; the others are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawSample {
    layout: Option<Layout>,
    id: Option<Label>,
    index: Option<Label>,
    // slime, miles
    tokens: Option<Column>,
    response_length: Option<usize>,
    rollout_log_probs: Option<Column>,
    rollout_routed_experts: Option<Column>,
    weight_version_spans: Option<Vec<RawSpan>>,
    weight_versions: Option<Vec<String>>,
    // verl
    prompt_ids: Option<Column>,
    response_ids: Option<Column>,
    response_mask: Option<Column>,
    response_logprobs: Option<Column>,
    // AReaL
    input_tokens: Option<Column>,
    output_tokens: Option<Column>,
    output_logprobs: Option<Column>,
    output_versions: Option<Column>,
    input_ids: Option<Column>,
    // shared
    loss_mask: Option<Column>,
    logprobs: Option<Column>,
    routed_experts: Option<Column>,
    versions: Option<Column>,
}

fn label(l: Label) -> String {
    match l {
        Label::Text(t) => t,
        Label::Number(n) => format!("{n}"),
    }
}

/// Reads one sample (a JSON object) in `layout`, or in the layout its keys show.
pub fn parse_sample(
    json: &[u8],
    position: usize,
    layout: Option<Layout>,
) -> Result<AuditSample, SampleError> {
    let raw: RawSample =
        serde_json::from_slice(json).map_err(|e| {
            match serde_json::from_slice::<serde_json::Value>(json) {
                Ok(value) => explain(value, position, &e),
                Err(syntax) => SampleError {
                    sample: Some(position),
                    field: String::new(),
                    message: format!("not JSON: {syntax}"),
                },
            }
        })?;
    from_raw(raw, position, layout)
}

/// The samples of a JSON list, each numbered by its position.
fn from_raws(
    raws: Vec<RawSample>,
    layout: Option<Layout>,
) -> Result<Vec<AuditSample>, SampleError> {
    raws.into_iter()
        .enumerate()
        .map(|(i, raw)| from_raw(raw, i, layout))
        .collect()
}

/// Why the samples of a list the reader refused cannot be read: the first sample it refuses, explained by
/// [`explain`]; the reader's own error when the list is not JSON, or when every sample reads on its own.
fn explain_list(
    samples: Result<Vec<serde_json::Value>, serde_json::Error>,
    err: serde_json::Error,
) -> SampleError {
    let body = |message: String| SampleError {
        sample: None,
        field: String::new(),
        message,
    };
    let Ok(samples) = samples else {
        return body(format!("not JSON: {err}"));
    };
    samples
        .into_iter()
        .enumerate()
        .find_map(|(k, value)| {
            RawSample::deserialize(&value)
                .err()
                .map(|e| explain(value, k, &e))
        })
        .unwrap_or_else(|| body(err.to_string()))
}

/// Why sample `position`, which the reader refused with `err`, cannot be read: each of its keys read on its
/// own, so that the error names the field it is in rather than a byte offset in the body.
fn explain(value: serde_json::Value, position: usize, err: &serde_json::Error) -> SampleError {
    let at = |field: String, message: String| SampleError {
        sample: Some(position),
        field,
        message,
    };
    let serde_json::Value::Object(map) = value else {
        let got = match value {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "a boolean",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Array(_) => "a list",
            serde_json::Value::Object(_) => "an object",
        };
        return at(
            String::new(),
            format!("expected a sample (a JSON object of one layout's keys), got {got}"),
        );
    };
    for (key, value) in map {
        let one = serde_json::Value::Object(serde_json::Map::from_iter([(key.clone(), value)]));
        // Read from a value, the error carries no position: it is the field's own message.
        if let Err(e) = RawSample::deserialize(one) {
            return at(key, e.to_string());
        }
    }
    at(String::new(), err.to_string())
}

/// What an audit request's body holds: the samples, and the options when the body gives them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub samples: Vec<AuditSample>,
    pub options: Option<AuditOptions>,
}

/// The samples of an audit request's body: a JSON list of samples, `{"samples": [...], "layout": ...,
/// "options": {...}}`, or JSON lines (one sample per line, blank lines skipped). `layout`, when given, is
/// every sample's.
pub fn parse_samples(body: &[u8], layout: Option<Layout>) -> Result<Batch, SampleError> {
    let lines = || {
        body.split(|&b| b == b'\n')
            .filter(|line| line.iter().any(|b| !b.is_ascii_whitespace()))
    };
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    match start.map(|i| body[i]) {
        None => Ok(Batch::default()),
        Some(b'[') => {
            let raws: Vec<RawSample> = serde_json::from_slice(body)
                .map_err(|e| explain_list(serde_json::from_slice(body), e))?;
            Ok(Batch {
                samples: from_raws(raws, layout)?,
                options: None,
            })
        }
        Some(_) if lines().nth(1).is_none() && has_samples_key(body) => {
            #[derive(Deserialize)]
            struct Wrapped<T> {
                samples: Vec<T>,
                #[serde(default)]
                layout: Option<Layout>,
                #[serde(default)]
                options: Option<AuditOptions>,
            }
            let wrapped: Wrapped<RawSample> = serde_json::from_slice(body).map_err(|e| {
                let values = serde_json::from_slice::<Wrapped<serde_json::Value>>(body);
                explain_list(values.map(|w| w.samples), e)
            })?;
            let layout = layout.or(wrapped.layout);
            Ok(Batch {
                samples: from_raws(wrapped.samples, layout)?,
                options: wrapped.options,
            })
        }
        Some(_) => {
            let samples = lines()
                .enumerate()
                .map(|(i, line)| parse_sample(line, i, layout))
                .collect::<Result<_, _>>()?;
            Ok(Batch {
                samples,
                options: None,
            })
        }
    }
}

/// Whether a one-line object has a top-level `"samples"` key: a wrapped batch rather than one sample.
fn has_samples_key(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Keys {
        #[serde(default)]
        samples: Option<de::IgnoredAny>,
    }
    serde_json::from_slice::<Keys>(body).is_ok_and(|k| k.samples.is_some())
}

fn from_raw(
    mut raw: RawSample,
    position: usize,
    layout: Option<Layout>,
) -> Result<AuditSample, SampleError> {
    let layout = layout
        .or(raw.layout)
        .or_else(|| Layout::detect(&raw))
        .ok_or_else(|| SampleError {
            sample: Some(position),
            field: String::new(),
            message: "no layout has these keys: a sample needs slime's `tokens` and `response_length`, \
                      verl's `prompt_ids`, `response_ids` and `response_mask`, AReaL's `input_tokens` and \
                      `output_tokens` (or `input_ids` and `loss_mask`), or `prompt_ids` and \
                      `response_ids`"
                .to_owned(),
        })?;
    let fail = |field: &str, bad: Bad| SampleError {
        sample: Some(position),
        field: format!("{field}{}", bad.at),
        message: bad.message,
    };
    let need = |column: Option<Column>, field: &str| {
        column.ok_or_else(|| {
            fail(
                field,
                Bad::whole(format!("missing: a {layout} sample has it")),
            )
        })
    };
    let id = raw
        .id
        .take()
        .or(raw.index.take())
        .map_or_else(|| position.to_string(), label);
    let mut sample = AuditSample {
        id,
        layout: Some(layout),
        ..AuditSample::default()
    };
    let ids = |column: Column, field: &str| column.ids().map_err(|m| fail(field, m));
    let lps = |column: Option<Column>, field: &str| {
        column
            .map(Column::logprobs)
            .transpose()
            .map_err(|m| fail(field, m))
    };
    let mask = |column: Column, field: &str| column.mask().map_err(|m| fail(field, m));
    let rows = |column: Option<Column>, field: &str| {
        column
            .map(Column::rows)
            .transpose()
            .map_err(|m| fail(field, m))
    };
    let versions = |column: Option<Column>, field: &str| {
        column
            .map(Column::versions)
            .transpose()
            .map_err(|m| fail(field, m))
    };
    match layout {
        Layout::Slime => {
            let tokens = ids(need(raw.tokens, "tokens")?, "tokens")?;
            let response_length = raw.response_length.unwrap_or(0);
            let split = tokens.len().checked_sub(response_length).ok_or_else(|| {
                fail(
                    "response_length",
                    Bad::whole(format!(
                        "{response_length} is more than the {} ids of tokens",
                        tokens.len()
                    )),
                )
            })?;
            sample.prompt = tokens[..split].to_vec();
            sample.response = tokens[split..].to_vec();
            // slime materialises a missing mask as all ones (`_convert_samples_to_train_data`).
            sample.loss_mask = match raw.loss_mask {
                Some(c) => mask(c, "loss_mask")?,
                None => vec![1; response_length],
            };
            sample.logprobs = lps(raw.rollout_log_probs, "rollout_log_probs")?;
            sample.routed_experts = rows(raw.rollout_routed_experts, "rollout_routed_experts")?;
            if let Some(spans) = raw.weight_version_spans {
                sample.versions = Some(
                    spans_to_versions(&spans, response_length)
                        .map_err(|bad| fail("weight_version_spans", bad))?,
                );
            }
            // An empty list is `Sample`'s default, kept by code that never records versions: no labels.
            sample.turn_versions = raw.weight_versions.filter(|turns| !turns.is_empty());
        }
        Layout::Verl | Layout::Generic => {
            sample.prompt = ids(need(raw.prompt_ids, "prompt_ids")?, "prompt_ids")?;
            sample.response = ids(need(raw.response_ids, "response_ids")?, "response_ids")?;
            let (mask_field, mask_column, lp_field, lp_column) = match layout {
                Layout::Verl => (
                    "response_mask",
                    raw.response_mask,
                    "response_logprobs",
                    raw.response_logprobs,
                ),
                Layout::Generic
                | Layout::Slime
                | Layout::ArealResponse
                | Layout::ArealTrajectory => ("loss_mask", raw.loss_mask, "logprobs", raw.logprobs),
            };
            sample.loss_mask = match mask_column {
                Some(c) => mask(c, mask_field)?,
                None => vec![1; sample.response.len()],
            };
            sample.logprobs = lps(lp_column, lp_field)?;
            sample.routed_experts = rows(raw.routed_experts, "routed_experts")?;
            sample.versions = versions(raw.versions, "versions")?;
        }
        Layout::ArealResponse => {
            sample.prompt = ids(need(raw.input_tokens, "input_tokens")?, "input_tokens")?;
            sample.response = ids(need(raw.output_tokens, "output_tokens")?, "output_tokens")?;
            // Every output token of a `ModelResponse` is trained.
            sample.loss_mask = vec![1; sample.response.len()];
            sample.logprobs = lps(raw.output_logprobs, "output_logprobs")?;
            sample.routed_experts = rows(raw.routed_experts, "routed_experts")?;
            sample.versions = versions(raw.output_versions, "output_versions")?;
        }
        Layout::ArealTrajectory => {
            sample.response = ids(need(raw.input_ids, "input_ids")?, "input_ids")?;
            sample.loss_mask = mask(need(raw.loss_mask, "loss_mask")?, "loss_mask")?;
            sample.logprobs = lps(raw.logprobs, "logprobs")?;
            sample.routed_experts = rows(raw.routed_experts, "routed_experts")?;
            sample.versions = versions(raw.versions, "versions")?;
        }
    }
    Ok(sample)
}

/// One version per response token from spans over response positions; a token no span covers has none.
fn spans_to_versions(spans: &[RawSpan], len: usize) -> Result<Vec<Option<VersionLabel>>, Bad> {
    let mut out = vec![None; len];
    for (k, span) in spans.iter().enumerate() {
        let version = VersionLabel::of(span.version.clone()).ok_or_else(|| Bad {
            at: format!("[{k}].version"),
            message: format!(
                "expected a weight version (a string, or a whole number of weight updates), got {}",
                label(span.version.clone())
            ),
        })?;
        for slot in out.iter_mut().take(span.end.min(len)).skip(span.start) {
            *slot = Some(version.clone());
        }
    }
    Ok(out)
}
