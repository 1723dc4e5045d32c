//! The bf16 batched step (`model::llama`) on the mock, at a size CI runs: its CPU twins against
//! a plain f64 Llama forward written here, the safetensors path against the seeded one, a
//! recorded step replayed, and the config checks. The same code at the 1B and 8B shapes runs
//! on the H200 (`benches/step.rs`); `tests/gpu.rs` holds CUDA to these twins' bytes.

use gputape::backend::{CallKind, DevicePtr, GpuBackend, TeardownError};
use gputape::mock::MockGpuBackend;
use gputape::model::hf::HfConfig;
use gputape::model::llama::numerics::bf16_to_f32;
use gputape::model::llama::{Llama, LlamaOptions};
use gputape::model::safetensors::{write_safetensors, Dtype, SafeTensors};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{Trace, VecSink};
use std::path::Path;

/// A Llama `config.json` small enough for the mock: 4 query heads over 2 KV heads of 16.
fn config(tied: bool) -> HfConfig {
    HfConfig::parse(&format!(
        r#"{{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 256, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": {tied}}}"#
    ))
    .expect("the test config parses")
}

fn opts(batch: usize) -> LlamaOptions {
    // Contexts of 5, 42, 79, ... tokens: different lengths, several KV blocks each.
    LlamaOptions::staggered(batch, 256, 5)
}

fn mock() -> MockGpuBackend {
    MockGpuBackend::default()
}

fn read_bf16s(gpu: &dyn GpuBackend, p: DevicePtr, n: usize) -> Vec<f64> {
    let mut b = vec![0u8; n * 2];
    gpu.copy_d2h(p, &mut b).unwrap();
    b.chunks_exact(2)
        .map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]])) as f64)
        .collect()
}

fn round_bf16(x: f64) -> f64 {
    bf16_to_f32(gputape::model::llama::numerics::f32_to_bf16(x as f32)) as f64
}

/// y = W x for a row-major W.
fn matvec(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn rmsnorm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * inv * w).collect()
}

/// The step's logits by the textbook: f64 throughout, reading the weights and the KV cache the
/// model holds (its new K and V rounded to bf16, as the cache stores them).
fn reference_logits(gpu: &dyn GpuBackend, m: &Llama, tokens: &[u32]) -> Vec<Vec<f64>> {
    let s = &m.shape;
    let (h, hd, nh, nkv, f) = (s.hidden, s.head_dim, s.heads, s.kv_heads, s.ffn);
    let (half, kv_dim, bs) = (hd / 2, s.kv_dim(), m.opts.block_size);
    let eps = s.hf.rms_norm_eps;
    let w = &m.weights;
    let embed = read_bf16s(gpu, w.embed, s.vocab * h);
    let head = read_bf16s(gpu, w.head(), s.vocab * h);
    let final_norm = read_bf16s(gpu, w.final_norm, h);
    let mut out = Vec::new();
    for (b, &tok) in tokens.iter().enumerate() {
        let pos = m.lens()[b];
        let table = m.block_table(b);
        let mut x = embed[tok as usize * h..][..h].to_vec();
        for (l, lw) in w.layers.iter().enumerate() {
            let xn = rmsnorm(&x, &read_bf16s(gpu, lw.attn_norm, h), eps);
            let mut qkv = matvec(&read_bf16s(gpu, lw.qkv, s.qkv_dim() * h), &xn);
            for head_i in 0..nh + nkv {
                let v = &mut qkv[head_i * hd..][..hd];
                for i in 0..half {
                    let a = pos as f64 * s.hf.rope_theta.powf(-((2 * i) as f64) / hd as f64);
                    let (x0, x1) = (v[i], v[i + half]);
                    v[i] = x0 * a.cos() - x1 * a.sin();
                    v[i + half] = x1 * a.cos() + x0 * a.sin();
                }
            }
            let (kp, vp) = m.kv_pools(l);
            let row = |t: usize| (table[t / bs] as usize * bs + t % bs) * kv_dim;
            let mut attn = vec![0.0; nh * hd];
            for kvh in 0..nkv {
                let kv_at = |pool: DevicePtr, t: usize, new: usize| -> Vec<f64> {
                    if t == pos {
                        qkv[new + kvh * hd..][..hd]
                            .iter()
                            .map(|&v| round_bf16(v))
                            .collect()
                    } else {
                        read_bf16s(gpu, pool.offset((row(t) + kvh * hd) * 2), hd)
                    }
                };
                let keys: Vec<Vec<f64>> = (0..=pos).map(|t| kv_at(kp, t, nh * hd)).collect();
                let vals: Vec<Vec<f64>> =
                    (0..=pos).map(|t| kv_at(vp, t, nh * hd + kv_dim)).collect();
                for qh in kvh * (nh / nkv)..(kvh + 1) * (nh / nkv) {
                    let q = &qkv[qh * hd..][..hd];
                    let sc: Vec<f64> = keys
                        .iter()
                        .map(|k| {
                            q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                        })
                        .collect();
                    let mx = sc.iter().cloned().fold(f64::MIN, f64::max);
                    let p: Vec<f64> = sc.iter().map(|v| (v - mx).exp()).collect();
                    let z: f64 = p.iter().sum();
                    for d in 0..hd {
                        attn[qh * hd + d] =
                            p.iter().zip(&vals).map(|(p, v)| p * v[d]).sum::<f64>() / z;
                    }
                }
            }
            for (xi, o) in x
                .iter_mut()
                .zip(matvec(&read_bf16s(gpu, lw.o, h * nh * hd), &attn))
            {
                *xi += o;
            }
            let xn = rmsnorm(&x, &read_bf16s(gpu, lw.ffn_norm, h), eps);
            let gu = matvec(&read_bf16s(gpu, lw.gate_up, 2 * f * h), &xn);
            let act: Vec<f64> = (0..f)
                .map(|j| gu[j] / (1.0 + (-gu[j]).exp()) * gu[f + j])
                .collect();
            for (xi, d) in x
                .iter_mut()
                .zip(matvec(&read_bf16s(gpu, lw.down, h * f), &act))
            {
                *xi += d;
            }
        }
        out.push(matvec(&head, &rmsnorm(&x, &final_norm, eps)));
    }
    out
}

#[test]
fn the_batched_step_computes_a_llama_forward() {
    for tied in [false, true] {
        let g = mock();
        let mut m = Llama::load(&g, &config(tied), opts(5)).unwrap();
        let mut tokens: Vec<u32> = vec![1, 17, 42, 7, 255];
        // f32 arithmetic against f64 differs by a few 1e-6 of the logits' scale here; a 1%
        // error in any one score, weight or rotation is 100 times that.
        for step in 0..3 {
            let want = reference_logits(&g, &m, &tokens);
            let next = m.step(&g, &tokens).unwrap();
            let got = m.logits(&g).unwrap();
            for (b, want) in want.iter().enumerate() {
                let got = &got[b * 256..(b + 1) * 256];
                let scale = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
                let worst = got
                    .iter()
                    .zip(want)
                    .map(|(g, w)| (*g as f64 - w).abs())
                    .fold(0.0, f64::max);
                assert!(
                    worst <= 1e-5 * scale.max(1.0),
                    "tied {tied}, step {step}, sequence {b}: logits differ by {worst} (scale {scale})"
                );
                // The sampled token is the row's first maximum.
                let best = (0..256).fold(0, |i, j| if got[j] > got[i] { j } else { i });
                assert_eq!(next[b] as usize, best);
            }
            tokens = next;
        }
        assert_eq!(
            m.lens(),
            &[8, 45, 82, 119, 28],
            "contexts 5 + 37b wrap at 128"
        );
        m.release(&g).unwrap();
        assert_eq!(g.live_alloc_count(), 0, "release frees everything");
    }
}

/// A failed free does not stop the release: the rest are made, and the error names the one.
#[test]
fn release_goes_on_past_a_failed_free() {
    let g = mock();
    let mut m = Llama::load(&g, &config(false), opts(1)).unwrap();
    g.fail_nth(CallKind::Free, 2);
    let e = m.release(&g).unwrap_err();
    let t = e.downcast_ref::<TeardownError>().expect("a TeardownError");
    assert_eq!(t.failures.len(), 1, "{e:#}");
    assert_eq!(
        (t.failures[0].resource, t.failures[0].what.as_str()),
        ("llama arena", "buffer xn")
    );
    assert_eq!(g.live_alloc_count(), 1, "everything else was freed");
    m.release(&g).unwrap();
    assert_eq!(g.live_alloc_count(), 1, "nothing is freed twice");
}

#[test]
fn a_checkpoint_on_disk_gives_the_seeded_models_bytes() {
    let cfg = config(false);
    let g = mock();
    let mut seeded = Llama::load(&g, &cfg, opts(2)).unwrap();
    // Write the seeded weights out as a Hugging Face checkpoint, the fused matrices split back.
    let s = seeded.shape.clone();
    let w = &seeded.weights;
    let bytes = |p: DevicePtr, n: usize| {
        let mut b = vec![0u8; n * 2];
        g.copy_d2h(p, &mut b).unwrap();
        b
    };
    let (h, q, kv, f) = (s.hidden, s.q_dim(), s.kv_dim(), s.ffn);
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = vec![(
        "model.embed_tokens.weight".into(),
        vec![s.vocab, h],
        bytes(w.embed, s.vocab * h),
    )];
    for (i, lw) in w.layers.iter().enumerate() {
        let p = |n: &str| format!("model.layers.{i}.{n}.weight");
        let qkv = bytes(lw.qkv, (q + 2 * kv) * h);
        let gu = bytes(lw.gate_up, 2 * f * h);
        tensors.push((p("input_layernorm"), vec![h], bytes(lw.attn_norm, h)));
        tensors.push((p("self_attn.q_proj"), vec![q, h], qkv[..q * h * 2].to_vec()));
        tensors.push((
            p("self_attn.k_proj"),
            vec![kv, h],
            qkv[q * h * 2..][..kv * h * 2].to_vec(),
        ));
        tensors.push((
            p("self_attn.v_proj"),
            vec![kv, h],
            qkv[(q + kv) * h * 2..].to_vec(),
        ));
        tensors.push((p("self_attn.o_proj"), vec![h, q], bytes(lw.o, h * q)));
        tensors.push((
            p("post_attention_layernorm"),
            vec![h],
            bytes(lw.ffn_norm, h),
        ));
        tensors.push((p("mlp.gate_proj"), vec![f, h], gu[..f * h * 2].to_vec()));
        tensors.push((p("mlp.up_proj"), vec![f, h], gu[f * h * 2..].to_vec()));
        tensors.push((p("mlp.down_proj"), vec![h, f], bytes(lw.down, h * f)));
    }
    tensors.push(("model.norm.weight".into(), vec![h], bytes(w.final_norm, h)));
    tensors.push((
        "lm_head.weight".into(),
        vec![s.vocab, h],
        bytes(w.head(), s.vocab * h),
    ));
    let dir = std::env::temp_dir().join(format!("gputape-llama-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    let refs: Vec<(&str, Dtype, &[usize], &[u8])> = tensors
        .iter()
        .map(|(n, sh, b)| (n.as_str(), Dtype::BF16, sh.as_slice(), b.as_slice()))
        .collect();
    write_safetensors(&path, &refs).unwrap();

    let st = SafeTensors::open(&path).unwrap();
    let g2 = mock();
    let mut loaded = Llama::load_safetensors(&g2, &cfg, opts(2), &[&st]).unwrap();
    let tokens = [3u32, 200];
    for _ in 0..2 {
        let a = seeded.step(&g, &tokens).unwrap();
        let b = loaded.step(&g2, &tokens).unwrap();
        assert_eq!(a, b);
        assert_eq!(seeded.logits(&g).unwrap(), loaded.logits(&g2).unwrap());
    }

    // A checkpoint of another shape is refused by name before anything is allocated.
    let mut wrong = cfg.clone();
    wrong.intermediate_size = 256;
    let g3 = mock();
    let err = Llama::load_safetensors(&g3, &wrong, opts(2), &[&st])
        .err()
        .unwrap();
    let msg = format!("{err:#}");
    assert!(msg.contains("gate_proj"), "{msg}");
    assert_eq!(g3.live_alloc_count(), 0, "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_recorded_batched_step_replays_bit_identically() {
    let sink = VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(mock(), Box::new(sink), BackendDesc::new("mock")).unwrap();
    let gpu: &dyn GpuBackend = &rec;
    let mut m = Llama::load(gpu, &config(false), opts(4)).unwrap();
    let mut tokens = vec![9u32, 8, 7, 6];
    tokens = m.step(gpu, &tokens).unwrap();
    rec.start().unwrap();
    let next = m.step(gpu, &tokens).unwrap();
    let _ = m.logits(gpu).unwrap();
    rec.stop().unwrap();
    let bytes = buf.lock().clone();
    let t = Trace::from_bytes(Path::new("llama"), &bytes).unwrap();
    assert_eq!(t.modules.len(), 8, "every module travels with the trace");
    // 1 embed, 9 per layer, final norm, head, argmax.
    let launches = t
        .calls
        .iter()
        .filter(|c| c.call.kind().name().starts_with("launch"))
        .count();
    assert_eq!(launches, 1 + 9 * 2 + 3);

    let target = mock();
    gputape::model::llama::kernels::load(&target).unwrap();
    let opts = ReplayOptions {
        loops: 3,
        ..Default::default()
    };
    let r = Replayer::new(&t).run(&target, &opts, None, |_| {}).unwrap();
    assert!(r.passed(), "{:?}", r.divergence);
    // Tokens and logits, three loops.
    assert_eq!((r.d2h_checked, r.d2h_matched), (6, 6));
    assert_eq!(next.len(), 4);
}

#[test]
fn configs_the_kernels_cannot_run_are_refused_with_the_reason() {
    let g = mock();
    let err =
        |cfg: &HfConfig, o: LlamaOptions| format!("{:#}", Llama::load(&g, cfg, o).err().unwrap());
    assert!(err(&config(false), opts(17)).contains("batch 17"));
    let mut odd = config(false);
    odd.intermediate_size = 100;
    assert!(err(&odd, opts(1)).contains("intermediate_size = 100"));
    let mut long = opts(1);
    long.max_seq = 8192;
    assert!(err(&config(false), long).contains("max_seq 8192"));
    let mut m = Llama::load(&g, &config(false), opts(1)).unwrap();
    assert!(format!("{:#}", m.step(&g, &[256]).err().unwrap()).contains("token 256"));
    assert!(
        format!("{:#}", m.step(&g, &[1, 2]).err().unwrap()).contains("2 tokens for a batch of 1")
    );
}
