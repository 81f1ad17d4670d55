//! The fixture cases: kiln's op cases ([`kiln::testing::fixtures`]) and the models' and
//! VAEs' end-to-end ones, which need kiln-models.

pub use kiln::testing::fixtures::{default_dir, run, summary, CaseResult, Outcome};
use kiln::{DType, Device};
use std::path::Path;

/// The fixture models of `dir/models` (issue "Models I"): weights in f32, transformers'
/// prefill logits within `golden::F32_LOGIT_TOL` and its greedy tokens exactly; then the
/// VAEs of `dir/vae`.
pub fn run_models(dir: &Path, device: Device) -> Vec<CaseResult> {
    use kiln_models::golden;
    golden::ARCHS
        .iter()
        .map(|arch| {
            let r = golden::check(&dir.join("models").join(arch), device, DType::F32);
            let outcome = match r {
                Err(e) => Outcome::Fail(e.to_string()),
                Ok(r) => match golden::verdict(&r, DType::F32) {
                    Ok(()) => Outcome::Pass { max_err: r.max_logit_err },
                    Err(msg) => Outcome::Fail(msg),
                },
            };
            CaseResult { case: format!("model_{arch}"), op: "model logits+greedy".into(), outcome }
        })
        .chain(run_vaes(dir, device))
        .collect()
}

/// The Wan VAE fixtures of `dir/vae`: decode, encode and roundtrip in f32 against
/// diffusers, above `wan_vae::min_psnr` (the reported error is the largest |Δ|).
fn run_vaes(dir: &Path, device: Device) -> impl Iterator<Item = CaseResult> + '_ {
    use kiln_models::wan_vae;
    wan_vae::FIXTURES.iter().map(move |name| {
        let outcome = match wan_vae::check(&dir.join("vae").join(name), device, DType::F32) {
            Err(e) => Outcome::Fail(e.to_string()),
            Ok(r) => match wan_vae::verdict(&r, DType::F32) {
                Ok(()) => Outcome::Pass { max_err: r.max_err },
                Err(msg) => Outcome::Fail(msg),
            },
        };
        CaseResult { case: format!("vae_{name}"), op: "vae decode+encode".into(), outcome }
    })
}
