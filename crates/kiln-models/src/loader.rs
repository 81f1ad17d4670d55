//! Where a model's weights come from: a safetensors checkpoint (with a progress bar), or
//! seeded random values generated on the device (benchmarks of the published shapes).
//! The model builders ask a [`WeightSource`] for each tensor by name and shape, and for
//! each linear layer's weight by prefix ([`WeightSource::linear`]), which may come back
//! FP8: stored so in the checkpoint, or quantised on load ([`Quantize::Fp8`]).

use crate::fp8_weight::{load_linear, Fp8Weight};
use crate::layers::LinearWeight;
use crate::parallel::Shard;
use indicatif::{ProgressBar, ProgressStyle};
use kiln::io::safetensors::Checkpoint;
use kiln::{DType, Device, Error, Result, Tensor};
use std::path::{Path, PathBuf};

/// How dense linear weights are stored after loading (`kiln generate --quantize`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Quantize {
    /// As loaded: dense in the model dtype (an FP8 checkpoint's FP8 weights stay FP8).
    #[default]
    None,
    /// Each eligible dense linear weight (attention projections, MLP and expert
    /// projections whose input size is a multiple of 16) is quantised to float8_e4m3fn with
    /// one f32 scale per output channel ([`Fp8Weight::quantize`] with `Granularity::Row`) as it
    /// is loaded, and the dense copy freed: about half the bf16 bytes. Embeddings, norms,
    /// the LM head, the MoE router and `quantization_config.modules_to_not_convert` stay
    /// dense.
    Fp8,
}

impl Quantize {
    /// The names [`Quantize::parse`] takes, for help text.
    pub const VALUES: &'static str = "none, fp8";

    /// `none` or `fp8`.
    pub fn parse(s: &str) -> Result<Quantize> {
        match s {
            "none" => Ok(Quantize::None),
            "fp8" => Ok(Quantize::Fp8),
            other => {
                Err(Error::invalid("quantize", format!("unknown quantisation {other:?} ({})", Self::VALUES)))
            }
        }
    }
}

impl std::str::FromStr for Quantize {
    type Err = Error;

    fn from_str(s: &str) -> Result<Quantize> {
        Quantize::parse(s)
    }
}

/// A weight as loaded: frozen on the CPU, where freezing puts it on huge pages for the
/// decode's streaming reads (`Tensor::freeze`). CUDA weights are left as they were.
pub(crate) fn parameter(t: Tensor) -> Result<Tensor> {
    if t.device() == Device::Cpu {
        t.freeze()?;
    }
    Ok(t)
}

/// Where a model builder gets its weights: a checkpoint folder, a GGUF file, or random
/// values. It also says which device and dtype the model lives in.
pub trait WeightSource {
    /// The tensor stored as `name`, of `shape`, on the model's device and dtype.
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor>;
    /// The device the weights are put on.
    fn device(&self) -> Device;
    /// The dtype dense weights are converted to (the model's activations dtype).
    fn dtype(&self) -> DType;

    /// What dense linear weights become on load.
    fn quantize(&self) -> Quantize {
        Quantize::None
    }

    /// The `[out, inp]` weight `{prefix}.weight` of a linear layer: by default dense from
    /// [`get`](WeightSource::get), quantised per row to FP8 under [`Quantize::Fp8`] when
    /// eligible ([`LinearWeight::fp8_eligible`]).
    fn linear(&mut self, prefix: &str, out: usize, inp: usize) -> Result<LinearWeight> {
        let w = self.get(&format!("{prefix}.weight"), &[out, inp])?;
        dense_or_fp8(self.quantize(), w)
    }

    /// Which part of the model the weights are for (tensor parallelism); the whole by
    /// default.
    fn shard(&self) -> Shard {
        Shard::WHOLE
    }

    /// This rank's part of `name` (whole shape `shape`) split along `dim`
    /// ([`Shard::part_of`]); the whole tensor when the model is not split. By default the
    /// whole is read and sliced; a checkpoint reads only the part.
    fn get_part(&mut self, name: &str, shape: &[usize], dim: usize) -> Result<Tensor> {
        let whole = self.get(name, shape)?;
        let shard = self.shard();
        if !shard.is_split() {
            return Ok(whole);
        }
        parameter(shard.part_of(&whole, dim, name)?)
    }

    /// [`linear`](WeightSource::linear) of this rank's part of the weight split along
    /// `dim` (0: output rows, 1: input columns).
    fn linear_part(&mut self, prefix: &str, out: usize, inp: usize, dim: usize) -> Result<LinearWeight> {
        if !self.shard().is_split() {
            return self.linear(prefix, out, inp);
        }
        let w = self.get_part(&format!("{prefix}.weight"), &[out, inp], dim)?;
        dense_or_fp8(self.quantize(), w)
    }
}

/// A dense `[out, in]` weight as `quantize` wants it: quantised per row to FP8 under
/// [`Quantize::Fp8`] when its input size suits the FP8 GEMM, else as it is.
fn dense_or_fp8(quantize: Quantize, w: Tensor) -> Result<LinearWeight> {
    if quantize == Quantize::Fp8 && LinearWeight::fp8_eligible(w.shape()[1]) {
        return LinearWeight::quantize_fp8(&w);
    }
    Ok(LinearWeight::Dense(w))
}

/// Reads a checkpoint folder. A missing tensor, or one of the wrong shape, does not stop
/// the load at once: it is recorded (and a placeholder returned) so that [`finish`]
/// reports every bad tensor in one error.
///
/// FP8 checkpoints as Hugging Face stores them: a linear layer whose `{prefix}.weight` is
/// float8_e4m3fn loads through [`crate::fp8_weight::load_linear`] with its `{prefix}.weight_scale` or
/// `{prefix}.weight_scale_inv` (per tensor, per output channel, or 128×128 blocks, which
/// become per-row scales) and stays FP8. The FP8-ness is read from each tensor's stored
/// dtype; config.json's `quantization_config` contributes `modules_to_not_convert` (kept
/// dense under [`Quantize::Fp8`], matched as substrings of the layer name, as transformers
/// does) and its `quant_method`, named in the error when tensors are missing.
///
/// [`finish`]: CheckpointSource::finish
pub struct CheckpointSource {
    dir: PathBuf,
    ck: Checkpoint,
    device: Device,
    dtype: DType,
    quantize: Quantize,
    modules_to_not_convert: Vec<String>,
    quant_method: Option<String>,
    shard: Shard,
    problems: Vec<String>,
    bar: ProgressBar,
}

impl CheckpointSource {
    /// Opens `dir`'s `model.safetensors` (or shards); weights convert to `dtype` on load.
    pub fn open(dir: &Path, device: Device, dtype: DType) -> Result<Self> {
        Self::open_named(dir, "model", device, dtype)
    }

    /// As [`open`](CheckpointSource::open) for `{stem}.safetensors` (diffusers:
    /// `diffusion_pytorch_model`).
    pub fn open_named(dir: &Path, stem: &str, device: Device, dtype: DType) -> Result<Self> {
        if !dtype.is_float() {
            return Err(Error::DTypeNotSupported { op: "load", got: dtype, expected: "a floating dtype" });
        }
        let ck = Checkpoint::open_named(dir, stem)?;
        let bar = ProgressBar::new(ck.total_bytes() as u64);
        bar.set_style(
            ProgressStyle::with_template("loading {bar:40} {binary_bytes}/{binary_total_bytes} {msg}")
                .expect("template is valid"),
        );
        let qc = read_quantization_config(dir);
        let quant_method = qc.get("quant_method").and_then(|m| m.as_str()).map(String::from);
        let modules_to_not_convert = qc
            .get("modules_to_not_convert")
            .and_then(|m| m.as_array())
            .map(|a| a.iter().filter_map(|m| m.as_str().map(String::from)).collect())
            .unwrap_or_default();
        Ok(CheckpointSource {
            dir: dir.to_path_buf(),
            ck,
            device,
            dtype,
            quantize: Quantize::None,
            modules_to_not_convert,
            quant_method,
            shard: Shard::WHOLE,
            problems: vec![],
            bar,
        })
    }

    /// Quantise dense linear weights on load (see [`Quantize`]).
    pub fn with_quantize(mut self, quantize: Quantize) -> Self {
        self.quantize = quantize;
        self
    }

    /// Read only rank `shard`'s part of each split weight (tensor parallelism).
    pub fn with_shard(mut self, shard: Shard) -> Self {
        self.shard = shard;
        self
    }

    /// Whether `quantization_config.modules_to_not_convert` names the layer `prefix`.
    fn keep_dense(&self, prefix: &str) -> bool {
        self.modules_to_not_convert.iter().any(|m| !m.is_empty() && prefix.contains(m.as_str()))
    }

    /// Runs `check` (a [`crate::config_check`] function) on the checkpoint before anything
    /// is built: what it finds wrong is an error on the folder's `config.json`.
    pub fn confirm(&self, check: impl FnOnce(&Checkpoint) -> std::result::Result<(), String>) -> Result<()> {
        check(&self.ck)
            .map_err(|msg| Error::File { path: self.dir.join("config.json").display().to_string(), msg })
    }

    /// Ok when every requested tensor was present with the expected shape; else one
    /// error listing them (the first [`crate::config_check::MAX_LISTED`] and a count).
    pub fn finish(self) -> Result<()> {
        self.bar.finish_and_clear();
        if self.problems.is_empty() {
            return Ok(());
        }
        Err(Error::File {
            path: self.dir.display().to_string(),
            msg: format!(
                "{}{}",
                bad_tensors(&self.problems),
                match &self.quant_method {
                    Some(m) if m != "fp8" => format!(
                        "\n(config.json's quantization_config has quant_method {m:?}; kiln loads dense and fp8 checkpoints)"
                    ),
                    _ => String::new(),
                }
            ),
        })
    }

    fn placeholder(&self, shape: &[usize]) -> Result<Tensor> {
        Tensor::zeros(&[], self.dtype, self.device)?.expand(shape)
    }
}

/// "N bad tensor(s):" and the first ten problems, one a line, then how many more: a
/// checkpoint of the wrong family can have hundreds.
pub(crate) fn bad_tensors(problems: &[String]) -> String {
    format!("{} bad tensor(s):\n  {}", problems.len(), crate::config_check::list(problems))
}

/// `quantization_config` of `dir/config.json`, or null (no file, no such key).
fn read_quantization_config(dir: &Path) -> serde_json::Value {
    std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|mut v| v.get_mut("quantization_config").map(serde_json::Value::take))
        .unwrap_or(serde_json::Value::Null)
}

fn is_fp8(dt: DType) -> bool {
    matches!(dt, DType::F8E4M3 | DType::F8E5M2)
}

impl CheckpointSource {
    /// `{prefix}.weight` stored as float8 with its scale: FP8 as stored, or `None` after
    /// recording why it cannot be loaded.
    fn load_fp8(&mut self, prefix: &str) -> Option<Fp8Weight> {
        let name = format!("{prefix}.weight");
        self.bar.set_message(name.clone());
        match load_linear(&self.ck, prefix, self.device) {
            Ok(w) => {
                self.bar.inc((w.weight().nbytes() + w.scale().nbytes()) as u64);
                Some(w)
            }
            Err(e) => {
                self.problems.push(format!("{name}: {e}"));
                None
            }
        }
    }
}

impl CheckpointSource {
    /// `name` of whole shape `shape`, or with `part` = (dim, start, len) only that slice
    /// (read alone from the map when stored dense). A missing or mis-shaped tensor is
    /// recorded and a placeholder returned.
    fn read(&mut self, name: &str, shape: &[usize], part: Option<(usize, usize, usize)>) -> Result<Tensor> {
        let mut want = shape.to_vec();
        if let Some((dim, _, len)) = part {
            want[dim] = len;
        }
        if !self.ck.contains(name) {
            self.problems.push(format!("{name}: missing (expected shape {shape:?})"));
            return self.placeholder(&want);
        }
        let meta = self.ck.meta(name)?;
        if meta.shape != shape || !meta.dtype.is_float() {
            self.problems
                .push(format!("{name}: {:?} {} (expected {shape:?}, float)", meta.shape, meta.dtype));
            return self.placeholder(&want);
        }
        if is_fp8(meta.dtype) {
            let prefix =
                name.strip_suffix(".weight").filter(|_| meta.dtype == DType::F8E4M3 && shape.len() == 2);
            let Some(prefix) = prefix else {
                self.problems.push(format!(
                    "{name}: {:?} {} (only 2-D float8_e4m3fn weights with a scale are supported)",
                    meta.shape, meta.dtype
                ));
                return self.placeholder(&want);
            };
            // Dequantised whole, then sliced: the scales' blocks need not align with a part.
            let Some(w) = self.load_fp8(prefix) else { return self.placeholder(&want) };
            let w = w.dequantize(self.dtype)?;
            return match part {
                Some((dim, start, len)) => parameter(w.narrow(dim as isize, start, len)?.contiguous()?),
                None => Ok(w),
            };
        }
        self.bar.set_message(name.to_string());
        let t = match part {
            Some((dim, start, len)) => self.ck.load_part(name, dim, start, len, self.device)?,
            None => self.ck.load(name, self.device)?,
        };
        self.bar.inc((t.numel() * meta.dtype.size()) as u64);
        parameter(t.to_dtype(self.dtype)?)
    }

    /// A dense linear weight read with `problems_before` problems recorded: quantised per
    /// row under [`Quantize::Fp8`] when it loaded well, is eligible and
    /// `modules_to_not_convert` does not name the layer.
    fn dense_linear(&mut self, prefix: &str, w: Tensor, problems_before: usize) -> Result<LinearWeight> {
        let quantize = self.quantize == Quantize::Fp8
            && self.problems.len() == problems_before
            && LinearWeight::fp8_eligible(w.shape()[1])
            && !self.keep_dense(prefix);
        if quantize {
            LinearWeight::quantize_fp8(&w)
        } else {
            Ok(LinearWeight::Dense(w))
        }
    }
}

impl WeightSource for CheckpointSource {
    /// A float8 tensor asked for as a plain tensor (not through `linear`) is dequantised
    /// with its scale to the model dtype.
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.read(name, shape, None)
    }

    fn device(&self) -> Device {
        self.device
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn quantize(&self) -> Quantize {
        self.quantize
    }

    fn shard(&self) -> Shard {
        self.shard
    }

    /// Only the part's bytes are read from a dense tensor; a float8 one is dequantised
    /// whole and sliced.
    fn get_part(&mut self, name: &str, shape: &[usize], dim: usize) -> Result<Tensor> {
        if !self.shard.is_split() {
            return self.get(name, shape);
        }
        let (start, len) = self.shard.part(name, shape[dim])?;
        self.read(name, shape, Some((dim, start, len)))
    }

    /// Stored float8_e4m3fn: FP8 with the stored scales (dequantised to dense when the
    /// input size does not suit the FP8 GEMM). Stored dense: dense, or quantised per row
    /// under [`Quantize::Fp8`] unless `modules_to_not_convert` names the layer. Missing and
    /// mis-shaped weights are recorded as by `get`.
    fn linear(&mut self, prefix: &str, out: usize, inp: usize) -> Result<LinearWeight> {
        let name = format!("{prefix}.weight");
        let stored = if self.ck.contains(&name) { Some(self.ck.meta(&name)?) } else { None };
        match stored {
            Some(meta) if meta.dtype == DType::F8E4M3 && meta.shape == [out, inp] => {
                Ok(match self.load_fp8(prefix) {
                    Some(w) if LinearWeight::fp8_eligible(inp) => LinearWeight::Fp8(w),
                    Some(w) => LinearWeight::Dense(w.dequantize(self.dtype)?),
                    None => LinearWeight::Dense(self.placeholder(&[out, inp])?),
                })
            }
            _ => {
                let before = self.problems.len();
                let w = self.get(&name, &[out, inp])?;
                self.dense_linear(prefix, w, before)
            }
        }
    }

    /// A split weight is read as its part (float8 ones dequantised: see `get_part`), then
    /// treated as a stored dense one.
    fn linear_part(&mut self, prefix: &str, out: usize, inp: usize, dim: usize) -> Result<LinearWeight> {
        if !self.shard.is_split() {
            return self.linear(prefix, out, inp);
        }
        let before = self.problems.len();
        let w = self.get_part(&format!("{prefix}.weight"), &[out, inp], dim)?;
        self.dense_linear(prefix, w, before)
    }
}

/// Seeded N(0, 1)·`std` weights generated where they live (no host copy), and ones for
/// norm weights (names ending in `norm.weight`), so activations stay in range.
/// With `quantize` = [`Quantize::Fp8`], linear weights are generated dense and quantised
/// per row (the decode benchmark's FP8 presets).
pub struct RandomSource {
    /// Where the weights are generated.
    pub device: Device,
    /// Their dtype.
    pub dtype: DType,
    /// Standard deviation of the non-norm weights (0.02 by default).
    pub std: f64,
    /// What linear weights become (generated dense, then quantised for FP8).
    pub quantize: Quantize,
    /// Which part this rank keeps of each split weight (generated whole from the same seeds,
    /// so every world size shares one model).
    pub shard: Shard,
    seed: u64,
}

impl RandomSource {
    /// A source of `seed`'s weights with std 0.02 and no quantisation.
    pub fn new(device: Device, dtype: DType, seed: u64) -> Self {
        RandomSource { device, dtype, std: 0.02, quantize: Quantize::None, shard: Shard::WHOLE, seed }
    }
}

impl WeightSource for RandomSource {
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        if name.ends_with("norm.weight") {
            return Tensor::ones(shape, self.dtype, self.device);
        }
        // Seeded by name, not by call order: a rank that skips other ranks' experts still
        // draws the same values for its own as the whole model does.
        let seed = self.seed ^ fnv1a(name);
        parameter(Tensor::randn(shape, seed, self.dtype, self.device)?.mul_scalar(self.std)?)
    }

    fn device(&self) -> Device {
        self.device
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn quantize(&self) -> Quantize {
        self.quantize
    }

    fn shard(&self) -> Shard {
        self.shard
    }
}

/// FNV-1a of `name`: a hash that stays the same across builds and Rust versions.
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    #[test]
    fn bad_tensors_lists_the_first_few_and_a_count() {
        let problems: Vec<String> = (0..272).map(|i| format!("t{i}: missing")).collect();
        let msg = super::bad_tensors(&problems);
        assert!(msg.starts_with("272 bad tensor(s):\n  t0: missing\n"), "{msg}");
        assert!(msg.contains("t9: missing") && !msg.contains("t10: missing"), "{msg}");
        assert!(msg.ends_with("… and 262 more"), "{msg}");
        assert_eq!(msg.lines().count(), 12);
        assert_eq!(super::bad_tensors(&problems[..2]), "2 bad tensor(s):\n  t0: missing\n  t1: missing");
    }
}
