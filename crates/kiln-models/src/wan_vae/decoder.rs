//! `WanDecoder3d`: one latent frame at a time back to pixels.

use super::config::VaeConfig;
use super::layers::{CausalConv3d, FeatCache, Head, MidBlock, ResidualBlock};
use super::resample::{level, DupUp3d, Mode, Resample};
use crate::loader::WeightSource;
use kiln::{Result, Tensor};

/// `WanUpBlock` (2.1) or `WanResidualUpBlock` (2.2, with the duplicating shortcut).
struct UpBlock {
    resnets: Vec<ResidualBlock>,
    up: Option<Resample>,
    shortcut: Option<DupUp3d>,
}

pub struct Decoder {
    conv_in: CausalConv3d,
    mid: MidBlock,
    up: Vec<UpBlock>,
    head: Head,
}

impl Decoder {
    /// Weights under `decoder.`, widths from `decoder_base_dim` (or `base_dim`).
    pub fn load(src: &mut dyn WeightSource, c: &VaeConfig) -> Result<Self> {
        let p = "decoder";
        let base = c.decoder_dim();
        let levels = c.dim_mult.len();
        let dims: Vec<usize> = std::iter::once(c.dim_mult[levels - 1])
            .chain(c.dim_mult.iter().rev().copied())
            .map(|m| m * base)
            .collect();
        // Time is upsampled in the reverse order it was downsampled.
        let temporal: Vec<bool> = c.temperal_downsample.iter().rev().copied().collect();
        let mut up = Vec::new();
        for i in 0..levels {
            let prefix = format!("{p}.up_blocks.{i}");
            // Wan 2.1's upsamplers halve the width, so the next level starts at half.
            let mut cin = if i > 0 && !c.is_residual { dims[i] / 2 } else { dims[i] };
            let cout = dims[i + 1];
            let mut resnets = Vec::new();
            for j in 0..=c.num_res_blocks {
                resnets.push(ResidualBlock::load(src, &format!("{prefix}.resnets.{j}"), cin, cout)?);
                cin = cout;
            }
            let up_flag = i != levels - 1;
            let mode = if up_flag && temporal[i] { Mode::Up3d } else { Mode::Up2d };
            let (up_block, shortcut) = match (up_flag, c.is_residual) {
                (false, _) => (None, None),
                (true, false) => (
                    Some(Resample::load(src, &format!("{prefix}.upsamplers.0"), cout, mode, cout / 2)?),
                    None,
                ),
                (true, true) => {
                    let ft = if mode == Mode::Up3d { 2 } else { 1 };
                    (
                        Some(Resample::load(src, &format!("{prefix}.upsampler"), cout, mode, cout)?),
                        Some(DupUp3d { out: cout, ft, fs: 2 }),
                    )
                }
            };
            up.push(UpBlock { resnets, up: up_block, shortcut });
        }
        Ok(Decoder {
            conv_in: CausalConv3d::load(
                src,
                &format!("{p}.conv_in"),
                (c.z_dim, dims[0]),
                [3; 3],
                [1; 3],
                [1; 3],
            )?,
            mid: MidBlock::load(src, &format!("{p}.mid_block"), dims[0])?,
            up,
            head: Head::load(src, p, dims[levels], c.out_channels)?,
        })
    }

    pub fn forward(&self, z: &Tensor, cache: &mut FeatCache, first_chunk: bool) -> Result<Tensor> {
        let x = self.conv_in.forward_cached(z, cache.slot())?;
        let mut x = self.mid.forward(&x, cache)?;
        for b in &self.up {
            let mut y = level(&x, &b.resnets, b.up.as_ref(), cache)?;
            if let Some(s) = &b.shortcut {
                y = y.add(&s.forward(&x, first_chunk)?)?;
            }
            x = y;
        }
        self.head.forward(&x, cache)
    }
}
