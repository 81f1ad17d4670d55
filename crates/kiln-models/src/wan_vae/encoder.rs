//! `WanEncoder3d`: pixels (one chunk of frames) to the latent distribution's parameters.

use super::config::VaeConfig;
use super::layers::{CausalConv3d, FeatCache, Head, MidBlock, ResidualBlock};
use super::resample::{level, AvgDown3d, Mode, Resample};
use crate::loader::WeightSource;
use kiln::{Result, Tensor};

/// One resolution level: residual blocks, then (but for the last) a downsampler. Wan 2.2
/// adds an averaging shortcut around the level; Wan 2.1 lists the blocks of all levels flat
/// in `down_blocks`, Wan 2.2 one `down_blocks` entry per level.
struct Level {
    resnets: Vec<ResidualBlock>,
    down: Option<Resample>,
    shortcut: Option<AvgDown3d>,
}

pub struct Encoder {
    conv_in: CausalConv3d,
    levels: Vec<Level>,
    mid: MidBlock,
    head: Head,
}

impl Encoder {
    /// Weights under `encoder.`; the output has `2 · z_dim` channels (mean and log-variance).
    pub fn load(src: &mut dyn WeightSource, c: &VaeConfig) -> Result<Self> {
        let p = "encoder";
        let dims: Vec<usize> =
            std::iter::once(1).chain(c.dim_mult.iter().copied()).map(|m| m * c.base_dim).collect();
        let levels = c.dim_mult.len();
        let conv_in = CausalConv3d::load(
            src,
            &format!("{p}.conv_in"),
            (c.in_channels, dims[0]),
            [3; 3],
            [1; 3],
            [1; 3],
        )?;
        let mut flat = 0;
        let mut next_flat = || {
            flat += 1;
            format!("{p}.down_blocks.{}", flat - 1)
        };
        let mut blocks = Vec::new();
        for i in 0..levels {
            let (mut cin, cout) = (dims[i], dims[i + 1]);
            let last = i == levels - 1;
            let mode = match !last && c.temperal_downsample[i] {
                true => Mode::Down3d,
                false => Mode::Down2d,
            };
            let level = format!("{p}.down_blocks.{i}");
            let mut resnets = Vec::new();
            for j in 0..c.num_res_blocks {
                let prefix = if c.is_residual { format!("{level}.resnets.{j}") } else { next_flat() };
                resnets.push(ResidualBlock::load(src, &prefix, cin, cout)?);
                cin = cout;
            }
            let down = match last {
                true => None,
                false => {
                    let prefix = if c.is_residual { format!("{level}.downsampler") } else { next_flat() };
                    Some(Resample::load(src, &prefix, cout, mode, cout)?)
                }
            };
            let shortcut = c.is_residual.then(|| AvgDown3d {
                out: cout,
                ft: if mode == Mode::Down3d { 2 } else { 1 },
                fs: if last { 1 } else { 2 },
            });
            blocks.push(Level { resnets, down, shortcut });
        }
        let top = dims[levels];
        Ok(Encoder {
            conv_in,
            levels: blocks,
            mid: MidBlock::load(src, &format!("{p}.mid_block"), top)?,
            head: Head::load(src, p, top, 2 * c.z_dim)?,
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Result<Tensor> {
        let mut x = self.conv_in.forward_cached(x, cache.slot())?;
        for l in &self.levels {
            let y = level(&x, &l.resnets, l.down.as_ref(), cache)?;
            x = match &l.shortcut {
                Some(s) => y.add(&s.forward(&x)?)?,
                None => y,
            };
        }
        let x = self.mid.forward(&x, cache)?;
        self.head.forward(&x, cache)
    }
}
