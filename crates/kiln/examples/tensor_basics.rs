//! Tensor basics: create, compute with PyTorch's semantics, move between devices.
//!
//! `cargo run -p kiln --example tensor_basics` (on a GPU if one works, else the CPU).

use kiln::{DType, Device, Tensor};

fn main() -> kiln::Result<()> {
    let device = if kiln::cuda::availability().is_ok() { Device::Cuda(0) } else { Device::Cpu };
    println!("device: {device}");

    // Seeded random tensors; shapes, dtypes and broadcasting follow PyTorch.
    let x = Tensor::randn(&[4, 8], 0, DType::F32, device)?;
    let w = Tensor::randn(&[16, 8], 1, DType::F32, device)?;
    let b = Tensor::arange(0.0, 16.0, 1.0, DType::F32, device)?;
    let y = x.linear(&w, Some(&b))?.silu()?; // [4, 16]
    let p = y.softmax(-1)?;
    println!("softmax rows sum to {:?}", p.sum(&[-1], false)?.to_f64_vec()?);

    // bf16 storage, f32 accumulation; reductions and views.
    let h = y.to_dtype(DType::BF16)?;
    let (var, mean) = h.var_mean(&[-1], 1.0, false)?;
    println!("bf16 var {:?}\n     mean {:?}", var.to_f64_vec()?, mean.to_f64_vec()?);
    let t = h.t()?.narrow(0, 2, 3)?; // a view: no copy
    println!("view of shape {:?}, contiguous: {}", t.shape(), t.is_contiguous());

    // Results come back to the host as Vec; tensors move with to_device.
    let host = p.to_device(Device::Cpu)?;
    println!("first row: {:?}", &host.to_f64_vec()?[..4]);
    Ok(())
}
