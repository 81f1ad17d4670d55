//! The Wan VAE's building blocks: causal 3-D convolutions with their per-chunk frame cache,
//! channel RMS norms, residual blocks and the per-frame attention of the middle blocks.

use crate::loader::WeightSource;
use kiln::ops::{Conv, PadMode, Sdpa};
use kiln::{DType, Result, Tensor};

/// Frames a causal 3×3×3 convolution needs from the chunk before (diffusers' `CACHE_T`).
const CACHE_T: usize = 2;

/// diffusers' `feat_cache`: video is encoded and decoded a chunk of frames at a time, and
/// every causal convolution (and temporal resampler) keeps what the next chunk needs from
/// this one in its own slot. Slots are handed out in call order, which is the same for
/// every chunk.
#[derive(Default)]
pub struct FeatCache {
    slots: Vec<Option<Tensor>>,
    next: usize,
}

impl FeatCache {
    /// Rewinds to the first slot; the states stay.
    pub fn start_chunk(&mut self) {
        self.next = 0;
    }

    /// The next slot (empty while the first chunk runs).
    pub fn slot(&mut self) -> &mut Option<Tensor> {
        if self.next == self.slots.len() {
            self.slots.push(None);
        }
        self.next += 1;
        &mut self.slots[self.next - 1]
    }
}

/// `WanCausalConv3d`: a Conv3d whose time padding all goes before the input, so frame `t`
/// sees only frames `≤ t`; frames kept from the previous chunk stand in for that padding.
/// 2-D convolutions applied frame by frame are loaded as `1 × k × k` kernels.
pub struct CausalConv3d {
    weight: Tensor,
    bias: Tensor,
    /// Frames before the input, zeros where no earlier chunk supplies them.
    front: usize,
    conv: Conv,
}

impl CausalConv3d {
    /// `{prefix}.weight` `[cout, cin, *kernel]`; `padding` is diffusers' (time padding
    /// `p` becomes `2p` frames in front).
    pub fn load(
        src: &mut dyn WeightSource,
        prefix: &str,
        (cin, cout): (usize, usize),
        kernel: [usize; 3],
        stride: [usize; 3],
        padding: [usize; 3],
    ) -> Result<Self> {
        let weight = src.get(&format!("{prefix}.weight"), &[cout, cin, kernel[0], kernel[1], kernel[2]])?;
        Self::new(src, prefix, weight, stride, padding)
    }

    /// An `nn.Conv2d(cin, cout, k)` (`{prefix}.weight` `[cout, cin, k, k]`) run on every frame.
    pub fn load_2d(
        src: &mut dyn WeightSource,
        prefix: &str,
        (cin, cout): (usize, usize),
        k: usize,
        stride: usize,
        padding: usize,
    ) -> Result<Self> {
        let weight =
            src.get(&format!("{prefix}.weight"), &[cout, cin, k, k])?.reshape(&[cout, cin, 1, k, k])?;
        Self::new(src, prefix, weight, [1, stride, stride], [0, padding, padding])
    }

    fn new(
        src: &mut dyn WeightSource,
        prefix: &str,
        weight: Tensor,
        stride: [usize; 3],
        padding: [usize; 3],
    ) -> Result<Self> {
        let bias = src.get(&format!("{prefix}.bias"), &[weight.size(0)?])?;
        let conv =
            Conv { stride: stride.to_vec(), padding: vec![0, padding[1], padding[2]], ..Conv::default() };
        Ok(CausalConv3d { weight, bias, front: 2 * padding[0], conv })
    }

    /// `x` `[B, C, T, H, W]` after `zeros` zero frames.
    fn run(&self, x: &Tensor, zeros: usize) -> Result<Tensor> {
        let x = if zeros > 0 {
            x.pad(&[0, 0, 0, 0, zeros as isize, 0], PadMode::Constant(0.0))?
        } else {
            x.clone()
        };
        x.conv3d(&self.weight, Some(&self.bias), &self.conv)
    }

    /// `x` `[B, C, T, H, W]` with no earlier chunk: its time padding is all zeros.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(x, self.front)
    }

    /// `x` after the previous chunk's frames kept in `slot` (zeros where there are fewer
    /// than `front`); `slot` then keeps the last `CACHE_T` frames of the two.
    pub fn forward_cached(&self, x: &Tensor, slot: &mut Option<Tensor>) -> Result<Tensor> {
        let all = match slot.take() {
            Some(past) => Tensor::cat(&[past, x.clone()], 2)?,
            None => x.clone(),
        };
        let (seen, t) = (all.size(2)? - x.size(2)?, all.size(2)?);
        let y = match self.front {
            0 => self.run(x, 0)?,
            front => self.run(&all, front - seen)?,
        };
        *slot = Some(all.narrow(2, t - CACHE_T.min(t), CACHE_T.min(t))?.contiguous()?);
        Ok(y)
    }
}

/// `WanRMS_norm`: `x / max(‖x‖₂, 1e-12) · √C · γ` over the channels (dim 1), normalised in
/// f32 as diffusers does for half dtypes.
pub struct ChannelNorm {
    gamma: Tensor,
    scale: f64,
}

impl ChannelNorm {
    /// `{prefix}.gamma`, `[dim, 1, 1]` for `images` (the attention blocks) else `[dim, 1, 1, 1]`.
    pub fn load(src: &mut dyn WeightSource, prefix: &str, dim: usize, images: bool) -> Result<Self> {
        let shape: &[usize] = if images { &[dim, 1, 1] } else { &[dim, 1, 1, 1] };
        let gamma = src.get(&format!("{prefix}.gamma"), shape)?.reshape(&[dim, 1, 1, 1])?;
        Ok(ChannelNorm { gamma, scale: (dim as f64).sqrt() })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let xf = x.to_dtype(DType::F32)?;
        let norm = xf.square()?.sum(&[1], true)?.sqrt()?.maximum_scalar(1e-12)?;
        xf.div(&norm)?.to_dtype(x.dtype())?.mul_scalar(self.scale)?.mul(&self.gamma)
    }
}

/// `WanResidualBlock`: two (norm, SiLU, causal 3×3×3 conv) steps plus a 1×1×1 shortcut
/// when the width changes.
pub struct ResidualBlock {
    norm1: ChannelNorm,
    conv1: CausalConv3d,
    norm2: ChannelNorm,
    conv2: CausalConv3d,
    shortcut: Option<CausalConv3d>,
}

impl ResidualBlock {
    pub fn load(src: &mut dyn WeightSource, prefix: &str, cin: usize, cout: usize) -> Result<Self> {
        let conv = |src: &mut dyn WeightSource, name: &str, cin: usize| {
            CausalConv3d::load(src, &format!("{prefix}.{name}"), (cin, cout), [3; 3], [1; 3], [1; 3])
        };
        Ok(ResidualBlock {
            norm1: ChannelNorm::load(src, &format!("{prefix}.norm1"), cin, false)?,
            conv1: conv(src, "conv1", cin)?,
            norm2: ChannelNorm::load(src, &format!("{prefix}.norm2"), cout, false)?,
            conv2: conv(src, "conv2", cout)?,
            shortcut: match cin != cout {
                true => Some(CausalConv3d::load(
                    src,
                    &format!("{prefix}.conv_shortcut"),
                    (cin, cout),
                    [1; 3],
                    [1; 3],
                    [0; 3],
                )?),
                false => None,
            },
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Result<Tensor> {
        let h = match &self.shortcut {
            Some(c) => c.forward(x)?,
            None => x.clone(),
        };
        let y = self.conv1.forward_cached(&self.norm1.forward(x)?.silu()?, cache.slot())?;
        let y = self.conv2.forward_cached(&self.norm2.forward(&y)?.silu()?, cache.slot())?;
        y.add(&h)
    }
}

/// `WanAttentionBlock`: single-head self-attention over the pixels of each frame.
pub struct AttentionBlock {
    norm: ChannelNorm,
    to_qkv: CausalConv3d,
    proj: CausalConv3d,
}

impl AttentionBlock {
    pub fn load(src: &mut dyn WeightSource, prefix: &str, dim: usize) -> Result<Self> {
        Ok(AttentionBlock {
            norm: ChannelNorm::load(src, &format!("{prefix}.norm"), dim, true)?,
            to_qkv: CausalConv3d::load_2d(src, &format!("{prefix}.to_qkv"), (dim, 3 * dim), 1, 1, 0)?,
            proj: CausalConv3d::load_2d(src, &format!("{prefix}.proj"), (dim, dim), 1, 1, 0)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, t, h, w) = dims5(x)?;
        let qkv = self.to_qkv.forward(&self.norm.forward(x)?)?;
        // [B, 3C, T, H, W] → one attention problem per frame: [B·T, 1, H·W, 3C].
        let qkv = qkv.permute(&[0, 2, 3, 4, 1])?.reshape(&[b * t, 1, h * w, 3 * c])?;
        let part = |i: usize| qkv.narrow(3, i * c, c);
        let o = part(0)?.scaled_dot_product_attention(&part(1)?, &part(2)?, &Sdpa::default())?;
        let o = o.reshape(&[b, t, h, w, c])?.permute(&[0, 4, 1, 2, 3])?;
        self.proj.forward(&o)?.add(x)
    }
}

/// `WanMidBlock` with one attention layer: residual, attention, residual.
pub struct MidBlock {
    res0: ResidualBlock,
    attn: AttentionBlock,
    res1: ResidualBlock,
}

impl MidBlock {
    pub fn load(src: &mut dyn WeightSource, prefix: &str, dim: usize) -> Result<Self> {
        Ok(MidBlock {
            res0: ResidualBlock::load(src, &format!("{prefix}.resnets.0"), dim, dim)?,
            attn: AttentionBlock::load(src, &format!("{prefix}.attentions.0"), dim)?,
            res1: ResidualBlock::load(src, &format!("{prefix}.resnets.1"), dim, dim)?,
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Result<Tensor> {
        let x = self.res0.forward(x, cache)?;
        let x = self.attn.forward(&x)?;
        self.res1.forward(&x, cache)
    }
}

/// The output head shared by encoder and decoder: norm, SiLU, causal 3×3×3 conv.
pub struct Head {
    norm: ChannelNorm,
    conv: CausalConv3d,
}

impl Head {
    pub fn load(src: &mut dyn WeightSource, prefix: &str, cin: usize, cout: usize) -> Result<Self> {
        Ok(Head {
            norm: ChannelNorm::load(src, &format!("{prefix}.norm_out"), cin, false)?,
            conv: CausalConv3d::load(
                src,
                &format!("{prefix}.conv_out"),
                (cin, cout),
                [3; 3],
                [1; 3],
                [1; 3],
            )?,
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Result<Tensor> {
        self.conv.forward_cached(&self.norm.forward(x)?.silu()?, cache.slot())
    }
}

/// `[B, C, T, H, W]`'s sizes.
pub fn dims5(x: &Tensor) -> Result<(usize, usize, usize, usize, usize)> {
    match *x.shape() {
        [b, c, t, h, w] => Ok((b, c, t, h, w)),
        _ => Err(kiln::Error::invalid("wan_vae", format!("expected [B, C, T, H, W], got {:?}", x.shape()))),
    }
}
