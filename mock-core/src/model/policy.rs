//! The toy model's weights (`MODEL.md` section 14): a logit offset per context bucket and explicit slot, the one
//! tensor `logit_offsets` of a model directory's `model.safetensors`.
//!
//! All-zero offsets are the model of sections 4 to 9 bit for bit: an offset multiplies a slot's weight by
//! `exp(offset)`, and `exp(0)` is exactly 1; a bucket whose offsets are all zero is not touched at all. Offsets are
//! clamped to `[OFFSET_MIN, OFFSET_MAX]` before they are applied, so every explicit logit stays above the tail's and
//! the sorted order of section 6 (explicit entries first, then the tail in id order) holds for every policy.

use std::path::{Path, PathBuf};

/// The least offset that takes effect: a smaller one is clamped to it. The lowest candidate's logit (-9.70) minus
/// this margin stays above the tail logit (-12): `dist` checks it against its `TAIL_MARGIN` when it compiles.
pub const OFFSET_MIN: f64 = -2.0;
/// The largest offset that takes effect: 16 nats make a slot all but certain, and no weight can overflow.
pub const OFFSET_MAX: f64 = 16.0;
/// Context buckets when `config.json` names none.
pub const DEFAULT_BUCKETS: u32 = 8;
/// The most buckets a policy may have.
pub const MAX_BUCKETS: u32 = 1 << 16;
/// The one parameter tensor's name in `model.safetensors`.
pub const TENSOR_NAME: &str = "logit_offsets";
/// The architecture `config.json` names for a directory that holds the toy policy's weights.
pub const ARCHITECTURE: &str = "SglangMockPolicyForCausalLM";
/// Explicit slots per bucket: the eight content candidates and `<|im_end|>` (`dist`'s explicit entries).
pub const SLOTS: usize = 9;

/// A policy: `logit_offsets[bucket][slot]` and, for each bucket that is not all zero, the factors `exp(clamp(θ))`
/// the slots' weights are multiplied by.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    buckets: u32,
    offsets: Vec<[f32; SLOTS]>,
    /// `None` for a bucket whose offsets are all zero: its contexts are left as the base model gives them.
    factors: Vec<Option<[f64; SLOTS]>>,
    /// Whether every bucket is `None`: the default path checks this one flag.
    zero: bool,
}

/// Why a policy could not be built or loaded. The messages are those SGLang's loader gives where it has one
/// (`Failed to get weights iterator: ...` and `Failed to update weights: ...` wrap them on the update route).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    /// The directory holds no `*.safetensors` file (`_prepare_weights` in `srt/model_loader/loader.py`).
    #[error("Cannot find any model weights with `{0}`")]
    NoWeights(String),
    /// A weights file could not be read.
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    /// A weights file is not a safetensors file.
    #[error("Error while deserializing header: {0}")]
    Header(String),
    /// A tensor the model has no parameter for: the `KeyError` of a model's `load_weights`.
    #[error("'{0}'")]
    UnknownTensor(String),
    /// The tensor's shape is not the model's (`default_weight_loader`'s assertion, in torch's notation).
    #[error(
        "Attempted to load weight (torch.Size({found:?})) into parameter (torch.Size({want:?}))"
    )]
    Shape { found: Vec<usize>, want: Vec<usize> },
    /// The tensor holds no floating-point numbers.
    #[error("`{TENSOR_NAME}` must be a floating-point tensor (F16, BF16, F32 or F64), got {0}")]
    Dtype(String),
    /// An offset is NaN or infinite.
    #[error("`{TENSOR_NAME}`[{bucket}][{slot}] is {value}: every offset must be finite")]
    NotFinite {
        bucket: usize,
        slot: usize,
        value: f32,
    },
    /// `config.json` is unreadable or names a bucket count the model cannot use.
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
}

impl Policy {
    /// The all-zero policy over `buckets` buckets: the base model.
    pub fn zero(buckets: u32) -> Policy {
        let buckets = buckets.clamp(1, MAX_BUCKETS);
        Policy {
            buckets,
            offsets: vec![[0.0; SLOTS]; buckets as usize],
            factors: vec![None; buckets as usize],
            zero: true,
        }
    }

    /// A policy from its offsets, one row of [`SLOTS`] per bucket. Every offset must be finite.
    pub fn new(offsets: Vec<[f32; SLOTS]>) -> Result<Policy, PolicyError> {
        let buckets = offsets.len();
        if buckets == 0 || buckets > MAX_BUCKETS as usize {
            return Err(PolicyError::Shape {
                found: vec![buckets, SLOTS],
                want: vec![DEFAULT_BUCKETS as usize, SLOTS],
            });
        }
        let mut factors = Vec::with_capacity(buckets);
        for (bucket, row) in offsets.iter().enumerate() {
            if let Some(slot) = row.iter().position(|v| !v.is_finite()) {
                return Err(PolicyError::NotFinite {
                    bucket,
                    slot,
                    value: row[slot],
                });
            }
            factors.push(
                row.iter()
                    .any(|&v| v != 0.0)
                    .then(|| row.map(|v| factor(f64::from(v)))),
            );
        }
        let zero = factors.iter().all(Option::is_none);
        Ok(Policy {
            buckets: buckets as u32,
            offsets,
            factors,
            zero,
        })
    }

    /// The number of context buckets.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// Whether every offset is zero, so the policy is the base model.
    pub fn is_zero(&self) -> bool {
        self.zero
    }

    /// The offsets, one row per bucket.
    pub fn offsets(&self) -> &[[f32; SLOTS]] {
        &self.offsets
    }

    /// The bucket of a context whose `layout` draw (section 4.3) is `layout`.
    #[inline]
    pub(crate) fn bucket(&self, layout: u64) -> usize {
        // A power of two, the default 8 among them, takes a mask instead of a division.
        if self.buckets.is_power_of_two() {
            (layout & u64::from(self.buckets - 1)) as usize
        } else {
            (layout % u64::from(self.buckets)) as usize
        }
    }

    /// The factors of the bucket of `layout`, or `None` when the context keeps the base model's weights.
    #[inline(always)]
    pub(crate) fn factors(&self, layout: u64) -> Option<&[f64; SLOTS]> {
        if self.zero {
            return None;
        }
        self.factors[self.bucket(layout)].as_ref()
    }

    /// Whether `offsets[bucket][slot]` takes effect as it is (it is not clamped), so the logprobs move with it.
    pub fn is_active(&self, bucket: usize, slot: usize) -> bool {
        let v = f64::from(self.offsets[bucket][slot]);
        (OFFSET_MIN..=OFFSET_MAX).contains(&v)
    }

    /// The policy of a model directory: `config.json`'s `num_buckets` (default 8) and the tensors of its
    /// `*.safetensors` files. A directory whose `config.json` does not name [`ARCHITECTURE`] holds no toy policy
    /// and gives `Ok(None)`.
    pub fn load_dir(dir: &Path) -> Result<Option<Policy>, PolicyError> {
        let Some(buckets) = read_config(dir)? else {
            return Ok(None);
        };
        let files = weight_files(dir)?;
        Ok(Some(read_weights(&files, buckets, None)?))
    }

    /// The weights of `dir` loaded into a model of this policy's shape, as `/update_weights_from_disk` loads them:
    /// every tensor must be one the model has, with its shape; a file without `logit_offsets` leaves the offsets
    /// as they are.
    pub fn update_from_dir(&self, dir: &Path) -> Result<Policy, PolicyError> {
        let files = weight_files(dir)?;
        read_weights(&files, self.buckets, Some(self))
    }
}

/// Whether `dir` is a toy policy directory: its `config.json` names [`ARCHITECTURE`].
pub fn is_policy_dir(dir: &Path) -> bool {
    matches!(read_config(dir), Ok(Some(_)) | Err(_))
}

/// `exp(clamp(offset))`, the factor a slot's weight is multiplied by.
#[inline]
pub(crate) fn factor(offset: f64) -> f64 {
    offset.clamp(OFFSET_MIN, OFFSET_MAX).exp()
}

/// The bucket count of a toy policy's `config.json`, or `None` when the directory is not one.
fn read_config(dir: &Path) -> Result<Option<u32>, PolicyError> {
    let path = dir.join("config.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(None);
    };
    let invalid = |message: String| PolicyError::Config {
        path: path.clone(),
        message,
    };
    let config: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let is_policy = config
        .get("architectures")
        .and_then(|a| a.as_array())
        .is_some_and(|a| a.iter().any(|name| name.as_str() == Some(ARCHITECTURE)));
    if !is_policy {
        return Ok(None);
    }
    match config.get("num_buckets") {
        None => Ok(Some(DEFAULT_BUCKETS)),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=u64::from(MAX_BUCKETS)).contains(&n) => Ok(Some(n as u32)),
            _ => Err(invalid(format!(
                "num_buckets must be an integer from 1 to {MAX_BUCKETS}, got {v}"
            ))),
        },
    }
}

/// The directory's `*.safetensors` files in name order, as SGLang's loader globs them.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let no_weights = || PolicyError::NoWeights(dir.display().to_string());
    let entries = std::fs::read_dir(dir).map_err(|_| no_weights())?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(no_weights());
    }
    Ok(files)
}

/// Reads `logit_offsets` from `files` into a policy of `buckets` rows; a file set without it gives `base` (or,
/// at start-up, the all-zero policy). Nothing is returned until every file has been read and checked.
fn read_weights(
    files: &[PathBuf],
    buckets: u32,
    base: Option<&Policy>,
) -> Result<Policy, PolicyError> {
    let mut offsets = None;
    for path in files {
        let bytes = std::fs::read(path).map_err(|e| PolicyError::Read {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let tensors = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| PolicyError::Header(format!("{e:?}")))?;
        let mut names = tensors.names();
        names.sort_unstable();
        for name in names {
            if name != TENSOR_NAME {
                return Err(PolicyError::UnknownTensor(name.to_owned()));
            }
            let view = tensors
                .tensor(name)
                .map_err(|e| PolicyError::Header(format!("{e:?}")))?;
            offsets = Some(offsets_of(&view, buckets)?);
        }
    }
    match offsets {
        Some(rows) => Policy::new(rows),
        None => Ok(base.cloned().unwrap_or_else(|| Policy::zero(buckets))),
    }
}

/// The rows of a `[buckets, 9]` floating-point tensor, converted to `f32` as torch's `copy_` converts them.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "every other dtype, of this release of safetensors or a later one, holds no offsets"
)]
fn offsets_of(
    view: &safetensors::tensor::TensorView<'_>,
    buckets: u32,
) -> Result<Vec<[f32; SLOTS]>, PolicyError> {
    use safetensors::Dtype;
    let want = vec![buckets as usize, SLOTS];
    if view.shape() != want.as_slice() {
        return Err(PolicyError::Shape {
            found: view.shape().to_vec(),
            want,
        });
    }
    let data = view.data();
    let values: Vec<f32> = match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
            .collect(),
        // bfloat16 is the upper half of a binary32.
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        other => return Err(PolicyError::Dtype(format!("{other:?}"))),
    };
    Ok(values
        .chunks_exact(SLOTS)
        .map(|row| row.try_into().expect("a row of SLOTS"))
        .collect())
}

/// IEEE binary16 to binary32, exactly (every binary16 value is a binary32 value).
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exponent = u32::from((h >> 10) & 0x1F);
    let mantissa = u32::from(h & 0x3FF);
    let bits = match (exponent, mantissa) {
        (0, 0) => sign,
        // Subnormal: the value is mantissa * 2^-24, exact in binary32.
        (0, m) => {
            let magnitude = m as f32 * 2f32.powi(-24);
            return if sign == 0 { magnitude } else { -magnitude };
        }
        (0x1F, m) => sign | 0x7F80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// The bytes of a `model.safetensors` that holds `policy`, as `safetensors.torch.save_file` writes an `F32` tensor.
pub fn to_safetensors(policy: &Policy) -> Vec<u8> {
    let data: Vec<u8> = policy
        .offsets
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![policy.buckets as usize, SLOTS],
        &data,
    )
    .expect("the data has the shape's size");
    safetensors::serialize([(TENSOR_NAME, view)], None).expect("one tensor serialises")
}

/// The `config.json` of a toy policy directory with `buckets` buckets, for a model of `vocab_size` ids.
pub fn config_json(buckets: u32, vocab_size: u32) -> serde_json::Value {
    serde_json::json!({
        "architectures": [ARCHITECTURE],
        "model_type": "sglang_mock_policy",
        "num_buckets": buckets,
        "vocab_size": vocab_size,
        "torch_dtype": "float32",
    })
}

/// Writes `policy` as a model directory (`config.json` and `model.safetensors`), creating `dir` if needed.
pub fn save_dir(policy: &Policy, vocab_size: u32, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let config = serde_json::to_vec_pretty(&config_json(policy.buckets, vocab_size))
        .expect("a JSON value serialises");
    std::fs::write(dir.join("config.json"), config)?;
    // Written beside, then renamed: a reader never sees half a file.
    let tmp = dir.join(".model.safetensors.tmp");
    std::fs::write(&tmp, to_safetensors(policy))?;
    std::fs::rename(tmp, dir.join("model.safetensors"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("policy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_saved_directory_loads_back_bit_for_bit() {
        let dir = tmp_dir("roundtrip");
        let rows: Vec<[f32; SLOTS]> = (0..8)
            .map(|b| std::array::from_fn(|s| (b as f32 - 3.5) * 0.37 + s as f32 * 1e-3))
            .collect();
        let policy = Policy::new(rows).unwrap();
        save_dir(&policy, 151_936, &dir).unwrap();
        assert_eq!(Policy::load_dir(&dir).unwrap(), Some(policy));
    }

    #[test]
    fn zero_rows_keep_the_base_model_and_are_not_factored() {
        let mut rows = vec![[0.0f32; SLOTS]; 4];
        rows[2][5] = -0.5;
        let policy = Policy::new(rows).unwrap();
        assert!(!policy.is_zero());
        assert_eq!(policy.factors(0), None);
        assert_eq!(policy.factors(6).unwrap()[5], (-0.5f64).exp());
        assert_eq!(policy.factors(6).unwrap()[0], 1.0);
        assert!(Policy::new(vec![[0.0; SLOTS]; 3]).unwrap().is_zero());
    }

    #[test]
    fn offsets_are_clamped_where_they_take_effect() {
        assert_eq!(factor(-7.0), (-2.0f64).exp());
        assert_eq!(factor(40.0), 16f64.exp());
        assert_eq!(factor(0.25), 0.25f64.exp());
        let policy = Policy::new(vec![[-3.0, -2.0, 16.0, 16.5, 0.0, 0.0, 0.0, 0.0, 0.0]]).unwrap();
        let active: Vec<bool> = (0..4).map(|s| policy.is_active(0, s)).collect();
        assert_eq!(active, [false, true, true, false]);
    }

    #[test]
    fn non_finite_offsets_are_refused_with_their_place() {
        let mut rows = vec![[0.0f32; SLOTS]; 2];
        rows[1][3] = f32::NAN;
        let err = Policy::new(rows).unwrap_err();
        assert!(
            matches!(
                err,
                PolicyError::NotFinite {
                    bucket: 1,
                    slot: 3,
                    ..
                }
            ),
            "{err}"
        );
    }

    fn write_tensor(
        dir: &Path,
        name: &str,
        dtype: safetensors::Dtype,
        shape: Vec<usize>,
        data: &[u8],
    ) {
        let view = safetensors::tensor::TensorView::new(dtype, shape, data).unwrap();
        let bytes = safetensors::serialize([(name, view)], None).unwrap();
        std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    }

    #[test]
    fn loader_errors_are_sglangs() {
        let dir = tmp_dir("errors");
        let base = Policy::zero(8);
        let err = base.update_from_dir(&dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Cannot find any model weights with `{}`", dir.display())
        );
        let f32s = vec![0u8; 4 * 4 * SLOTS];
        write_tensor(
            &dir,
            TENSOR_NAME,
            safetensors::Dtype::F32,
            vec![4, SLOTS],
            &f32s,
        );
        assert_eq!(
            base.update_from_dir(&dir).unwrap_err().to_string(),
            "Attempted to load weight (torch.Size([4, 9])) into parameter (torch.Size([8, 9]))"
        );
        write_tensor(
            &dir,
            "lm_head.weight",
            safetensors::Dtype::F32,
            vec![4, SLOTS],
            &f32s,
        );
        assert_eq!(
            base.update_from_dir(&dir).unwrap_err().to_string(),
            "'lm_head.weight'"
        );
        let ints = vec![0u8; 4 * 8 * SLOTS];
        write_tensor(
            &dir,
            TENSOR_NAME,
            safetensors::Dtype::I32,
            vec![8, SLOTS],
            &ints,
        );
        assert!(matches!(base.update_from_dir(&dir), Err(PolicyError::Dtype(d)) if d == "I32"));
        std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").unwrap();
        assert!(matches!(
            base.update_from_dir(&dir),
            Err(PolicyError::Header(_))
        ));
    }

    #[test]
    fn half_precision_tensors_convert_exactly() {
        let dir = tmp_dir("half");
        // 1.5, -0.25, 2^-24 (the least subnormal), -0.0 in binary16; 1.5 and -0.25 in bfloat16.
        let halves: [u16; 4] = [0x3E00, 0xB400, 0x0001, 0x8000];
        let mut values = Vec::new();
        for k in 0..8 * SLOTS {
            values.extend_from_slice(&halves[k % 4].to_le_bytes());
        }
        write_tensor(
            &dir,
            TENSOR_NAME,
            safetensors::Dtype::F16,
            vec![8, SLOTS],
            &values,
        );
        let policy = Policy::zero(8).update_from_dir(&dir).unwrap();
        assert_eq!(
            &policy.offsets()[0][..4],
            &[1.5, -0.25, 2f32.powi(-24), -0.0]
        );
        let bf: Vec<u8> = (0..8 * SLOTS)
            .flat_map(|k| [0x3FC0u16, 0xBE80][k % 2].to_le_bytes())
            .collect();
        write_tensor(
            &dir,
            TENSOR_NAME,
            safetensors::Dtype::BF16,
            vec![8, SLOTS],
            &bf,
        );
        let policy = Policy::zero(8).update_from_dir(&dir).unwrap();
        assert_eq!(&policy.offsets()[0][..2], &[1.5, -0.25]);
    }

    #[test]
    fn a_directory_that_is_not_a_toy_policy_has_none() {
        let dir = tmp_dir("foreign");
        assert_eq!(Policy::load_dir(&dir).unwrap(), None);
        std::fs::write(
            dir.join("config.json"),
            br#"{"architectures": ["Qwen2ForCausalLM"]}"#,
        )
        .unwrap();
        assert_eq!(Policy::load_dir(&dir).unwrap(), None);
        std::fs::write(
            dir.join("config.json"),
            format!(r#"{{"architectures": ["{ARCHITECTURE}"], "num_buckets": 0}}"#),
        )
        .unwrap();
        assert!(matches!(
            Policy::load_dir(&dir),
            Err(PolicyError::Config { .. })
        ));
    }
}
