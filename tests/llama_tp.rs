//! The bf16 step tensor-parallel (`Llama::load_tp`) on mock ranks: attention heads and the MLP
//! split over 2 and 4 ranks, an all-reduce after each, every rank one thread with its own mock
//! and recorder. The ranks' logits equal each other bit for bit and one GPU's to rounding, they
//! sample one GPU's tokens, and the rank set's traces replay together with every read back
//! matching.

use gputape::analysis;
use gputape::backend::GpuBackend;
use gputape::mock::{MockConfig, MockGpuBackend};
use gputape::model::hf::HfConfig;
use gputape::model::llama::{Llama, LlamaOptions, TpPart};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::ReplayOptions;
use gputape::trace::Trace;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// 8 query heads over 4 KV heads of 8, an MLP of 128: divisible by 4 ranks.
fn config() -> HfConfig {
    HfConfig::parse(
        r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
            "vocab_size": 256, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": false}"#,
    )
    .expect("the test config parses")
}

const STEPS: usize = 3;

fn opts() -> LlamaOptions {
    LlamaOptions::staggered(2, 256, 5)
}

/// A mock whose ranks give up on a missing peer after `timeout`, not CI's whole run.
fn mock(timeout: Duration) -> MockGpuBackend {
    MockGpuBackend::new(MockConfig {
        comm_timeout: timeout,
        ..Default::default()
    })
}

/// STEPS steps from fixed first tokens, each step's tokens fed to the next; the tokens of
/// every step and the last step's logits.
fn run(gpu: &dyn GpuBackend, m: &mut Llama) -> (Vec<Vec<u32>>, Vec<f32>) {
    let mut tokens = vec![7u32, 201];
    let mut all = Vec::new();
    for _ in 0..STEPS {
        tokens = m.step(gpu, &tokens).unwrap();
        all.push(tokens.clone());
    }
    (all, m.logits(gpu).unwrap())
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-tp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Each rank of a TP=`n` step recorded into `dir/rankR.gtape`: its tokens and logits, and the
/// trace paths.
fn record_tp(dir: &Path, n: usize) -> Vec<(Vec<Vec<u32>>, Vec<f32>, PathBuf)> {
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    std::thread::scope(|sc| {
        let ranks: Vec<_> = (0..n)
            .map(|rank| {
                sc.spawn(move || {
                    let path = dir.join(format!("rank{rank}.gtape"));
                    let rec = RecordingBackend::to_file(
                        mock(Duration::from_secs(20)),
                        &path,
                        BackendDesc::new("mock"),
                    )
                    .unwrap();
                    rec.start().unwrap();
                    let g: &dyn GpuBackend = &rec;
                    let comm = g.comm_init(id, n as u32, rank as u32).unwrap();
                    let part = TpPart {
                        rank,
                        size: n,
                        comm,
                    };
                    let mut m = Llama::load_tp(g, &config(), opts(), part).unwrap();
                    let (tokens, logits) = run(g, &mut m);
                    m.release(g).unwrap();
                    g.comm_destroy(comm).unwrap();
                    rec.stop().unwrap();
                    (tokens, logits, path)
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn tp2_and_tp4_steps_match_one_gpu_and_replay_together() {
    let one = mock(Duration::from_secs(20));
    let mut m = Llama::load(&one, &config(), opts()).unwrap();
    let (tokens, logits) = run(&one, &mut m);
    let scale = logits.iter().fold(0f32, |a, v| a.max(v.abs()));
    for n in [2usize, 4] {
        let dir = scratch(&format!("tp{n}"));
        let ranks = record_tp(&dir, n);
        for (rank, (t, l, _)) in ranks.iter().enumerate() {
            // Every rank holds the all-reduced activations: the same logits, bit for bit.
            assert_eq!(
                l, &ranks[0].1,
                "TP={n}: rank {rank}'s logits differ from rank 0's"
            );
            assert_eq!(
                t, &tokens,
                "TP={n} rank {rank}: tokens differ from one GPU's"
            );
        }
        // The partial sums add in another order than one GPU's dot products: close, not equal.
        let worst = logits
            .iter()
            .zip(&ranks[0].1)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= 1e-3 * scale.max(1.0),
            "TP={n}: logits differ from one GPU's by {worst} (largest logit {scale})"
        );
        let paths: Vec<PathBuf> = ranks.into_iter().map(|r| r.2).collect();
        let traces: Vec<Trace> = paths.iter().map(|p| Trace::open(p).unwrap()).collect();
        assert!(analysis::ranks::match_ranks(&traces).is_empty());
        // Fresh mock ranks, the step's kernels registered (their CPU twins run the replay).
        let backends: Vec<MockGpuBackend> = (0..n)
            .map(|_| {
                let m = mock(Duration::from_secs(20));
                gputape::model::llama::kernels::load(&m).unwrap();
                m
            })
            .collect();
        let reports =
            gputape::replayer::replay_ranks(&traces, &backends, &ReplayOptions::default()).unwrap();
        for (rank, r) in reports.into_iter().enumerate() {
            let r = r.unwrap();
            assert!(r.passed(), "TP={n} rank {rank}: {}", r.summary());
            assert!(
                r.d2h_checked >= STEPS as u64 && r.d2h_checked == r.d2h_matched,
                "TP={n} rank {rank}: {}",
                r.summary()
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// The same from the command line: `record --hf tiny --tp 2` writes a trace per rank whose
/// steps sample what one GPU's do, and `ranks --replay` replays them together; a model whose
/// heads do not split over the ranks is refused with the reason.
#[test]
fn record_tp_writes_a_trace_per_rank_that_replay_together() {
    let dir = scratch("cli");
    let gputape = |args: &[&std::ffi::OsStr]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
            .args(args)
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (o.status.code(), text)
    };
    let one = dir.join("one.gtape");
    let tp = dir.join("tp.gtape");
    let common = ["record", "--hf", "tiny", "--steps", "1..3", "-o"].map(std::ffi::OsStr::new);
    let (code, single) = gputape(&[&common[..], &[one.as_os_str()]].concat());
    assert_eq!(code, Some(0), "{single}");
    let tp2 = [
        &common[..],
        &[tp.as_os_str()],
        &["--tp", "2"].map(std::ffi::OsStr::new)[..],
    ]
    .concat();
    let (code, ranks) = gputape(&tp2);
    assert_eq!(code, Some(0), "{ranks}");
    let steps: Vec<&str> = single.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(steps.len(), 2, "{single}");
    for line in steps {
        for rank in 0..2 {
            assert!(
                ranks.contains(&format!("rank {rank}: {line}")),
                "{line}\n{ranks}"
            );
        }
    }
    let paths: Vec<PathBuf> = (0..2)
        .map(|r| dir.join(format!("tp.rank{r}.gtape")))
        .collect();
    let mut replay = vec![
        std::ffi::OsStr::new("ranks"),
        std::ffi::OsStr::new("--replay"),
    ];
    replay.extend(paths.iter().map(|p| p.as_os_str()));
    let (code, text) = gputape(&replay);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(text.matches("2 of 2 match").count(), 2, "{text}");
    let tp3 = [
        &common[..],
        &[tp.as_os_str()],
        &["--tp", "3"].map(std::ffi::OsStr::new)[..],
    ]
    .concat();
    let (code, text) = gputape(&tp3);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("num_attention_heads = 4 does not split over 3 ranks"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
