//! The checkpoint is the truth: the sizes a `config.json` states (decoders and VAEs) are
//! checked against the shapes of the tensors in the safetensors files before any layer is
//! built or any weight allocated. A size that the checkpoint contradicts, a product that
//! overflows, or more layers than the checkpoint holds is one error naming the config key,
//! so a corrupt or hostile config cannot make kiln allocate what it states.

use crate::config::{Config, MixerKind};
use crate::wan_vae::VaeConfig;
use kiln::io::safetensors::Checkpoint;
use std::collections::BTreeSet;

/// Problems listed in one error at most (then a count of the rest).
pub const MAX_LISTED: usize = 10;

/// `problems` as one message: the first [`MAX_LISTED`], then how many more.
pub fn list(problems: &[String]) -> String {
    let mut s = problems.iter().take(MAX_LISTED).map(String::as_str).collect::<Vec<_>>().join("\n  ");
    if problems.len() > MAX_LISTED {
        s += &format!("\n  … and {} more", problems.len() - MAX_LISTED);
    }
    s
}

/// `a · b · …`, or `None` on overflow.
fn product(factors: &[usize]) -> Option<usize> {
    factors.iter().try_fold(1usize, |acc, &f| acc.checked_mul(f))
}

/// The expected shapes of a few tensors, each with the config keys that size it.
struct Expectations<'a> {
    ck: &'a Checkpoint,
    problems: Vec<String>,
}

impl Expectations<'_> {
    /// `name` must be stored with `shape` (`None`: the keys' product overflowed).
    fn tensor(&mut self, name: &str, shape: Option<Vec<usize>>, keys: &str) {
        let Some(shape) = shape else {
            self.problems.push(format!("{keys}: the sizes' product overflows"));
            return;
        };
        match self.ck.meta(name) {
            Ok(meta) if meta.shape == shape => {}
            Ok(meta) => self.problems.push(format!(
                "{keys}: config.json makes {name} {shape:?}, the checkpoint holds {:?}",
                meta.shape
            )),
            Err(_) => self.problems.push(format!("{keys}: {name} is not in the checkpoint to confirm them")),
        }
    }

    /// How many numbered children `{prefix}.{i}.…` the checkpoint holds (highest `i` + 1).
    fn children(&self, prefix: &str) -> usize {
        let dotted = format!("{prefix}.");
        let ids: BTreeSet<usize> = self
            .ck
            .names()
            .iter()
            .filter_map(|n| n.strip_prefix(&dotted)?.split('.').next()?.parse().ok())
            .collect();
        ids.last().map_or(0, |i| i + 1)
    }

    /// `count` (the config's `key`) must not exceed the children the checkpoint holds.
    fn count(&mut self, key: &str, count: usize, prefix: &str, what: &str) {
        let held = self.children(prefix);
        if count > held {
            self.problems
                .push(format!("\"{key}\" is {count} but the checkpoint holds {held} {what} ({prefix}.N)"));
        }
    }

    fn finish(self) -> std::result::Result<(), String> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(format!("config.json disagrees with the checkpoint:\n  {}", list(&self.problems)))
        }
    }
}

/// Checks a decoder's config against its checkpoint: the layer count, and the first layer
/// of each mixer and feed-forward kind (the sizes every other layer shares).
pub fn check_model(c: &Config, ck: &Checkpoint) -> std::result::Result<(), String> {
    let mut x = Expectations { ck, problems: vec![] };
    let (p, h, names) = (c.weight_prefix, c.hidden_size, c.arch.names());
    x.tensor(&format!("{p}.embed_tokens.weight"), Some(vec![c.vocab_size, h]), "vocab_size, hidden_size");
    x.count("num_hidden_layers", c.num_layers, &format!("{p}.layers"), "layers");
    if !x.problems.is_empty() {
        // Without the layer count and the width confirmed, the per-layer checks say nothing.
        return x.finish();
    }
    let first = |kind: &dyn Fn(usize) -> bool| (0..c.num_layers).find(|&i| kind(i));
    let d = c.head_dim;
    if let Some(i) = first(&|i| c.mixer(i) == MixerKind::Attention) {
        let a = format!("{p}.layers.{i}.self_attn");
        let gate = if c.attn_output_gate { 2 } else { 1 };
        let heads = "num_attention_heads, head_dim, hidden_size";
        x.tensor(&format!("{a}.q_proj.weight"), product(&[gate, c.num_heads, d]).map(|q| vec![q, h]), heads);
        let kv = product(&[c.num_kv_heads, d]).map(|k| vec![k, h]);
        x.tensor(&format!("{a}.k_proj.weight"), kv, "num_key_value_heads, head_dim");
        if c.qk_norm {
            x.tensor(&format!("{a}.{}.weight", names.qk_norm[0]), Some(vec![d]), "head_dim");
        }
    }
    if let (Some(i), Some(sc)) = (first(&|i| c.mixer(i) == MixerKind::ShortConv), &c.short_conv) {
        let conv = format!("{p}.layers.{i}.conv");
        x.tensor(&format!("{conv}.in_proj.weight"), product(&[3, h]).map(|o| vec![o, h]), "hidden_size");
        x.tensor(&format!("{conv}.conv.weight"), Some(vec![h, 1, sc.kernel]), "conv_L_cache");
    }
    if let (Some(i), Some(g)) = (first(&|i| c.mixer(i) == MixerKind::GatedDelta), &c.gated_delta) {
        let la = format!("{p}.layers.{i}.linear_attn");
        let qk = product(&[2, g.key_heads, g.key_dim]);
        let v = product(&[g.value_heads, g.value_dim]);
        let channels = qk.zip(v).and_then(|(a, b)| a.checked_add(b));
        let keys = "linear_num_key_heads, linear_key_head_dim, linear_num_value_heads, linear_value_head_dim";
        x.tensor(&format!("{la}.in_proj_qkv.weight"), channels.map(|c| vec![c, h]), keys);
        x.tensor(&format!("{la}.in_proj_z.weight"), v.map(|v| vec![v, h]), keys);
        x.tensor(&format!("{la}.in_proj_b.weight"), Some(vec![g.value_heads, h]), "linear_num_value_heads");
        x.tensor(&format!("{la}.norm.weight"), Some(vec![g.value_dim]), "linear_value_head_dim");
        let conv = channels.map(|c| vec![c, 1, g.conv_kernel]);
        x.tensor(&format!("{la}.conv1d.weight"), conv, "linear_conv_kernel_dim");
    }
    let [gate, _, _] = names.mlp;
    if let Some(i) = first(&|i| !c.is_moe_layer(i)) {
        let w = format!("{p}.layers.{i}.{}.{gate}.weight", names.ffn);
        x.tensor(&w, Some(vec![c.intermediate_size, h]), "intermediate_size");
    }
    if let (Some(i), Some(m)) = (first(&|i| c.is_moe_layer(i)), &c.moe) {
        let ffn = format!("{p}.layers.{i}.{}", names.ffn);
        x.tensor(&format!("{ffn}.gate.weight"), Some(vec![m.num_experts, h]), "num_experts");
        x.count("num_experts", m.num_experts, &format!("{ffn}.experts"), "experts");
        let expert = format!("{ffn}.experts.0.{gate}.weight");
        x.tensor(&expert, Some(vec![m.intermediate_size, h]), "moe_intermediate_size");
        if let Some(s) = m.shared_expert_intermediate_size {
            let w = format!("{ffn}.shared_expert.{gate}.weight");
            x.tensor(&w, Some(vec![s, h]), "shared_expert_intermediate_size");
        }
    }
    x.finish()
}

/// Checks a Wan VAE's config against its checkpoint: the levels and residual blocks it
/// holds, and the widths of every decoder level and of the encoder's ends.
pub fn check_vae(c: &VaeConfig, ck: &Checkpoint) -> std::result::Result<(), String> {
    let mut x = Expectations { ck, problems: vec![] };
    let levels = c.dim_mult.len();
    if levels == 0 {
        return Err("dim_mult is empty".into());
    }
    x.count("dim_mult", levels, "decoder.up_blocks", "decoder levels");
    let blocks = c.num_res_blocks.saturating_add(1);
    x.count("num_res_blocks + 1", blocks, "decoder.up_blocks.0.resnets", "residual blocks per level");
    if !x.problems.is_empty() {
        return x.finish();
    }
    let conv = |cout: Option<usize>, cin: Option<usize>| Some(vec![cout?, cin?, 3, 3, 3]);
    let (base, dec) = (c.base_dim, c.decoder_dim());
    let widths = |b: usize| c.dim_mult.iter().map(|&m| m.checked_mul(b)).collect::<Vec<_>>();
    let (enc_w, dec_w) = (widths(base), widths(dec));
    x.tensor("encoder.conv_in.weight", conv(Some(base), Some(c.in_channels)), "base_dim, in_channels");
    let z2 = c.z_dim.checked_mul(2);
    x.tensor("encoder.conv_out.weight", conv(z2, enc_w[levels - 1]), "z_dim, base_dim, dim_mult");
    let dec_keys = "decoder_base_dim (or base_dim), dim_mult";
    x.tensor("decoder.conv_in.weight", conv(dec_w[levels - 1], Some(c.z_dim)), &format!("z_dim, {dec_keys}"));
    for (i, w) in dec_w.iter().rev().enumerate() {
        let name = format!("decoder.up_blocks.{i}.resnets.0.conv2.weight");
        x.tensor(&name, conv(*w, *w), dec_keys);
    }
    x.tensor(
        "decoder.conv_out.weight",
        conv(Some(c.out_channels), dec_w[0]),
        &format!("out_channels, {dec_keys}"),
    );
    x.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures_dir;

    #[test]
    fn fixtures_agree_with_their_configs() {
        for arch in crate::golden::ARCHS {
            let dir = fixtures_dir().join("models").join(arch);
            let ck = Checkpoint::open(&dir).unwrap();
            check_model(&Config::load(&dir).unwrap(), &ck).unwrap_or_else(|e| panic!("{arch}: {e}"));
        }
        for name in crate::wan_vae::FIXTURES {
            let dir = fixtures_dir().join("vae").join(name);
            let ck = Checkpoint::open_named(&dir, "diffusion_pytorch_model").unwrap();
            check_vae(&VaeConfig::load(&dir).unwrap(), &ck).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// `config.json` of fixture `arch` with `from` replaced by `to`, checked against its
    /// checkpoint: the error.
    fn contradiction(arch: &str, from: &str, to: &str) -> String {
        let dir = fixtures_dir().join("models").join(arch);
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        assert!(text.contains(from), "{from}");
        let c = Config::from_json(&text.replace(from, to)).unwrap();
        check_model(&c, &Checkpoint::open(&dir).unwrap()).unwrap_err()
    }

    #[test]
    fn contradicted_sizes_name_their_key() {
        let huge = "1099511627776";
        let e = contradiction("qwen3_moe", "\"head_dim\": 16", &format!("\"head_dim\": {huge}"));
        assert!(e.contains("head_dim") && e.contains("q_proj"), "{e}");
        let e = contradiction("qwen3_moe", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000");
        assert!(e.contains("\"num_hidden_layers\" is 1000000 but the checkpoint holds 2 layers"), "{e}");
        let e = contradiction(
            "qwen3_moe",
            "\"moe_intermediate_size\": 32",
            &format!("\"moe_intermediate_size\": {huge}"),
        );
        assert!(e.contains("moe_intermediate_size"), "{e}");
        let e = contradiction("qwen3_moe", "\"hidden_size\": 64", &format!("\"hidden_size\": {huge}"));
        assert!(e.contains("hidden_size") && e.contains("embed_tokens"), "{e}");
        let e = contradiction(
            "qwen3_5_moe",
            "\"linear_key_head_dim\": 16",
            &format!("\"linear_key_head_dim\": {huge}"),
        );
        assert!(e.contains("linear_key_head_dim"), "{e}");

        let dir = fixtures_dir().join("vae/wan21_vae_tiny");
        let ck = Checkpoint::open_named(&dir, "diffusion_pytorch_model").unwrap();
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let vae = |from: &str, to: &str| {
            assert!(text.contains(from), "{from}");
            check_vae(&VaeConfig::parse(&text.replace(from, to)).unwrap(), &ck).unwrap_err()
        };
        assert!(vae("\"base_dim\": 8", "\"base_dim\": 1000000000").contains("base_dim"));
        assert!(vae("\"num_res_blocks\": 1", "\"num_res_blocks\": 1000000000").contains("num_res_blocks"));
        let e = vae("\"decoder_base_dim\": null", "\"decoder_base_dim\": 1000000000");
        assert!(e.contains("decoder_base_dim"), "{e}");
    }

    #[test]
    fn long_lists_are_cut_at_ten() {
        let problems: Vec<String> = (0..25).map(|i| format!("p{i}")).collect();
        let s = list(&problems);
        assert!(s.contains("p9") && !s.contains("p10") && s.ends_with("… and 15 more"), "{s}");
    }
}
