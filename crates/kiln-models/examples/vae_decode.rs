//! Decode latents to video with a Wan VAE from Rust, and compare with diffusers.
//!
//! `cargo run --release -p kiln-models --example vae_decode -- [VAE_DIR]` (default: the
//! repository's tiny Wan 2.1 fixture, whose `golden.safetensors` holds diffusers' output).

use kiln::{DType, Device};
use kiln_models::wan_vae::{compare, WanVae};

fn main() -> kiln::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| kiln_models::config::fixtures_dir().join("vae/wan21_vae_tiny"), Into::into);
    let device = if kiln::cuda::availability().is_ok() { Device::Cuda(0) } else { Device::Cpu };
    let vae = WanVae::load(&dir, device, DType::F32)?;
    let golden = kiln::io::safetensors::load(dir.join("golden.safetensors"), Device::Cpu)?;
    let z = golden["z"].to_device(device)?; // [B, z_dim, 1 + k, h, w]
    let video = vae.decode(&z)?; // [B, 3, 1 + 4k, 8h, 8w] in [-1, 1]
    println!("latents {:?} -> video {:?} on {device}", z.shape(), video.shape());
    let (psnr, max_abs) = compare(&video, &golden["decoded"])?;
    println!("against diffusers: PSNR {psnr:.1} dB, max |delta| {max_abs:.2e}");
    Ok(())
}
