//! Models named by Hugging Face Hub id (`ORG/NAME`, `ORG/NAME@REVISION`), found in the
//! cache that `huggingface_hub` (`hf download`, transformers) fills:
//! `<cache>/models--ORG--NAME/refs/<revision>` holds a commit hash and
//! `snapshots/<hash>/` the files. kiln only reads the cache: downloading would bring a TLS
//! stack into every build, so a model that is not there is an error saying how to fetch
//! it. Being offline (`HF_HUB_OFFLINE=1`) therefore changes only that advice.

use kiln::{Error, Result};
use std::path::{Path, PathBuf};

/// The folder or file `spec` names: `spec` itself when it exists, else the cached
/// snapshot of the Hub id `ORG/NAME[@REVISION]` (revision `main` by default; a branch,
/// a tag or a commit hash) in [`cache_dir`]. The error says what was looked for and where.
pub fn resolve(spec: &str) -> Result<PathBuf> {
    let path = Path::new(spec);
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    let not_found = |msg: String| Error::File { path: spec.to_string(), msg };
    let Some(id) = HubId::parse(spec) else {
        return Err(not_found("no such model folder or file (nor a Hub id ORG/NAME[@REVISION])".into()));
    };
    let Some(cache) = cache_dir() else {
        return Err(not_found(
            "no such model folder or file, and no Hugging Face cache to look in \
             (neither HF_HUB_CACHE, HF_HOME nor a home folder is set)"
                .into(),
        ));
    };
    id.find_in(&cache).map_err(|why| not_found(format!("no such model folder or file, and {why}")))
}

/// The Hub cache: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `XDG_CACHE_HOME/huggingface/hub`,
/// else `~/.cache/huggingface/hub`, as `huggingface_hub` chooses it.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| Some(var("HF_HOME")?.join("hub")))
        .or_else(|| Some(var("XDG_CACHE_HOME")?.join("huggingface/hub")))
        .or_else(|| Some(dirs::home_dir()?.join(".cache/huggingface/hub")))
}

/// A model's Hub id and revision.
#[derive(Debug, PartialEq)]
struct HubId<'a> {
    org: &'a str,
    name: &'a str,
    revision: &'a str,
}

impl<'a> HubId<'a> {
    /// `ORG/NAME[@REVISION]` with the Hub's characters (letters, digits, `-_.`; a revision
    /// may also hold `/`, as `refs/pr/1` does), never `..`: the id becomes a path.
    fn parse(spec: &'a str) -> Option<Self> {
        let (repo, revision) = spec.split_once('@').unwrap_or((spec, "main"));
        let (org, name) = repo.split_once('/')?;
        let ok = |s: &str, extra: &[char]| {
            !s.is_empty()
                && !s.starts_with(['.', '/'])
                && !s.contains("..")
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c) || extra.contains(&c))
        };
        (ok(org, &[]) && ok(name, &[]) && ok(revision, &['/'])).then_some(HubId { org, name, revision })
    }

    /// The snapshot folder of this revision under `cache`; the error names the file or
    /// folder that is missing and how to fetch the model.
    fn find_in(&self, cache: &Path) -> std::result::Result<PathBuf, String> {
        let HubId { org, name, revision } = self;
        let repo = cache.join(format!("models--{org}--{name}"));
        let offline = std::env::var("HF_HUB_OFFLINE")
            .is_ok_and(|v| ["1", "on", "yes", "true"].contains(&v.to_ascii_lowercase().as_str()));
        let args = match *revision {
            "main" => format!("{org}/{name}"),
            rev => format!("{org}/{name} --revision {rev}"),
        };
        let fetch = format!(
            "{} `hf download {args}` (or `huggingface-cli download {args}`)",
            match offline {
                true => "HF_HUB_OFFLINE is set: fetch it where the network is reachable with",
                false => "kiln does not download: fetch it with",
            }
        );
        if !repo.is_dir() {
            return Err(format!(
                "{org}/{name} is not in the Hugging Face cache ({} is missing). {fetch}",
                repo.display()
            ));
        }
        let refs = repo.join("refs").join(revision);
        let commit = match std::fs::read_to_string(&refs) {
            Ok(text) => text.trim().to_string(),
            // A commit hash names its snapshot directly.
            Err(_) if revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit()) => {
                revision.to_string()
            }
            Err(e) => {
                return Err(format!(
                    "revision {revision:?} of {org}/{name} is not cached ({}: {e}). {fetch}",
                    refs.display()
                ))
            }
        };
        let snapshot = repo.join("snapshots").join(&commit);
        match snapshot.is_dir() {
            true => Ok(snapshot),
            false => Err(format!(
                "{} (revision {revision:?} of {org}/{name}) is missing: an interrupted download? {fetch}",
                snapshot.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hub_ids() {
        let id = |org, name, revision| Some(HubId { org, name, revision });
        assert_eq!(HubId::parse("Qwen/Qwen3-8B"), id("Qwen", "Qwen3-8B", "main"));
        assert_eq!(HubId::parse("a/b.c_d@refs/pr/1"), id("a", "b.c_d", "refs/pr/1"));
        for bad in ["Qwen3-8B", "a/b/c", "../b", "a/..", "a/b@../../x", "a/b@", "/b", "a b/c"] {
            assert_eq!(HubId::parse(bad), None, "{bad}");
        }
    }

    /// A cache laid out as `huggingface_hub` lays it: refs/main, a tag, two snapshots.
    #[test]
    fn finds_snapshots_by_ref_tag_and_hash() {
        let cache = std::env::temp_dir().join(format!("kiln-hub-{}", std::process::id()));
        let repo = cache.join("models--org--m");
        let (main, old) = ("a".repeat(40), "b".repeat(40));
        for hash in [&main, &old] {
            std::fs::create_dir_all(repo.join("snapshots").join(hash)).unwrap();
        }
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), &main).unwrap();
        std::fs::write(repo.join("refs/v1"), format!("{old}\n")).unwrap();
        let find = |spec: &str| HubId::parse(spec).unwrap().find_in(&cache);
        assert_eq!(find("org/m").unwrap(), repo.join("snapshots").join(&main));
        assert_eq!(find("org/m@v1").unwrap(), repo.join("snapshots").join(&old));
        assert_eq!(find(&format!("org/m@{old}")).unwrap(), repo.join("snapshots").join(&old));
        let e = find("org/other").unwrap_err();
        assert!(e.contains("models--org--other") && e.contains("hf download org/other"), "{e}");
        let e = find("org/m@v2").unwrap_err();
        assert!(e.contains("\"v2\"") && e.contains("refs/v2"), "{e}");
        std::fs::write(repo.join("refs/main"), "c".repeat(40)).unwrap();
        let e = find("org/m").unwrap_err();
        assert!(e.contains(&"c".repeat(40)) && e.contains("interrupted"), "{e}");
        std::fs::remove_dir_all(&cache).ok();
    }

    #[test]
    fn an_existing_path_wins() {
        let dir = crate::config::fixtures_dir().join("models/llama");
        assert_eq!(resolve(dir.to_str().unwrap()).unwrap(), dir);
        let e = resolve("no/such/folder").unwrap_err().to_string();
        assert!(e.contains("no/such/folder") && e.contains("no such model folder"), "{e}");
    }
}
