//! `kiln generate` as people run it, on the CPU with the fixture Llama: the prompt from
//! stdin, a closed stdout, the seed it prints, Hub ids from a Hugging Face cache laid out
//! on disk, and the chat template applied by default.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn llama() -> PathBuf {
    kiln_models::config::fixtures_dir().join("models/llama")
}

/// `kiln generate --dtype f32 --max-tokens 8 ARGS…`, with no Hub or log settings of the
/// caller's environment.
fn kiln_generate(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(["generate", "--dtype", "f32", "--max-tokens", "8"]).args(args);
    for var in ["RUST_LOG", "HF_HUB_CACHE", "HF_HOME", "HF_HUB_OFFLINE"] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// [`kiln_generate`] on the CPU.
fn generate(args: &[&str]) -> Command {
    let mut cmd = kiln_generate(&["--device", "cpu"]);
    cmd.args(args);
    cmd
}

/// Runs `cmd` and checks that it succeeded: (stdout, stderr).
fn ok(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{cmd:?} failed: {stderr}");
    (stdout, stderr)
}

fn texts(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The number after `key ` in the stats line, e.g. `prefill 5 tokens` → 5.
fn stat(stderr: &str, key: &str) -> u64 {
    let at = stderr.rfind(&format!("{key} ")).unwrap_or_else(|| panic!("no {key:?} in {stderr}"));
    let digits: String = stderr[at + key.len() + 1..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{key:?} has no number in {stderr}"))
}

/// A fresh folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `dir` holding links to every file of the fixture Llama.
fn link_llama(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for f in std::fs::read_dir(llama()).unwrap() {
        let f = f.unwrap().path();
        std::os::unix::fs::symlink(&f, dir.join(f.file_name().unwrap())).unwrap();
    }
}

#[test]
fn prompt_dash_reads_stdin() {
    let model = llama();
    let (want, want_err) = ok(&mut generate(&["--model", model.to_str().unwrap(), "--prompt", "The sky is"]));
    let mut child = generate(&["--model", model.to_str().unwrap(), "--prompt", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"The sky is\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let (got, got_err) = texts(&out);
    assert!(out.status.success(), "{got_err}");
    assert_eq!((got, stat(&got_err, "prefill")), (want, stat(&want_err, "prefill")));
}

/// The reader of stdout is gone before the first write: the run still ends with status 0
/// and says nothing about it.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = generate(&["--model", llama().to_str().unwrap(), "--prompt", "The sky is"])
        .stdout(writer)
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("error") && !stderr.contains("panicked"), "{stderr}");
}

/// Without --seed every run draws another seed and prints it; that seed given back
/// reproduces the run.
#[test]
fn the_printed_seed_reproduces_a_sampled_run() {
    let model = llama();
    let sample = |seed: Option<u64>| {
        let seed = seed.map(|s| s.to_string());
        let mut args =
            vec!["--model", model.to_str().unwrap(), "--prompt", "The sky is", "--temperature", "1"];
        args.extend(seed.iter().flat_map(|s| ["--seed", s.as_str()]));
        ok(&mut generate(&args))
    };
    let (first, err) = sample(None);
    let seed = stat(&err, "seed");
    assert_ne!(seed, stat(&sample(None).1, "seed"), "two runs drew the same seed");
    let (again, err) = sample(Some(seed));
    assert_eq!((again, stat(&err, "seed")), (first.clone(), seed));
    assert_ne!(sample(Some(seed ^ 1)).0, first, "another seed, the same text");
}

/// `--tp 2` splits the model over two ranks and writes the text of one rank, greedy and
/// sampled from a given seed, as `--ep 2` does for a MoE model; a split the heads do not
/// allow is refused.
#[test]
fn tensor_parallel_ranks_write_the_text_of_one_rank() {
    let model = llama();
    let run = |extra: &[&str]| {
        let mut args = vec!["--model", model.to_str().unwrap(), "--prompt", "The sky is"];
        args.extend(extra);
        ok(&mut generate(&args))
    };
    let sampled = ["--temperature", "1", "--seed", "7"];
    for extra in [&[][..], &sampled[..]] {
        let (one, _) = run(extra);
        let (two, err) = run(&[extra, &["--tp", "2"]].concat());
        assert_eq!(two, one, "{extra:?}");
        assert!(err.contains("rank 0 of 2"), "{err}");
    }
    let qwen3_moe = model.parent().unwrap().join("qwen3_moe");
    let moe = |extra: &[&str]| {
        let mut args = vec!["--model", qwen3_moe.to_str().unwrap(), "--prompt", "The sky is"];
        args.extend(extra);
        ok(&mut generate(&args)).0
    };
    assert_eq!(moe(&["--ep", "2"]), moe(&[]), "experts split whole over two ranks");
    let out = generate(&["--model", model.to_str().unwrap(), "--prompt", "x", "--tp", "3"]).output().unwrap();
    let (_, err) = texts(&out);
    assert!(!out.status.success() && err.contains("do not split evenly over 3 ranks"), "{err}");
}

/// A cache as `hf download` leaves it: refs/main naming a snapshot of links, found through
/// HF_HUB_CACHE and through HF_HOME.
#[test]
fn hub_ids_resolve_in_the_cache() {
    let home = temp_dir("hub");
    let repo = home.join("hub/models--kiln-test--llama");
    let hash = "0123456789abcdef0123456789abcdef01234567";
    link_llama(&repo.join("snapshots").join(hash));
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), hash).unwrap();
    let (want, _) = ok(&mut generate(&["--model", llama().to_str().unwrap(), "--prompt", "The sky is"]));
    for (var, value) in [("HF_HUB_CACHE", home.join("hub")), ("HF_HOME", home.clone())] {
        let (got, _) =
            ok(generate(&["--model", "kiln-test/llama", "--prompt", "The sky is"]).env(var, value));
        assert_eq!(got, want, "{var}");
    }
    // Not cached: the error names the id, the folder looked for and how to fetch it.
    let cache = home.join("hub").display().to_string();
    for offline in ["0", "1"] {
        let mut cmd = generate(&["--model", "kiln-test/nope@v2", "--prompt", "x"]);
        let out = cmd.env("HF_HUB_CACHE", &cache).env("HF_HUB_OFFLINE", offline).output().unwrap();
        let (_, stderr) = texts(&out);
        assert!(!out.status.success());
        for what in ["models--kiln-test--nope", &cache, "hf download kiln-test/nope --revision v2"] {
            assert!(stderr.contains(what), "{what:?} not in {stderr}");
        }
        assert_eq!(stderr.contains("HF_HUB_OFFLINE is set"), offline == "1", "{stderr}");
    }
    std::fs::remove_dir_all(&home).ok();
}

/// With a template the prompt is a user message (and --system adds one before it);
/// --no-chat-template sends the text alone.
#[test]
fn the_chat_template_is_the_default() {
    let dir = temp_dir("chat");
    link_llama(&dir);
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    )
    .unwrap();
    let model = dir.to_str().unwrap();
    let prefill = |extra: &[&str]| {
        let mut args = vec!["--model", model, "--prompt", "The sky is"];
        args.extend(extra);
        stat(&ok(&mut generate(&args)).1, "prefill")
    };
    let raw = prefill(&["--no-chat-template"]);
    let chat = prefill(&[]);
    assert!(chat > raw, "templated {chat} tokens, raw {raw}");
    assert_eq!(prefill(&["--chat"]), chat, "--chat is the default now");
    assert!(prefill(&["--system", "Be brief."]) > chat);
    // Without a template the prompt is raw, and a system message has nowhere to go.
    let plain = llama();
    assert_eq!(prefill(&["--no-chat-template"]), {
        let (_, err) = ok(&mut generate(&["--model", plain.to_str().unwrap(), "--prompt", "The sky is"]));
        stat(&err, "prefill")
    });
    let out =
        generate(&["--model", plain.to_str().unwrap(), "--prompt", "x", "--system", "s"]).output().unwrap();
    assert!(!out.status.success() && texts(&out).1.contains("chat template"), "{}", texts(&out).1);
    std::fs::remove_dir_all(&dir).ok();
}

/// A fallback's warning reaches stderr at the default level, and RUST_LOG filters it.
#[test]
fn warnings_show_by_default_and_rust_log_filters_them() {
    if let Ok(()) = kiln::cuda::availability() {
        eprintln!("skipped: a GPU is in use, so --device auto does not fall back to the CPU");
        return;
    }
    let model = llama();
    let run = |rust_log: Option<&str>| {
        let mut cmd = kiln_generate(&["--model", model.to_str().unwrap(), "--prompt", "The sky is"]);
        cmd.envs(rust_log.map(|v| ("RUST_LOG", v)));
        ok(&mut cmd).1
    };
    let stderr = run(None);
    assert!(stderr.contains("WARN") && stderr.contains("running on the CPU: no GPU in use"), "{stderr}");
    let stderr = run(Some("error"));
    assert!(!stderr.contains("no GPU in use"), "{stderr}");
}
