//! Host memory for CPU tensors: bytes aligned to 8 so every dtype can be viewed in place.

use crate::dtype::Elem;

#[derive(Clone, Debug)]
pub struct CpuBuffer {
    words: Vec<u64>,
    len: usize,
}

impl CpuBuffer {
    pub fn zeroed(len_bytes: usize) -> Self {
        CpuBuffer { words: vec![0; len_bytes.div_ceil(8)], len: len_bytes }
    }

    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        b
    }

    pub fn from_vec<T: Elem>(v: Vec<T>) -> Self {
        Self::from_bytes(bytemuck::cast_slice(&v))
    }

    pub fn len_bytes(&self) -> usize {
        self.len
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut bytemuck::cast_slice_mut(&mut self.words)[..len]
    }

    pub fn as_slice<T: Elem>(&self) -> &[T] {
        bytemuck::cast_slice(self.bytes())
    }

    pub fn as_mut_slice<T: Elem>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.bytes_mut())
    }
}
