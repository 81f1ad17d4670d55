//! `kiln bench --suite vae`: the Wan video VAEs at their released widths (random weights)
//! decoding and encoding 480×832 video — seconds per call, and the memory family's three
//! peaks (live tensors, the allocator's pool, what the driver reports used). On the CPU
//! the same code runs at 1/8 of the widths on 64×64 frames, saying so.

use crate::peaks::{self, Peaks};
use crate::report::provenance;
use kiln::{DType, Device, Result, Tensor};
use kiln_models::loader::RandomSource;
use kiln_models::wan_vae::{VaeConfig, WanVae};
use serde_json::{json, Value};
use std::time::Instant;

/// diffusers' defaults are Wan 2.1's VAE; Wan 2.2's (TI2V-5B) folds 2×2 pixels into
/// channels and decodes wider than it encodes.
const PRESETS: [(&str, &str); 2] = [
    ("wan2.1", r#"{"base_dim": 96, "z_dim": 16}"#),
    (
        "wan2.2",
        r#"{"base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "is_residual": true,
            "in_channels": 12, "out_channels": 12, "patch_size": 2}"#,
    ),
];

/// Frames, height and width of the video; 9 frames are 3 latent frames.
const GPU_VIDEO: [usize; 3] = [9, 480, 832];
const CPU_VIDEO: [usize; 3] = [5, 64, 64];

/// Runs the suite on `device`: both presets decoded and encoded ([`run_config`]; on the CPU
/// at 1/8 of the widths on 64×64 frames); the suite's JSON.
pub fn run(device: Device) -> Result<Value> {
    let gpu = device.is_cuda();
    if !gpu {
        println!("vae on the CPU: widths / 8 and 64×64 frames (the released sizes need a GPU)");
    }
    let mut out = serde_json::Map::new();
    for (name, text) in PRESETS {
        let mut cfg = VaeConfig::parse(text).map_err(|m| kiln::Error::invalid("bench", m))?;
        if !gpu {
            cfg.base_dim /= 8;
            cfg.decoder_base_dim = cfg.decoder_base_dim.map(|d| d / 8);
        }
        let video = if gpu { GPU_VIDEO } else { CPU_VIDEO };
        out.insert(name.to_string(), run_config(name, cfg, video, device, if gpu { 3 } else { 1 })?);
    }
    Ok(json!({ "suite": "vae", "provenance": provenance(), "dtype": "bf16", "presets": out }))
}

/// Decode, then encode, `repeats` times each after one warm-up call; medians in seconds.
pub fn run_config(
    name: &str,
    cfg: VaeConfig,
    [frames, h, w]: [usize; 3],
    device: Device,
    repeats: usize,
) -> Result<Value> {
    let dtype = DType::BF16;
    let (s, ft, z) = (cfg.spatial_factor(), cfg.temporal_factor(), cfg.z_dim);
    let vae = WanVae::build(&mut RandomSource::new(device, dtype, 1), cfg)?;
    let latents = Tensor::randn(&[1, z, 1 + (frames - 1) / ft, h / s, w / s], 2, dtype, device)?;
    let video = Tensor::rand(&[1, 3, frames, h, w], 3, dtype, device)?.mul_scalar(2.0)?.add_scalar(-1.0)?;
    let peaks = Peaks::start(device)?;
    let sync = || peaks.as_ref().map_or(Ok(()), |p| p.device().synchronize());
    let time = |f: &dyn Fn() -> Result<Tensor>| -> Result<f64> {
        f()?;
        sync()?;
        let mut secs = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let t = Instant::now();
            f()?;
            sync()?;
            secs.push(t.elapsed().as_secs_f64());
        }
        secs.sort_by(f64::total_cmp);
        Ok(secs[secs.len() / 2])
    };
    let decode_s = time(&|| vae.decode(&latents))?;
    let encode_s = time(&|| vae.encode(&video))?;
    println!("  {name}: {frames}×{h}×{w} video: decode {decode_s:.3} s, encode {encode_s:.3} s (bf16, median of {repeats})");
    let memory = peaks::report(peaks, name);
    Ok(json!({
        "video": [frames, h, w], "latents": latents.shape(), "repeats": repeats, "warmup": 1,
        "decode_s": decode_s, "encode_s": encode_s, "memory": memory,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite's CPU form runs both layouts and reports positive times.
    #[test]
    fn reduced_suite_runs_on_cpu() {
        let v = run(Device::Cpu).unwrap();
        for (name, _) in PRESETS {
            let p = &v["presets"][name];
            assert!(p["decode_s"].as_f64().unwrap() > 0.0 && p["encode_s"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
}
