//! Issue 37 on the GPU: exhausting device memory is a typed error
//! (`Error::CudaOutOfMemory`, naming the request and the live / pool / driver levels), and
//! the process keeps working after it: the buffers are freed and ops run again, checked
//! against the CPU backend. See `common/mod.rs`.

use kiln::testing::{both, e, tol_of, Case, Ctx};
use kiln::{DType, Error};
use std::process::ExitCode;

type R = std::result::Result<(), String>;

/// The request, and whether the error is the typed out-of-memory one with its levels.
fn typed_oom(err: &Error, want: usize) -> R {
    match err {
        Error::CudaOutOfMemory { requested, driver_total, .. } if *requested == want && *driver_total > 0 => {
            Ok(())
        }
        other => Err(format!("expected CudaOutOfMemory for {want} B, got: {other}")),
    }
}

/// One request far beyond any GPU, then 4 GiB blocks until the device has no more; both end
/// in `CudaOutOfMemory`. After freeing them, a softmax and a matmul still match the CPU.
fn exhaust_then_recover(cx: &mut Ctx) -> R {
    let dev = kiln::cuda::device(0).map_err(e)?;
    let huge = 1usize << 50;
    typed_oom(&dev.alloc(huge).err().ok_or("a 1 PiB allocation succeeded")?, huge)?;
    let block = 4usize << 30;
    let mut held = Vec::new();
    let err = loop {
        match dev.alloc(block) {
            Ok(b) => held.push(b),
            Err(err) => break err,
        }
        if held.len() > 4096 {
            return Err("16 TiB allocated without running out".into());
        }
    };
    typed_oom(&err, block)?;
    let live = dev.memory_stats().live_bytes;
    if live < (held.len() * block) as u64 {
        return Err(format!("{} blocks held but {live} B live", held.len()));
    }
    println!("  out of memory after {} blocks of 4 GiB: {err}", held.len());
    drop(held);
    dev.empty_cache().map_err(e)?;
    let (g, c) = cx.pair(&[37, 1001], DType::F32, 3.0).map_err(e)?;
    both("softmax after OOM", &g, &c, tol_of(DType::F32), |x| x.softmax(-1))?;
    let (gb, cb) = cx.pair(&[1001, 65], DType::F32, 1.0).map_err(e)?;
    let (gr, cr) = (g.matmul(&gb).map_err(e)?, c.matmul(&cb).map_err(e)?);
    kiln::testing::same("matmul after OOM", &gr, &cr, 1e-4)
}

fn main() -> ExitCode {
    let cases: &[Case] = &[("exhaust_then_recover", exhaust_then_recover)];
    kiln::testing::run("gpu_limits", cases)
}
