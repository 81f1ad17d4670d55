//! Changing resolution in the Wan VAE: `WanResample` (2× nearest upsampling or a stride-2
//! conv per frame, plus a causal conv along time that doubles or halves the frames) and
//! Wan 2.2's parameter-free shortcuts `AvgDown3D` / `DupUp3D`, which move pixels between
//! space-time and channels.

use super::layers::{dims5, CausalConv3d, FeatCache, ResidualBlock};
use crate::loader::WeightSource;
use kiln::ops::PadMode;
use kiln::{Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Up2d,
    Up3d,
    Down2d,
    Down3d,
}

pub struct Resample {
    mode: Mode,
    /// The per-frame 3×3 conv after upsampling / before the stride.
    conv: CausalConv3d,
    time_conv: Option<CausalConv3d>,
}

impl Resample {
    /// `dim` channels in; upsamplers put out `up_out` (Wan 2.1: `dim / 2`, 2.2: `dim`).
    pub fn load(
        src: &mut dyn WeightSource,
        prefix: &str,
        dim: usize,
        mode: Mode,
        up_out: usize,
    ) -> Result<Self> {
        let conv_name = format!("{prefix}.resample.1");
        let time_name = format!("{prefix}.time_conv");
        let (conv, time_conv) = match mode {
            Mode::Up2d | Mode::Up3d => (
                CausalConv3d::load_2d(src, &conv_name, (dim, up_out), 3, 1, 1)?,
                match mode {
                    Mode::Up3d => Some(CausalConv3d::load(
                        src,
                        &time_name,
                        (dim, 2 * dim),
                        [3, 1, 1],
                        [1; 3],
                        [1, 0, 0],
                    )?),
                    _ => None,
                },
            ),
            Mode::Down2d | Mode::Down3d => (
                CausalConv3d::load_2d(src, &conv_name, (dim, dim), 3, 2, 0)?,
                match mode {
                    Mode::Down3d => {
                        Some(CausalConv3d::load(src, &time_name, (dim, dim), [3, 1, 1], [2, 1, 1], [0; 3])?)
                    }
                    _ => None,
                },
            ),
        };
        Ok(Resample { mode, conv, time_conv })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Result<Tensor> {
        match self.mode {
            Mode::Up2d | Mode::Up3d => {
                let x = match &self.time_conv {
                    Some(tc) => self.double_frames(tc, x, cache.slot())?,
                    None => x.clone(),
                };
                self.conv.forward(&upsample_nearest_2x(&x)?)
            }
            Mode::Down2d | Mode::Down3d => {
                // nn.ZeroPad2d((0, 1, 0, 1)): one column right, one row below.
                let x = self.conv.forward(&x.pad(&[0, 1, 0, 1], PadMode::Constant(0.0))?)?;
                match &self.time_conv {
                    Some(tc) => halve_frames(tc, &x, cache.slot()),
                    None => Ok(x),
                }
            }
        }
    }

    /// The first chunk passes unchanged (its one frame stays one frame); later chunks go
    /// through the time conv — zero frames standing before the second chunk, as diffusers'
    /// "Rep" marker does — whose `2C` outputs interleave into twice the frames.
    fn double_frames(&self, tc: &CausalConv3d, x: &Tensor, slot: &mut Option<Tensor>) -> Result<Tensor> {
        let (b, c, t, h, w) = dims5(x)?;
        if slot.is_none() {
            *slot = Some(Tensor::zeros(&[b, c, 2, h, w], x.dtype(), x.device())?);
            return Ok(x.clone());
        }
        let y = tc.forward_cached(x, slot)?;
        y.reshape(&[b, 2, c, t, h, w])?.permute(&[0, 2, 3, 1, 4, 5])?.reshape(&[b, c, 2 * t, h, w])
    }
}

/// The main path of an encoder or decoder level: its residual blocks, then its resampler.
pub fn level(
    x: &Tensor,
    resnets: &[ResidualBlock],
    resample: Option<&Resample>,
    cache: &mut FeatCache,
) -> Result<Tensor> {
    let mut y = x.clone();
    for r in resnets {
        y = r.forward(&y, cache)?;
    }
    match resample {
        Some(r) => r.forward(&y, cache),
        None => Ok(y),
    }
}

/// Stride-2 causal conv along time over the previous chunk's last frame and this chunk;
/// the first chunk's frames pass unchanged.
fn halve_frames(tc: &CausalConv3d, x: &Tensor, slot: &mut Option<Tensor>) -> Result<Tensor> {
    let t = x.size(2)?;
    let last = x.narrow(2, t - 1, 1)?.contiguous()?;
    let y = match slot.take() {
        None => x.clone(),
        Some(prev) => tc.forward(&Tensor::cat(&[prev, x.clone()], 2)?)?,
    };
    *slot = Some(last);
    Ok(y)
}

/// `nearest-exact` ×2 on H and W, which for an integer factor repeats each pixel 2×2.
fn upsample_nearest_2x(x: &Tensor) -> Result<Tensor> {
    let (b, c, t, h, w) = dims5(x)?;
    x.reshape(&[b, c, t, h, 1, w, 1])?.expand(&[b, c, t, h, 2, w, 2])?.reshape(&[b, c, t, 2 * h, 2 * w])
}

/// `AvgDown3D`: folds `ft × fs × fs` space-time blocks into channels and averages groups of
/// them down to `out` channels; time is zero-padded in front to a multiple of `ft`.
pub struct AvgDown3d {
    pub out: usize,
    pub ft: usize,
    pub fs: usize,
}

impl AvgDown3d {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (ft, fs) = (self.ft, self.fs);
        let pad_t = (ft - x.size(2)? % ft) % ft;
        let x = if pad_t > 0 {
            x.pad(&[0, 0, 0, 0, pad_t as isize, 0], PadMode::Constant(0.0))?
        } else {
            x.clone()
        };
        let (b, c, t, h, w) = dims5(&x)?;
        let (t2, h2, w2) = (t / ft, h / fs, w / fs);
        let group = c * ft * fs * fs / self.out;
        x.reshape(&[b, c, t2, ft, h2, fs, w2, fs])?
            .permute(&[0, 1, 3, 5, 7, 2, 4, 6])?
            .reshape(&[b, self.out, group, t2, h2, w2])?
            .mean(&[2], false)
    }
}

/// `DupUp3D`: repeats channels and unfolds them into `ft × fs × fs` space-time blocks; on
/// the first chunk the `ft − 1` leading frames (before the first real one) are dropped.
pub struct DupUp3d {
    pub out: usize,
    pub ft: usize,
    pub fs: usize,
}

impl DupUp3d {
    pub fn forward(&self, x: &Tensor, first_chunk: bool) -> Result<Tensor> {
        let (ft, fs) = (self.ft, self.fs);
        let (b, c, t, h, w) = dims5(x)?;
        let repeats = self.out * ft * fs * fs / c;
        let y = x
            .unsqueeze(2)?
            .expand(&[b, c, repeats, t, h, w])?
            .reshape(&[b, self.out, ft, fs, fs, t, h, w])?
            .permute(&[0, 1, 5, 2, 6, 3, 7, 4])?
            .reshape(&[b, self.out, t * ft, h * fs, w * fs])?;
        if first_chunk && ft > 1 {
            return y.narrow(2, ft - 1, t * ft - (ft - 1));
        }
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::{DType, Device};

    fn seq(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::arange(0.0, n as f64, 1.0, DType::F32, Device::Cpu).unwrap().reshape(shape).unwrap()
    }

    #[test]
    fn nearest_2x_repeats_pixels() {
        let y = upsample_nearest_2x(&seq(&[1, 1, 1, 2, 2])).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            [0., 0., 1., 1., 0., 0., 1., 1., 2., 2., 3., 3., 2., 2., 3., 3.]
        );
    }

    /// AvgDown3D then DupUp3D with the same factors averages channel groups and spreads
    /// them back: a block constant in space-time and within its group survives unchanged.
    #[test]
    fn avg_down_and_dup_up_invert_on_constant_blocks() {
        let x = Tensor::ones(&[1, 2, 2, 4, 4], DType::F32, Device::Cpu).unwrap();
        let down = AvgDown3d { out: 4, ft: 2, fs: 2 }.forward(&x).unwrap();
        assert_eq!(down.shape(), [1, 4, 1, 2, 2]);
        let up = DupUp3d { out: 2, ft: 2, fs: 2 }.forward(&down, false).unwrap();
        assert_eq!(up.shape(), x.shape());
        assert!(up.to_vec::<f32>().unwrap().iter().all(|&v| v == 1.0));
        // One frame: padded with a zero frame in front, not behind.
        let one = seq(&[1, 2, 1, 4, 4]);
        let padded = Tensor::cat(&[one.zeros_like().unwrap(), one.clone()], 2).unwrap();
        let d1 = AvgDown3d { out: 4, ft: 2, fs: 2 }.forward(&one).unwrap();
        let want = AvgDown3d { out: 4, ft: 2, fs: 2 }.forward(&padded).unwrap();
        assert_eq!(d1.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        assert!(d1.to_vec::<f32>().unwrap().contains(&0.0));
        let u1 = DupUp3d { out: 2, ft: 2, fs: 2 }.forward(&d1, true).unwrap();
        assert_eq!(u1.shape(), [1, 2, 1, 4, 4]);
    }
}
