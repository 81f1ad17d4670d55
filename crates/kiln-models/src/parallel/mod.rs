//! Tensor parallelism: a model spread over `world` ranks, each holding a part of every
//! large weight and computing its part of each layer, with collectives joining the parts.
//!
//! The split is Megatron's (with [`ExpertSplit::Columns`]): the q / k / v projections, MLP gate and up projections and
//! every expert's gate and up are split by output rows (heads, intermediate columns), so
//! a rank computes its heads' attention and its columns' SwiGLU alone; `o_proj` and the
//! down projections are split by input columns, so each rank's output is a partial sum
//! that one all-reduce per mixer and per MLP / MoE block completes. The LM head is split
//! by vocabulary rows and its logits all-gathered. The embedding, norms, MoE router and
//! the short-convolution and DeltaNet mixers are replicated (each rank computes them
//! whole: their outputs need no collective). With [`ExpertSplit::Whole`] (expert
//! parallelism) each rank holds whole experts instead, a `1 / world` share of them, and
//! runs the tokens the router sends to those; the same all-reduce joins the ranks' sums.
//!
//! A rank's weights are read as its part straight from the checkpoint
//! ([`crate::loader::WeightSource::get_part`]): no rank holds the whole of a split weight.
//! [`ThreadGroup`] runs the ranks as threads of one process over the CPU backend: the same
//! code path as ranks on several GPUs, which is how the tests check the sharding.

mod threads;

pub use threads::{run_ranks, ThreadGroup};

use kiln::{Error, Result, Tensor};

/// How a split MoE block shares its routed experts among the ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExpertSplit {
    /// Tensor parallel: every rank holds every expert's share of the intermediate columns.
    #[default]
    Columns,
    /// Expert parallel: each rank holds `E / world` whole experts, and the router's choices
    /// of another rank's experts weigh zero on this one.
    Whole,
}

/// Which part of the model a rank holds: rank `rank` of `world`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This rank, `0..world`.
    pub rank: usize,
    /// How many ranks share the model.
    pub world: usize,
    /// How the routed experts are shared.
    pub experts: ExpertSplit,
}

impl Shard {
    /// The whole model on one rank.
    pub const WHOLE: Shard = Shard { rank: 0, world: 1, experts: ExpertSplit::Columns };

    /// Rank `rank` of `world` (≥ 1), experts split as `experts` says.
    pub fn new(rank: usize, world: usize, experts: ExpertSplit) -> Result<Shard> {
        if world == 0 || rank >= world {
            return Err(Error::invalid("shard", format!("rank {rank} of {world} ranks")));
        }
        Ok(Shard { rank, world, experts })
    }

    /// Whether the model is split at all.
    pub fn is_split(&self) -> bool {
        self.world > 1
    }

    /// How many of `n` units (heads, columns, rows) this rank holds: `n / world`, an error
    /// naming `what` when `world` does not divide `n`.
    pub fn part_len(&self, what: &str, n: usize) -> Result<usize> {
        if !n.is_multiple_of(self.world) {
            return Err(Error::invalid(
                "tensor parallel",
                format!("{n} {what} do not split evenly over {} ranks", self.world),
            ));
        }
        Ok(n / self.world)
    }

    /// This rank's units of `n`: `(start, len)` with `len` = [`part_len`](Shard::part_len)
    /// and `start` = `rank · len`.
    pub fn part(&self, what: &str, n: usize) -> Result<(usize, usize)> {
        let len = self.part_len(what, n)?;
        Ok((self.rank * len, len))
    }

    /// This rank's slice of `x` along `dim` ([`part`](Shard::part)), contiguous.
    pub fn part_of(&self, x: &Tensor, dim: usize, what: &str) -> Result<Tensor> {
        let (start, len) = self.part(what, x.shape()[dim])?;
        x.narrow(dim as isize, start, len)?.contiguous()
    }
}

/// The collectives a tensor-parallel model runs between its ranks. Every rank calls the
/// same collectives in the same order; each returns the same tensor on every rank.
pub trait Collective: Send + Sync {
    /// Where this rank stands.
    fn shard(&self) -> Shard;
    /// The elementwise sum of every rank's `x` (same shape and dtype on all ranks).
    fn all_reduce_sum(&self, x: &Tensor) -> Result<Tensor>;
    /// Every rank's `x` concatenated along `dim` in rank order.
    fn all_gather(&self, x: &Tensor, dim: isize) -> Result<Tensor>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures_dir;
    use crate::loader::{Quantize, RandomSource};
    use crate::{Config, Model};
    use kiln::{DType, Device};
    use std::sync::Arc;

    /// Logits `[1, T, V]` of `prompt` then of each of `steps` one at a time.
    fn run(model: &Model, prompt: &Tensor, steps: &[i64]) -> Vec<Tensor> {
        let mut cache = model.new_cache(1, prompt.shape()[1] + steps.len()).unwrap();
        let mut out = vec![model.logits(&model.forward(prompt, &mut cache).unwrap()).unwrap()];
        for &id in steps {
            let one = Tensor::from_vec(vec![id], &[1, 1], Device::Cpu).unwrap();
            out.push(model.logits(&model.forward(&one, &mut cache).unwrap()).unwrap());
        }
        out
    }

    /// Each rank's logits and weight bytes, from `world` threads (experts split as
    /// `experts` says) each running `load(its group)`.
    fn ranks(
        world: usize,
        experts: ExpertSplit,
        load: impl Fn(Arc<dyn Collective>) -> Model + Sync,
        go: impl Fn(&Model) -> Vec<Tensor> + Sync,
    ) -> Vec<(Vec<Tensor>, usize)> {
        run_ranks(world, experts, |comm| {
            let model = load(comm);
            Ok((go(&model), model.weight_bytes()))
        })
        .unwrap()
    }

    fn assert_close(arch: &str, world: usize, whole: &[Tensor], part: &[Tensor]) {
        for (step, (w, p)) in whole.iter().zip(part).enumerate() {
            assert_eq!(w.shape(), p.shape(), "{arch}, {world} ranks, step {step}");
            let worst = w.sub(p).unwrap().abs().unwrap().max(&[], false).unwrap().item().unwrap();
            assert!(worst < 1e-4, "{arch}, {world} ranks, step {step}: max |Δlogit| {worst}");
        }
    }

    /// Every fixture family split over 2 ranks (threads, CPU) gives, on every rank, the
    /// logits of the whole model over a prompt and three decode steps; each rank holds
    /// less than the whole model's weights, read as its parts from the checkpoint.
    #[test]
    fn split_checkpoints_give_the_whole_model_s_logits() {
        for arch in crate::golden::ARCHS {
            let dir = fixtures_dir().join("models").join(arch);
            let golden = kiln::io::safetensors::load(dir.join("golden.safetensors"), Device::Cpu).unwrap();
            let prompt = golden["input_ids"].narrow(1, 0, 6).unwrap();
            let steps = [3, 141, 59];
            let whole = Model::load(&dir, Device::Cpu, DType::F32).unwrap();
            let want = run(&whole, &prompt, &steps);
            let world = 2;
            let load = |comm: Arc<dyn Collective>| {
                Model::load_parallel(&dir, Device::Cpu, DType::F32, Quantize::None, comm).unwrap()
            };
            for experts in [ExpertSplit::Columns, ExpertSplit::Whole] {
                let got = ranks(world, experts, load, |m| run(m, &prompt, &steps));
                for (rank, (got, bytes)) in got.into_iter().enumerate() {
                    assert_close(arch, world, &want, &got);
                    let all = whole.weight_bytes();
                    assert!(
                        bytes < all,
                        "{arch} {experts:?}: rank {rank} holds {bytes} B, the whole model {all}"
                    );
                }
            }
        }
    }

    /// Random-weight models split over 2 and 4 ranks make the same model as one rank (the
    /// parts are cut from the same seeded weights): same logits.
    #[test]
    fn split_random_models_give_the_whole_model_s_logits() {
        let text = std::fs::read_to_string(fixtures_dir().join("models/qwen3_moe/config.json")).unwrap();
        let mut config = Config::from_json(&text).unwrap();
        config.num_kv_heads = 4;
        let prompt = Tensor::from_vec(vec![1i64, 7, 300, 42], &[1, 4], Device::Cpu).unwrap();
        let steps = [5, 77];
        let random = |shard| {
            let mut src = RandomSource::new(Device::Cpu, DType::F32, 11);
            src.std = 0.1;
            src.shard = shard;
            src
        };
        let whole = Model::build(config.clone(), &mut random(Shard::WHOLE)).unwrap();
        let want = run(&whole, &prompt, &steps);
        for world in [2, 4] {
            let load = |comm: Arc<dyn Collective>| {
                Model::build_parallel(config.clone(), &mut random(comm.shard()), comm).unwrap()
            };
            for experts in [ExpertSplit::Columns, ExpertSplit::Whole] {
                for (got, _) in ranks(world, experts, load, |m| run(m, &prompt, &steps)) {
                    assert_close("random qwen3_moe", world, &want, &got);
                }
            }
        }
    }

    /// Heads that do not split evenly, or a source read for another rank, are refused.
    #[test]
    fn uneven_heads_and_mismatched_ranks_are_errors() {
        let dir = fixtures_dir().join("models/llama");
        let comm: Arc<dyn Collective> =
            Arc::new(ThreadGroup::new(3, ExpertSplit::Columns).unwrap().remove(0));
        let err = Model::load_parallel(&dir, Device::Cpu, DType::F32, Quantize::None, comm)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("do not split evenly over 3 ranks"), "{err}");
        let config = Config::load(&dir).unwrap();
        let comm: Arc<dyn Collective> =
            Arc::new(ThreadGroup::new(2, ExpertSplit::Columns).unwrap().remove(1));
        let mut src = RandomSource::new(Device::Cpu, DType::F32, 1);
        let err = Model::build_parallel(config, &mut src, comm).err().unwrap().to_string();
        assert!(err.contains("rank"), "{err}");
        assert!(
            Shard::new(2, 2, ExpertSplit::Columns).is_err() && Shard::new(0, 0, ExpertSplit::Whole).is_err()
        );
    }
}
