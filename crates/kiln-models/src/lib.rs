//! Model families built on kiln tensors. Loading of Hugging Face checkpoints and the
//! decoder families arrive with the "Models I" issue; this crate holds their config
//! parsing so far.

pub mod config;
