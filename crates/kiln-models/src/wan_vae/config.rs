//! `config.json` of a diffusers `AutoencoderKLWan` folder, with diffusers' defaults, checked
//! into the shapes the encoder and decoder are built from.

use kiln::{Error, Result};
use serde::Deserialize;
use std::path::Path;

/// The largest `patch_size` taken (pixels per side of a patch).
const MAX_PATCH: usize = 1024;

/// A diffusers `AutoencoderKLWan` config.json, with diffusers' defaults for absent keys.
#[derive(Clone, Debug, Deserialize)]
pub struct VaeConfig {
    /// `_class_name`; when present it must be `AutoencoderKLWan`.
    #[serde(rename = "_class_name", default)]
    pub class_name: Option<String>,
    /// Channels of the first level (96).
    #[serde(default = "defaults::base_dim")]
    pub base_dim: usize,
    /// Wan 2.2 decodes with wider channels than it encodes with.
    #[serde(default)]
    pub decoder_base_dim: Option<usize>,
    /// Latent channels (16).
    #[serde(default = "defaults::z_dim")]
    pub z_dim: usize,
    /// Channel multiplier of each level, `base_dim × m` (`[1, 2, 4, 4]`).
    #[serde(default = "defaults::dim_mult")]
    pub dim_mult: Vec<usize>,
    /// Residual blocks per level (2).
    #[serde(default = "defaults::num_res_blocks")]
    pub num_res_blocks: usize,
    /// Scales with attention in the down / up blocks; only `[]` is supported.
    #[serde(default)]
    pub attn_scales: Vec<f64>,
    /// Per down level, whether it also halves time (diffusers' spelling).
    #[serde(default = "defaults::temperal_downsample")]
    pub temperal_downsample: Vec<bool>,
    /// Wan 2.2: residual down/up blocks with averaging / duplicating shortcuts.
    #[serde(default)]
    pub is_residual: bool,
    /// Channels of the video (3).
    #[serde(default = "defaults::channels")]
    pub in_channels: usize,
    /// Channels of the decoded video (3).
    #[serde(default = "defaults::channels")]
    pub out_channels: usize,
    /// Wan 2.2: pixels are folded `patch × patch` into channels before encoding.
    #[serde(default)]
    pub patch_size: Option<usize>,
    /// Per-channel latent means for pipelines that normalise latents (kept, not applied here).
    #[serde(default)]
    pub latents_mean: Vec<f64>,
    /// Per-channel latent standard deviations, as `latents_mean`.
    #[serde(default)]
    pub latents_std: Vec<f64>,
}

mod defaults {
    pub fn base_dim() -> usize {
        96
    }
    pub fn z_dim() -> usize {
        16
    }
    pub fn dim_mult() -> Vec<usize> {
        vec![1, 2, 4, 4]
    }
    pub fn num_res_blocks() -> usize {
        2
    }
    pub fn temperal_downsample() -> Vec<bool> {
        vec![false, true, true]
    }
    pub fn channels() -> usize {
        3
    }
}

impl VaeConfig {
    /// Reads and checks `dir/config.json`.
    pub fn load(dir: &Path) -> Result<VaeConfig> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        Self::parse(&text).map_err(|msg| Error::File { path: path.display().to_string(), msg })
    }

    /// Parses and checks config.json's text; the error says what is wrong.
    pub fn parse(text: &str) -> std::result::Result<VaeConfig, String> {
        let c: VaeConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if let Some(name) = c.class_name.as_deref().filter(|n| *n != "AutoencoderKLWan") {
            return Err(format!("_class_name {name:?}: kiln reads AutoencoderKLWan video VAEs"));
        }
        let levels = c.dim_mult.len();
        if levels == 0 || c.temperal_downsample.len() + 1 != levels {
            return Err(format!(
                "dim_mult has {levels} levels and temperal_downsample {} entries; expected one fewer",
                c.temperal_downsample.len()
            ));
        }
        // Released Wan VAEs have no attention outside the middle blocks; diffusers' per-scale
        // attention there is not built here rather than silently skipped.
        if !c.attn_scales.is_empty() {
            return Err(format!(
                "attn_scales {:?}: only [] (no attention in the down / up blocks) is supported",
                c.attn_scales
            ));
        }
        if c.base_dim == 0 || c.z_dim == 0 || c.num_res_blocks == 0 || c.patch_size == Some(0) {
            return Err("base_dim, z_dim, num_res_blocks and patch_size must be positive".into());
        }
        // A patch covers p × p pixels of every frame (2 in Wan 2.2); p² must not overflow.
        if let Some(p) = c.patch_size.filter(|&p| p > MAX_PATCH) {
            return Err(format!("patch_size {p}: at most {MAX_PATCH}"));
        }
        let dec = c.decoder_dim();
        if !c.is_residual && c.dim_mult.iter().skip(1).any(|m| !(dec * m).is_multiple_of(2)) {
            return Err("Wan 2.1 upsampling halves the channels: decoder dims must be even".into());
        }
        Ok(c)
    }

    pub(crate) fn decoder_dim(&self) -> usize {
        self.decoder_base_dim.unwrap_or(self.base_dim)
    }

    pub(crate) fn patch(&self) -> usize {
        self.patch_size.unwrap_or(1)
    }

    /// Pixels per latent along height and width.
    pub fn spatial_factor(&self) -> usize {
        self.patch() << (self.dim_mult.len() - 1)
    }

    /// Frames per latent frame after the first.
    pub fn temporal_factor(&self) -> usize {
        1 << self.temperal_downsample.iter().filter(|&&t| t).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_factors() {
        let c = VaeConfig::parse(r#"{"_class_name": "AutoencoderKLWan"}"#).unwrap();
        assert_eq!((c.base_dim, c.z_dim, c.spatial_factor(), c.temporal_factor()), (96, 16, 8, 4));
        let c =
            VaeConfig::parse(r#"{"patch_size": 2, "is_residual": true, "decoder_base_dim": 256}"#).unwrap();
        assert_eq!((c.spatial_factor(), c.decoder_dim()), (16, 256));
    }

    #[test]
    fn rejects_what_it_cannot_build() {
        assert!(VaeConfig::parse(r#"{"_class_name": "AutoencoderKL"}"#)
            .unwrap_err()
            .contains("AutoencoderKLWan"));
        assert!(VaeConfig::parse(r#"{"attn_scales": [0.5]}"#).unwrap_err().contains("attn_scales"));
        assert!(VaeConfig::parse(r#"{"dim_mult": [1, 2]}"#).unwrap_err().contains("temperal_downsample"));
    }
}
