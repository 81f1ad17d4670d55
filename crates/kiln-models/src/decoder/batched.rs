//! One decode step for several sequences at once, each with its own cache and length
//! (continuous batching, `kiln serve`). The embedding, norms, MLPs or MoE blocks and the LM
//! head run once over all the sequences' rows (GEMMs with M = the number of sequences);
//! each mixer (attention with its projections, short convolution, DeltaNet) runs per
//! sequence, since its cache and position are that sequence's.

use super::Model;
use crate::kv_cache::KvCache;
use kiln::{Error, Result, Tensor};

impl Model {
    /// Hidden states after the final norm, `[N, 1, H]`, of one new token per sequence
    /// (`ids` `[N, 1]`), the token of row `i` appended to `caches[i]`. Row `i` equals what
    /// [`Model::forward`] gives for that token over `caches[i]` alone (up to rounding).
    pub fn forward_batched(&self, ids: &Tensor, caches: &mut [&mut KvCache]) -> Result<Tensor> {
        let n = caches.len();
        if ids.shape() != [n, 1] {
            return Err(Error::bad_shape(
                "model",
                format!("token ids must be [{n}, 1] for {n} caches, got {:?}", ids.shape()),
            ));
        }
        for c in caches.iter_mut() {
            c.begin_step(1)?;
        }
        let x = self.embed.index_select(0, &ids.reshape(&[n])?)?.reshape(&[n, 1, self.config.hidden_size])?;
        let h = self.run_layers(x, |l, h| {
            let rows = caches
                .iter_mut()
                .enumerate()
                .map(|(i, c)| l.mix(&h.narrow(0, i, 1)?, &self.rope, c))
                .collect::<Result<Vec<_>>>()?;
            Tensor::cat(&rows, 0)
        })?;
        for c in caches.iter_mut() {
            c.advance(1)?;
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures_dir;
    use kiln::{DType, Device};

    /// Three sequences of different lengths stepped together give each one's logits of
    /// stepping it alone, for every fixture family (attention, short convolution, DeltaNet
    /// and MoE layers).
    #[test]
    fn batched_step_equals_steps_one_at_a_time() {
        for arch in crate::golden::ARCHS {
            let dir = fixtures_dir().join("models").join(arch);
            let model = Model::load(&dir, Device::Cpu, DType::F32).unwrap();
            let golden = kiln::io::safetensors::load(dir.join("golden.safetensors"), Device::Cpu).unwrap();
            let ids = &golden["input_ids"];
            let prompts = [3, 7, 5].map(|len| ids.narrow(1, 0, len).unwrap());
            let fresh = || -> Vec<KvCache> {
                prompts
                    .iter()
                    .map(|p| {
                        let mut c = model.new_cache(1, 16).unwrap();
                        model.forward(p, &mut c).unwrap();
                        c
                    })
                    .collect()
            };
            let (mut alone, mut together) = (fresh(), fresh());
            for step in 0..3 {
                let next: Vec<i64> = (0..3).map(|i| (11 * i + 5 * step + 1) as i64).collect();
                let batch = Tensor::from_vec(next.clone(), &[3, 1], Device::Cpu).unwrap();
                let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
                let got = model.logits(&model.forward_batched(&batch, &mut refs).unwrap()).unwrap();
                for (i, c) in alone.iter_mut().enumerate() {
                    let one = Tensor::from_vec(vec![next[i]], &[1, 1], Device::Cpu).unwrap();
                    let want = model.logits(&model.forward(&one, c).unwrap()).unwrap();
                    let row = got.narrow(0, i, 1).unwrap();
                    let worst =
                        want.sub(&row).unwrap().abs().unwrap().max(&[], false).unwrap().item().unwrap();
                    assert!(worst < 1e-4, "{arch}, step {step}, sequence {i}: max |Δlogit| {worst}");
                    assert_eq!(c.len(), together[i].len());
                }
            }
        }
    }
}
