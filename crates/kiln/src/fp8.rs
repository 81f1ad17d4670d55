//! FP8 in one place: the float8_e4m3fn quantiser and the `torch._scaled_mm` recipe, re-exported
//! from the ops that define them (`ops/quantize.rs`, `ops/scaled_mm.rs`). The tensor ops
//! themselves are methods: [`Tensor::scaled_mm`](crate::Tensor::scaled_mm) and
//! [`Tensor::linear_fp8`](crate::Tensor::linear_fp8). The FP8 linear layer (`Fp8Weight`) and
//! the Hugging Face FP8 checkpoint loader live in kiln-models (`kiln_models::fp8_weight`).

pub use crate::ops::quantize::{dequantize_blocks, quantize, Granularity, AMAX_EPS, E4M3_MAX};
pub use crate::ops::scaled_mm::column_scale;
pub use crate::ops::Recipe;
