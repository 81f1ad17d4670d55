//! Where a model's weights come from: a safetensors checkpoint (with a progress bar), or
//! seeded random values generated on the device (benchmarks of the published shapes).
//! The model builders ask a [`WeightSource`] for each tensor by name and shape.

use indicatif::{ProgressBar, ProgressStyle};
use kiln::io::safetensors::Checkpoint;
use kiln::{DType, Device, Error, Result, Tensor};
use std::path::{Path, PathBuf};

pub trait WeightSource {
    /// The tensor stored as `name`, of `shape`, on the model's device and dtype.
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor>;
    fn device(&self) -> Device;
    fn dtype(&self) -> DType;
}

/// `[names.len(), ..shape]`: the named tensors stacked (e.g. the experts of a layer).
pub fn stacked(src: &mut dyn WeightSource, names: &[String], shape: &[usize]) -> Result<Tensor> {
    let parts = names.iter().map(|n| src.get(n, shape)).collect::<Result<Vec<_>>>()?;
    Tensor::stack(&parts, 0)
}

/// Reads a checkpoint folder. A missing tensor, or one of the wrong shape, does not stop
/// the load at once: it is recorded (and a placeholder returned) so that [`finish`]
/// reports every bad tensor in one error.
///
/// [`finish`]: CheckpointSource::finish
pub struct CheckpointSource {
    dir: PathBuf,
    ck: Checkpoint,
    device: Device,
    dtype: DType,
    problems: Vec<String>,
    bar: ProgressBar,
}

impl CheckpointSource {
    /// Opens `dir`'s `model.safetensors` (or shards); weights convert to `dtype` on load.
    pub fn open(dir: &Path, device: Device, dtype: DType) -> Result<Self> {
        if !dtype.is_float() {
            return Err(Error::DTypeNotSupported { op: "load", got: dtype, expected: "a floating dtype" });
        }
        let ck = Checkpoint::open(dir)?;
        let bar = ProgressBar::new(ck.total_bytes() as u64);
        bar.set_style(
            ProgressStyle::with_template("loading {bar:40} {binary_bytes}/{binary_total_bytes} {msg}")
                .expect("template is valid"),
        );
        Ok(CheckpointSource { dir: dir.to_path_buf(), ck, device, dtype, problems: vec![], bar })
    }

    /// Ok when every requested tensor was present with the expected shape; else one
    /// error listing all that were not.
    pub fn finish(self) -> Result<()> {
        self.bar.finish_and_clear();
        if self.problems.is_empty() {
            return Ok(());
        }
        Err(Error::File {
            path: self.dir.display().to_string(),
            msg: format!("{} bad tensor(s):\n  {}", self.problems.len(), self.problems.join("\n  ")),
        })
    }

    fn placeholder(&self, shape: &[usize]) -> Result<Tensor> {
        Tensor::zeros(&[], self.dtype, self.device)?.expand(shape)
    }
}

impl WeightSource for CheckpointSource {
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        if !self.ck.contains(name) {
            self.problems.push(format!("{name}: missing (expected shape {shape:?})"));
            return self.placeholder(shape);
        }
        let meta = self.ck.meta(name)?;
        if meta.shape != shape || !meta.dtype.is_float() {
            self.problems
                .push(format!("{name}: {:?} {} (expected {shape:?}, float)", meta.shape, meta.dtype));
            return self.placeholder(shape);
        }
        self.bar.set_message(name.to_string());
        let t = self.ck.load(name, self.device)?.to_dtype(self.dtype)?;
        self.bar.inc((t.numel() * meta.dtype.size()) as u64);
        Ok(t)
    }

    fn device(&self) -> Device {
        self.device
    }

    fn dtype(&self) -> DType {
        self.dtype
    }
}

/// Seeded N(0, 1)·`std` weights generated where they live (no host copy), and ones for
/// norm weights (names ending in `norm.weight`), so activations stay in range.
pub struct RandomSource {
    pub device: Device,
    pub dtype: DType,
    pub std: f64,
    seed: u64,
}

impl RandomSource {
    pub fn new(device: Device, dtype: DType, seed: u64) -> Self {
        RandomSource { device, dtype, std: 0.02, seed }
    }
}

impl WeightSource for RandomSource {
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        if name.ends_with("norm.weight") {
            return Tensor::ones(shape, self.dtype, self.device);
        }
        self.seed += 1;
        Tensor::randn(shape, self.seed, self.dtype, self.device)?.mul_scalar(self.std)
    }

    fn device(&self) -> Device {
        self.device
    }

    fn dtype(&self) -> DType {
        self.dtype
    }
}
