//! Reading and writing tensors on disk.

pub mod safetensors;
