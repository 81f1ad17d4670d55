//! The Wan video VAE (diffusers' `AutoencoderKLWan`), Wan 2.1 and Wan 2.2 layouts, from a
//! diffusers folder (`config.json`, `diffusion_pytorch_model.safetensors`).
//!
//! Video runs through causal 3-D convolutions a chunk of frames at a time, as diffusers
//! does: encoding takes the first frame alone and then 4 frames at a time, decoding one
//! latent frame at a time, and each causal conv keeps the frames the next chunk needs
//! (`layers::FeatCache`). So memory grows with a chunk, not with the video, and the
//! results are diffusers' (its first-chunk rules change the numbers, see `resample.rs`).

pub mod config;
mod decoder;
mod encoder;
mod layers;
mod resample;

pub use config::VaeConfig;

use crate::loader::{CheckpointSource, WeightSource};
use decoder::Decoder;
use encoder::Encoder;
use indicatif::{ProgressBar, ProgressStyle};
use kiln::{DType, Device, Error, Result, Tensor};
use layers::{dims5, CausalConv3d, FeatCache};
use std::path::Path;

const OP: &str = "wan_vae";

/// A Wan video VAE (`AutoencoderKLWan`): encoder and decoder of video to and from latents.
pub struct WanVae {
    /// The config it was built from.
    pub config: VaeConfig,
    encoder: Encoder,
    decoder: Decoder,
    quant_conv: CausalConv3d,
    post_quant_conv: CausalConv3d,
    dtype: DType,
}

impl WanVae {
    /// Loads `dir` with weights in `dtype` on `device`; every missing or mis-shaped tensor
    /// is named in one error.
    pub fn load(dir: &Path, device: Device, dtype: DType) -> Result<WanVae> {
        let config = VaeConfig::load(dir)?;
        let mut src = CheckpointSource::open_named(dir, "diffusion_pytorch_model", device, dtype)?;
        src.confirm(|ck| crate::config_check::check_vae(&config, ck))?;
        let vae = Self::build(&mut src, config)?;
        src.finish()?;
        Ok(vae)
    }

    /// Builds the model from any weight source (random weights in tests and benchmarks).
    pub fn build(src: &mut dyn WeightSource, config: VaeConfig) -> Result<WanVae> {
        let z = config.z_dim;
        Ok(WanVae {
            encoder: Encoder::load(src, &config)?,
            decoder: Decoder::load(src, &config)?,
            quant_conv: CausalConv3d::load(src, "quant_conv", (2 * z, 2 * z), [1; 3], [1; 3], [0; 3])?,
            post_quant_conv: CausalConv3d::load(src, "post_quant_conv", (z, z), [1; 3], [1; 3], [0; 3])?,
            dtype: src.dtype(),
            config,
        })
    }

    /// Video `[B, 3, 1 + 4k, H, W]` in [-1, 1] → the latent distribution's mean (diffusers'
    /// `encode(x).latent_dist.mode()`), `[B, z_dim, 1 + k, H / s, W / s]` with `s` the
    /// spatial factor (8; 16 for Wan 2.2).
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        let c = &self.config;
        let (_, ch, frames, h, w) = dims5(x)?;
        let (s, ft) = (c.spatial_factor(), c.temporal_factor());
        if ch * c.patch() * c.patch() != c.in_channels {
            return Err(Error::invalid(
                OP,
                format!("encode: {ch} channels, the model takes {}", c.in_channels / (c.patch() * c.patch())),
            ));
        }
        // diffusers silently drops frames past the last whole chunk; refuse instead.
        if frames % ft != 1 || h % s != 0 || w % s != 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "encode: {frames} frames of {h}×{w}; needs 1 + {ft}·k frames and sides divisible by {s}"
                ),
            ));
        }
        let x = patchify(&x.to_dtype(self.dtype)?, c.patch())?;
        let mut cache = FeatCache::default();
        let mut outs = Vec::new();
        let chunks = std::iter::once((0, 1)).chain((1..frames).step_by(ft).map(|t| (t, ft)));
        let bar = progress("encoding", 1 + (frames - 1) / ft);
        for (start, len) in chunks {
            cache.start_chunk();
            outs.push(self.encoder.forward(&x.narrow(2, start, len)?, &mut cache)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
        let enc = self.quant_conv.forward(&Tensor::cat(&outs, 2)?)?;
        enc.narrow(1, 0, c.z_dim)?.contiguous()
    }

    /// Latents `[B, z_dim, T, h, w]` → video `[B, 3, 1 + 4(T − 1), h·s, w·s]` clamped to
    /// [-1, 1], one latent frame at a time.
    pub fn decode(&self, z: &Tensor) -> Result<Tensor> {
        let c = &self.config;
        let (_, zc, t, _, _) = dims5(z)?;
        if zc != c.z_dim || t == 0 {
            return Err(Error::invalid(
                OP,
                format!("decode: latents {:?}, expected [B, {}, T ≥ 1, h, w]", z.shape(), c.z_dim),
            ));
        }
        let x = self.post_quant_conv.forward(&z.to_dtype(self.dtype)?)?;
        let mut cache = FeatCache::default();
        let mut outs = Vec::with_capacity(t);
        let bar = progress("decoding", t);
        for i in 0..t {
            cache.start_chunk();
            outs.push(self.decoder.forward(&x.narrow(2, i, 1)?, &mut cache, i == 0)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
        unpatchify(&Tensor::cat(&outs, 2)?, c.patch())?.maximum_scalar(-1.0)?.minimum_scalar(1.0)
    }
}

/// A bar on stderr for videos of more than a few chunks (hidden when stderr is no terminal).
fn progress(what: &str, chunks: usize) -> ProgressBar {
    if chunks < 4 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(chunks as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} chunks").expect("template is valid"),
    );
    bar.set_message(what.to_string());
    bar
}

/// `[B, C, F, H, W]` → `[B, C·p·p, F, H/p, W/p]`, channels ordered (c, column, row) as
/// diffusers' `patchify`.
fn patchify(x: &Tensor, p: usize) -> Result<Tensor> {
    if p == 1 {
        return Ok(x.clone());
    }
    let (b, c, f, h, w) = dims5(x)?;
    x.reshape(&[b, c, f, h / p, p, w / p, p])?.permute(&[0, 1, 6, 4, 2, 3, 5])?.reshape(&[
        b,
        c * p * p,
        f,
        h / p,
        w / p,
    ])
}

/// The inverse of [`patchify`].
fn unpatchify(x: &Tensor, p: usize) -> Result<Tensor> {
    if p == 1 {
        return Ok(x.clone());
    }
    let (b, cp, f, h, w) = dims5(x)?;
    let c = cp / (p * p);
    x.reshape(&[b, c, p, p, f, h, w])?.permute(&[0, 1, 4, 5, 3, 6, 2])?.reshape(&[b, c, f, h * p, w * p])
}

/// PSNR in dB of `got` against `want` for signals in [-1, 1] (peak-to-peak 2), and the
/// largest |Δ|.
pub fn compare(got: &Tensor, want: &Tensor) -> Result<(f64, f64)> {
    if got.shape() != want.shape() {
        return Err(Error::ShapeMismatch { op: OP, lhs: got.shape().to_vec(), rhs: want.shape().to_vec() });
    }
    let d = got.to_dtype(DType::F64)?.to_device(Device::Cpu)?.sub(&want.to_dtype(DType::F64)?)?;
    let mse = d.square()?.mean(&[], false)?.to_vec::<f64>()?[0];
    let max = d.abs()?.max(&[], false)?.to_vec::<f64>()?[0];
    Ok((10.0 * (4.0 / mse).log10(), max))
}

/// The fixture folders: Wan 2.1 and Wan 2.2 layouts.
pub const FIXTURES: [&str; 2] = ["wan21_vae_tiny", "wan22_vae_tiny"];

/// PSNR (dB) of kiln's outputs against diffusers' in `golden.safetensors`, and the largest
/// |Δ| over all three.
#[derive(Clone, Debug)]
pub struct VaeReport {
    /// PSNR of decoding the fixture's latents `z`.
    pub decoded: f64,
    /// PSNR of the encoder's latent mean of the fixture's video `x`.
    pub encoded: f64,
    /// PSNR of decoding that mean again.
    pub roundtrip: f64,
    /// Largest |Δ| over the three.
    pub max_err: f64,
}

impl VaeReport {
    /// The lowest of the three PSNRs.
    pub fn worst(&self) -> f64 {
        self.decoded.min(self.encoded).min(self.roundtrip)
    }
}

/// The bound on [`VaeReport::worst`]: the fixture README's "well over 60 dB" in f32; in
/// bf16 (8 mantissa bits through ~20 convolutions) 45 dB, where the CPU measures 52–54.
pub fn min_psnr(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        60.0
    } else {
        45.0
    }
}

/// Ok when every output is within [`min_psnr`] of diffusers'.
pub fn verdict(r: &VaeReport, dtype: DType) -> std::result::Result<(), String> {
    match r.worst() > min_psnr(dtype) {
        true => Ok(()),
        false => Err(format!("PSNR {:.1} dB below {} dB ({r:?})", r.worst(), min_psnr(dtype))),
    }
}

/// Runs the VAE of `dir` on `device` in `dtype` on the fixture's `z` and `x`.
pub fn check(dir: &Path, device: Device, dtype: DType) -> Result<VaeReport> {
    let vae = WanVae::load(dir, device, dtype)?;
    let golden = crate::golden::Golden::load(dir)?;
    let get = |name: &str| golden.get(name);
    let decoded = vae.decode(&get("z")?.to_device(device)?)?;
    let mean = vae.encode(&get("x")?.to_device(device)?)?;
    let roundtrip = vae.decode(&mean)?;
    let pairs = [(decoded, get("decoded")?), (mean, get("encoded_mean")?), (roundtrip, get("roundtrip")?)];
    let mut db = [0.0; 3];
    let mut max_err = 0.0f64;
    for (i, (got, want)) in pairs.iter().enumerate() {
        let (psnr, max) = compare(got, want)?;
        db[i] = psnr;
        max_err = max_err.max(max);
    }
    Ok(VaeReport { decoded: db[0], encoded: db[1], roundtrip: db[2], max_err })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures_dir as fixtures;

    #[test]
    fn patchify_round_trips() {
        let x = Tensor::randn(&[1, 3, 2, 4, 6], 7, DType::F32, Device::Cpu).unwrap();
        let p = patchify(&x, 2).unwrap();
        assert_eq!(p.shape(), [1, 12, 2, 2, 3]);
        assert_eq!(unpatchify(&p, 2).unwrap().to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    }

    /// Both layouts against diffusers, weights and activations in f32 and in bf16.
    #[test]
    fn golden() {
        for dtype in [DType::F32, DType::BF16] {
            for name in FIXTURES {
                let r = check(&fixtures().join("vae").join(name), Device::Cpu, dtype).unwrap();
                println!(
                    "{name} {dtype}: decoded {:.1} dB, encoded {:.1} dB, roundtrip {:.1} dB, max |Δ| {:.2e}",
                    r.decoded, r.encoded, r.roundtrip, r.max_err
                );
                verdict(&r, dtype).unwrap();
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let vae = WanVae::load(&fixtures().join("vae/wan21_vae_tiny"), Device::Cpu, DType::F32).unwrap();
        let e = vae.encode(&Tensor::zeros(&[1, 3, 4, 32, 32], DType::F32, Device::Cpu).unwrap()).unwrap_err();
        assert!(e.to_string().contains("1 + 4·k frames"), "{e}");
        let e = vae.encode(&Tensor::zeros(&[1, 3, 1, 30, 32], DType::F32, Device::Cpu).unwrap()).unwrap_err();
        assert!(e.to_string().contains("divisible by 8"), "{e}");
        let e = vae.decode(&Tensor::zeros(&[1, 5, 1, 4, 4], DType::F32, Device::Cpu).unwrap()).unwrap_err();
        assert!(e.to_string().contains("expected [B, 4"), "{e}");
    }
}
