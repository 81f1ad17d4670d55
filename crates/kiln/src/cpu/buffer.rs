//! Host memory for CPU tensors. Kernels produce `Vec<T>`; keeping it in a word vector
//! of T's size and alignment (no copy) is what makes the CPU backend memory-bound
//! rather than copy-bound. Raw bytes are stored 8-aligned so any dtype can view them.

use crate::dtype::Elem;
use bytemuck::allocation::try_cast_vec;

#[derive(Clone, Debug)]
enum Words {
    W1(Vec<u8>),
    W2(Vec<u16>),
    W4(Vec<u32>),
    W8(Vec<u64>),
}

#[derive(Clone, Debug)]
pub struct CpuBuffer {
    words: Words,
    len: usize,
}

impl CpuBuffer {
    pub fn zeroed(len_bytes: usize) -> Self {
        CpuBuffer { words: Words::W8(vec![0; len_bytes.div_ceil(8)]), len: len_bytes }
    }

    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        b
    }

    /// Takes ownership of `v` without copying when a word type of `T`'s size and
    /// alignment exists (every dtype but complex64, which is copied).
    pub fn from_vec<T: Elem>(v: Vec<T>) -> Self {
        let len = v.len() * std::mem::size_of::<T>();
        let words = match std::mem::size_of::<T>() {
            1 => try_cast_vec::<T, u8>(v).map(Words::W1),
            2 => try_cast_vec::<T, u16>(v).map(Words::W2),
            4 => try_cast_vec::<T, u32>(v).map(Words::W4),
            _ => try_cast_vec::<T, u64>(v).map(Words::W8),
        };
        match words {
            Ok(words) => CpuBuffer { words, len },
            Err((_, v)) => Self::from_bytes(bytemuck::cast_slice(&v)),
        }
    }

    pub fn len_bytes(&self) -> usize {
        self.len
    }

    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.words {
            Words::W1(w) => w,
            Words::W2(w) => bytemuck::cast_slice(w),
            Words::W4(w) => bytemuck::cast_slice(w),
            Words::W8(w) => bytemuck::cast_slice(w),
        };
        &all[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        let all: &mut [u8] = match &mut self.words {
            Words::W1(w) => w,
            Words::W2(w) => bytemuck::cast_slice_mut(w),
            Words::W4(w) => bytemuck::cast_slice_mut(w),
            Words::W8(w) => bytemuck::cast_slice_mut(w),
        };
        &mut all[..len]
    }

    /// The elements as `T`; the buffer's words are at least as aligned as `T` because
    /// buffers are only ever viewed as the dtype they were made for (or as bytes).
    pub fn as_slice<T: Elem>(&self) -> &[T] {
        bytemuck::cast_slice(self.bytes())
    }

    pub fn as_mut_slice<T: Elem>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.bytes_mut())
    }

    /// Asks Linux to back the 2 MiB-aligned regions this buffer touches with transparent
    /// huge pages now (`MADV_COLLAPSE`: best effort, contents unchanged, whatever the THP
    /// sysfs mode). A decode streams every weight once per token; on 4 KiB pages the TLB
    /// misses cost about a fifth of the memory's read rate (24.5 vs 30.6 GB/s measured on
    /// a 2-core Xeon). Weights smaller than 2 MiB share a huge page with their neighbours
    /// (the region is rounded outward; the same process's memory); larger ones get the
    /// huge pages that lie wholly inside them.
    pub fn collapse_huge_pages(&self) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            const HUGE: usize = 2 << 20;
            let b = self.bytes();
            if b.len() < HUGE / 32 {
                return;
            }
            let (lo, hi) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
            // A buffer of 2 MiB or more may be its own mapping (malloc mmaps large ones):
            // rounded outward, its range reaches past the mapping and the call can fail
            // for all of it (rounded outward, 245 of SmolLM2's 540 MiB of f32 weights
            // ended up on huge pages). So its whole huge pages only.
            let (start, end) = if b.len() >= HUGE {
                (lo.next_multiple_of(HUGE), hi & !(HUGE - 1))
            } else {
                (lo & !(HUGE - 1), hi.next_multiple_of(HUGE))
            };
            if start >= end {
                return;
            }
            // SAFETY: MADV_COLLAPSE changes only how pages are mapped, never what they hold;
            // on a range with unmapped parts it fails for those without touching anything.
            // Its result is deliberately ignored: huge pages are an optimisation.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_COLLAPSE) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vec_keeps_values_for_every_width() {
        let b = CpuBuffer::from_vec(vec![1.5f32, -2.0]);
        assert_eq!(b.as_slice::<f32>(), [1.5, -2.0]);
        let c = CpuBuffer::from_vec(vec![num_complex::Complex32::new(1.0, 2.0)]);
        assert_eq!(c.as_slice::<num_complex::Complex32>()[0].im, 2.0);
        let h = CpuBuffer::from_vec(vec![half::bf16::ONE; 3]);
        assert_eq!(h.len_bytes(), 6);
        assert_eq!(CpuBuffer::from_bytes(&[1, 2, 3]).bytes(), [1, 2, 3]);
    }
}
