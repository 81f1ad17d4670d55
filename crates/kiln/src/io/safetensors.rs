//! safetensors: memory-mapped reading (single files and sharded checkpoints with
//! `model.safetensors.index.json`) and writing, for every kiln dtype.

use crate::error::{Error, Result};
use crate::{DType, Device, Tensor};
use safetensors::{Dtype as StDtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

fn file_err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::File { path: path.display().to_string(), msg: msg.to_string() }
}

pub(crate) fn dtype_from_st(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::BOOL => DType::Bool,
        StDtype::U8 => DType::U8,
        StDtype::U16 => DType::U16,
        StDtype::U32 => DType::U32,
        StDtype::U64 => DType::U64,
        StDtype::I8 => DType::I8,
        StDtype::I16 => DType::I16,
        StDtype::I32 => DType::I32,
        StDtype::I64 => DType::I64,
        StDtype::F8_E4M3 => DType::F8E4M3,
        StDtype::F8_E5M2 => DType::F8E5M2,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        StDtype::C64 => DType::C64,
        _ => return None,
    })
}

pub(crate) fn dtype_to_st(d: DType) -> StDtype {
    match d {
        DType::Bool => StDtype::BOOL,
        DType::U8 => StDtype::U8,
        DType::U16 => StDtype::U16,
        DType::U32 => StDtype::U32,
        DType::U64 => StDtype::U64,
        DType::I8 => StDtype::I8,
        DType::I16 => StDtype::I16,
        DType::I32 => StDtype::I32,
        DType::I64 => StDtype::I64,
        DType::F8E4M3 => StDtype::F8_E4M3,
        DType::F8E5M2 => StDtype::F8_E5M2,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
        DType::C64 => StDtype::C64,
    }
}

/// Dtype and shape of one stored tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
}

/// One memory-mapped safetensors file; tensors are read on demand.
pub struct SafetensorsFile {
    path: PathBuf,
    mmap: memmap2::Mmap,
}

impl SafetensorsFile {
    /// Maps the file and validates its header (a corrupt or truncated file is an error
    /// naming the file and the problem).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path)
            .map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        // SAFETY: the map is read-only; a file changed by another process while mapped
        // could show torn data, which safetensors' own readers accept as well.
        let mmap = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        SafeTensors::deserialize(&mmap)
            .map_err(|e| file_err(&path, format!("not a valid safetensors file: {e}")))?;
        Ok(SafetensorsFile { path, mmap })
    }

    /// The file's path as opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn st(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.mmap).expect("validated in open")
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.st().names().into_iter().map(String::from).collect();
        n.sort();
        n
    }

    /// Dtype and shape of tensor `name` (an error when it is absent or of a dtype kiln lacks).
    pub fn meta(&self, name: &str) -> Result<TensorMeta> {
        let v = self.st().tensor(name).map_err(|e| file_err(&self.path, format!("tensor {name:?}: {e}")))?;
        let dtype = dtype_from_st(v.dtype()).ok_or_else(|| {
            file_err(&self.path, format!("tensor {name:?} has unsupported dtype {:?}", v.dtype()))
        })?;
        Ok(TensorMeta { dtype, shape: v.shape().to_vec() })
    }

    /// The raw bytes of one tensor, borrowed from the map.
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        let st = self.st();
        let v = st.tensor(name).map_err(|e| file_err(&self.path, format!("tensor {name:?}: {e}")))?;
        // Re-borrow with the map's lifetime: the view's data is a slice of `self.mmap`.
        let data = v.data();
        let start = data.as_ptr() as usize - self.mmap.as_ptr() as usize;
        Ok(&self.mmap[start..start + data.len()])
    }

    /// Loads one tensor onto `device` (copied straight from the map).
    pub fn load(&self, name: &str, device: Device) -> Result<Tensor> {
        let meta = self.meta(name)?;
        Tensor::from_raw_bytes(self.bytes(name)?, &meta.shape, meta.dtype, device)
    }

    /// The slice `start..start + len` along `dim` of one tensor, onto `device`: only those
    /// bytes are copied out of the map (a tensor-parallel rank's part of a weight, without
    /// a full copy).
    pub fn load_part(
        &self,
        name: &str,
        dim: usize,
        start: usize,
        len: usize,
        device: Device,
    ) -> Result<Tensor> {
        let meta = self.meta(name)?;
        let shape = &meta.shape;
        if dim >= shape.len() || start + len > shape[dim] {
            return Err(file_err(
                &self.path,
                format!("tensor {name:?} {shape:?}: no slice {start}..{} along dim {dim}", start + len),
            ));
        }
        // Rows of the dims before `dim`, each holding a contiguous run of the slice.
        let inner: usize = shape[dim + 1..].iter().product::<usize>() * meta.dtype.size();
        let (outer, row) = (shape[..dim].iter().product::<usize>(), shape[dim] * inner);
        let bytes = self.bytes(name)?;
        let mut part = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            let at = o * row + start * inner;
            part.extend_from_slice(&bytes[at..at + len * inner]);
        }
        let mut sliced = shape.clone();
        sliced[dim] = len;
        Tensor::from_raw_bytes(&part, &sliced, meta.dtype, device)
    }

    /// Every tensor of the file.
    pub fn load_all(&self, device: Device) -> Result<HashMap<String, Tensor>> {
        self.names().into_iter().map(|n| Ok((n.clone(), self.load(&n, device)?))).collect()
    }
}

/// A checkpoint folder: `model.safetensors`, or shards listed by
/// `model.safetensors.index.json` (`weight_map`: tensor name → shard file).
pub struct Checkpoint {
    files: Vec<SafetensorsFile>,
    index: HashMap<String, usize>,
}

impl Checkpoint {
    /// transformers' layout: `model.safetensors` or its index.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_named(dir, "model")
    }

    /// `{stem}.safetensors` or `{stem}.safetensors.index.json`: diffusers names its
    /// files `diffusion_pytorch_model`.
    pub fn open_named(dir: impl AsRef<Path>, stem: &str) -> Result<Self> {
        let dir = dir.as_ref();
        let single = format!("{stem}.safetensors");
        let index_path = dir.join(format!("{single}.index.json"));
        let shard_names: Vec<String> = if index_path.exists() {
            let text = std::fs::read_to_string(&index_path)
                .map_err(|e| Error::Io { path: index_path.display().to_string(), source: e })?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| file_err(&index_path, e))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| file_err(&index_path, "no \"weight_map\" object"))?;
            let mut s: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
            s.sort();
            s.dedup();
            s
        } else if dir.join(&single).exists() {
            vec![single]
        } else {
            return Err(file_err(dir, format!("no {single} or {single}.index.json")));
        };
        let mut files = Vec::new();
        let mut index = HashMap::new();
        for (i, name) in shard_names.iter().enumerate() {
            let f = SafetensorsFile::open(dir.join(name))?;
            for n in f.names() {
                index.insert(n, i);
            }
            files.push(f);
        }
        Ok(Checkpoint { files, index })
    }

    /// Tensor names across all shards, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.index.keys().cloned().collect();
        n.sort();
        n
    }

    /// Whether some shard holds tensor `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn file(&self, name: &str) -> Result<&SafetensorsFile> {
        self.index
            .get(name)
            .map(|&i| &self.files[i])
            .ok_or_else(|| Error::invalid("checkpoint", format!("tensor {name:?} is not in the checkpoint")))
    }

    /// Dtype and shape of tensor `name`.
    pub fn meta(&self, name: &str) -> Result<TensorMeta> {
        self.file(name)?.meta(name)
    }

    /// Tensor `name`, in its stored dtype, on `device`.
    pub fn load(&self, name: &str, device: Device) -> Result<Tensor> {
        self.file(name)?.load(name, device)
    }

    /// [`SafetensorsFile::load_part`] of tensor `name`: its slice `start..start + len`
    /// along `dim`, in its stored dtype, on `device`.
    pub fn load_part(
        &self,
        name: &str,
        dim: usize,
        start: usize,
        len: usize,
        device: Device,
    ) -> Result<Tensor> {
        self.file(name)?.load_part(name, dim, start, len, device)
    }

    /// Total bytes of all tensors (for progress bars).
    pub fn total_bytes(&self) -> usize {
        self.files.iter().map(|f| f.mmap.len()).sum()
    }
}

/// Loads every tensor of one file.
pub fn load(path: impl AsRef<Path>, device: Device) -> Result<HashMap<String, Tensor>> {
    SafetensorsFile::open(path)?.load_all(device)
}

/// Writes tensors (any device, any dtype) to `path`.
pub fn save(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let mut owned: BTreeMap<String, (DType, Vec<usize>, Vec<u8>)> = BTreeMap::new();
    for (name, t) in tensors {
        owned.insert(name.to_string(), (t.dtype(), t.shape().to_vec(), t.to_raw_bytes()?));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = owned
        .iter()
        .map(|(n, (d, s, b))| {
            safetensors::tensor::TensorView::new(dtype_to_st(*d), s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| file_err(path, format!("tensor {n:?}: {e}")))
        })
        .collect::<Result<_>>()?;
    safetensors::serialize_to_file(views, None, path).map_err(|e| file_err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_dtype() {
        let dir = std::env::temp_dir().join(format!("kiln-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("all.safetensors");
        let src = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu).unwrap().reshape(&[2, 3]).unwrap();
        let ts: Vec<(String, Tensor)> =
            DType::ALL.iter().map(|&d| (d.name().to_string(), src.to_dtype(d).unwrap())).collect();
        let refs: Vec<(&str, &Tensor)> = ts.iter().map(|(n, t)| (n.as_str(), t)).collect();
        save(&path, &refs).unwrap();
        let back = load(&path, Device::Cpu).unwrap();
        for (n, t) in &ts {
            let b = &back[n];
            assert_eq!(b.dtype(), t.dtype());
            assert_eq!(b.shape(), t.shape());
            assert_eq!(b.to_raw_bytes().unwrap(), t.to_raw_bytes().unwrap());
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Every slice along every dim of a 3-D tensor equals `narrow` of the whole, in two
    /// dtypes; a slice past the end is an error.
    #[test]
    fn load_part_equals_narrow_of_the_whole() {
        let dir = std::env::temp_dir().join(format!("kiln-st-part-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.safetensors");
        let t = Tensor::randn(&[3, 4, 5], 7, DType::F32, Device::Cpu).unwrap();
        let h = t.to_dtype(DType::BF16).unwrap();
        save(&path, &[("t", &t), ("h", &h)]).unwrap();
        let f = SafetensorsFile::open(&path).unwrap();
        for (name, whole) in [("t", &t), ("h", &h)] {
            for dim in 0..3 {
                for (start, len) in [(0, 1), (1, 2), (0, whole.shape()[dim])] {
                    let got = f.load_part(name, dim, start, len, Device::Cpu).unwrap();
                    let want = whole.narrow(dim as isize, start, len).unwrap();
                    assert_eq!(got.shape(), want.shape());
                    assert_eq!(
                        got.to_raw_bytes().unwrap(),
                        want.to_raw_bytes().unwrap(),
                        "{name} {dim} {start}"
                    );
                }
            }
        }
        assert!(f.load_part("t", 1, 3, 2, Device::Cpu).is_err());
        assert!(f.load_part("t", 3, 0, 1, Device::Cpu).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn truncated_file_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("kiln-st-trunc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.safetensors");
        let t = Tensor::ones(&[64], DType::F32, Device::Cpu).unwrap();
        save(&path, &[("x", &t)]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let err = SafetensorsFile::open(&path).err().expect("truncated file must fail").to_string();
        assert!(err.contains("t.safetensors") && err.contains("not a valid"), "{err}");
        std::fs::write(&path, b"garbage").unwrap();
        assert!(SafetensorsFile::open(&path).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn sharded_checkpoint_resolves_each_tensor() {
        let dir = std::env::temp_dir().join(format!("kiln-st-shard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = Tensor::ones(&[2], DType::BF16, Device::Cpu).unwrap();
        let b = Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap();
        save(dir.join("s1.safetensors"), &[("a", &a)]).unwrap();
        save(dir.join("s2.safetensors"), &[("b", &b)]).unwrap();
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            r#"{"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}"#,
        )
        .unwrap();
        let ck = Checkpoint::open(&dir).unwrap();
        assert_eq!(ck.names(), vec!["a", "b"]);
        assert_eq!(ck.load("b", Device::Cpu).unwrap().shape(), &[3]);
        assert!(ck.load("c", Device::Cpu).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
