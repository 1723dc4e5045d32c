//! Hugging Face `config.json` presets and parsing, and the safetensors reader against good and
//! hostile files.

use gputape::model::hf::{HfConfig, HfError, TorchDtype};
use gputape::model::safetensors::{
    check_llama, check_llama_shards, llama_layout, llama_names, write_safetensors, Dtype,
    FileProblem, SafeTensors, SafeTensorsError, MAX_HEADER_LEN,
};
use gputape::model::ModelConfig;
use serde_json::{json, Value};
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-hf-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ---------------------------------------------------------------- config.json

#[test]
fn every_preset_parses_and_round_trips() {
    let names: Vec<_> = HfConfig::preset_names().collect();
    assert_eq!(names, ["tiny", "default", "llama-3.2-1b", "llama-3-8b"]);
    for name in names {
        let c = HfConfig::preset(name).unwrap();
        assert_eq!(c.name, name);
        // The embedded text parses to the same sizes ("custom" aside).
        let parsed = HfConfig::parse(HfConfig::preset_text(name).unwrap()).unwrap();
        assert_eq!(parsed.name, "custom");
        assert_eq!(
            HfConfig {
                name: c.name,
                ..parsed
            },
            c
        );
        let m = c.to_model_config(64, 16).unwrap();
        assert_eq!(m.name, name);
        assert_eq!(
            (m.hidden, m.ffn, m.layers, m.heads, m.kv_heads, m.head_dim, m.vocab),
            (
                c.hidden_size,
                c.intermediate_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.num_key_value_heads,
                c.head_dim,
                c.vocab_size
            )
        );
        assert_eq!(m.rope_theta, c.rope_theta as f32);
        assert_eq!(m.eps, c.rms_norm_eps as f32);
        assert_eq!((m.max_seq, m.block_size, m.num_blocks), (64, 16, 8));
        assert_eq!(m.seed, ModelConfig::default_config().seed);
    }
    assert!(HfConfig::preset("llama-2-70b").is_none());
}

#[test]
fn tiny_and_default_presets_are_the_built_in_configs() {
    let tiny = HfConfig::preset("tiny").unwrap();
    assert_eq!(tiny.to_model_config(64, 8).unwrap(), ModelConfig::tiny());
    let default = HfConfig::preset("default").unwrap();
    assert_eq!(
        default.to_model_config(256, 16).unwrap(),
        ModelConfig::default_config()
    );
    assert_eq!(tiny.torch_dtype, TorchDtype::Float32);
}

#[test]
fn llama_presets_have_the_published_shapes() {
    let b1 = HfConfig::preset("llama-3.2-1b").unwrap();
    assert_eq!(
        (
            b1.hidden_size,
            b1.intermediate_size,
            b1.num_hidden_layers,
            b1.num_attention_heads,
            b1.num_key_value_heads,
            b1.head_dim,
            b1.vocab_size,
            b1.max_position_embeddings
        ),
        (2048, 8192, 16, 32, 8, 64, 128256, 131072)
    );
    assert_eq!(b1.rope_theta, 500000.0);
    assert_eq!(b1.rms_norm_eps, 1e-5);
    assert!(b1.tie_word_embeddings);
    assert_eq!(b1.torch_dtype, TorchDtype::BFloat16);

    let b8 = HfConfig::preset("llama-3-8b").unwrap();
    assert_eq!(
        (
            b8.hidden_size,
            b8.intermediate_size,
            b8.num_hidden_layers,
            b8.num_attention_heads,
            b8.num_key_value_heads,
            b8.head_dim,
            b8.vocab_size,
            b8.max_position_embeddings
        ),
        (4096, 14336, 32, 32, 8, 128, 128256, 8192)
    );
    assert_eq!(b8.rope_theta, 500000.0);
    assert!(!b8.tie_word_embeddings);
    assert_eq!(b8.torch_dtype, TorchDtype::BFloat16);
}

#[test]
fn weight_bytes_match_the_published_parameter_counts() {
    let b8 = HfConfig::preset("llama-3-8b").unwrap();
    let w = b8.weight_bytes() as f64;
    assert!((15.9e9..16.2e9).contains(&w), "8B: {w}");
    // 8,030,261,248 parameters, as the model card's safetensors index reports.
    assert_eq!(b8.params(), 8_030_261_248);

    let b1 = HfConfig::preset("llama-3.2-1b").unwrap();
    let w = b1.weight_bytes() as f64;
    assert!((2.4e9..2.6e9).contains(&w), "1B: {w}");
    // Tied: the embedding counted once.
    assert_eq!(b1.params(), 1_235_814_400);
    let untied = HfConfig {
        tie_word_embeddings: false,
        ..b1.clone()
    };
    assert_eq!(untied.params() - b1.params(), 128256 * 2048);

    // f32 doubles it.
    let f32_8b = HfConfig {
        torch_dtype: TorchDtype::Float32,
        ..b8.clone()
    };
    assert_eq!(f32_8b.weight_bytes(), 2 * b8.weight_bytes());
}

/// The 8B preset's text as a JSON object, edited by `f`, parsed.
fn edited(f: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Result<HfConfig, HfError> {
    let mut v: Value = serde_json::from_str(HfConfig::preset_text("llama-3-8b").unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    HfConfig::parse(&v.to_string())
}

#[test]
fn defaults_fill_in_what_llama_config_defaults() {
    let c = edited(|m| {
        m.remove("num_key_value_heads");
        m.remove("rope_theta");
        m.remove("tie_word_embeddings");
        m.remove("head_dim");
        m.insert(
            "rope_scaling".into(),
            json!({"rope_type": "llama3", "factor": 8.0}),
        );
        m.insert("bos_token_id".into(), json!(128000));
    })
    .unwrap();
    assert_eq!(c.num_key_value_heads, 32);
    assert_eq!(c.head_dim, 128);
    assert_eq!(c.rope_theta, 10000.0);
    assert!(!c.tie_word_embeddings);

    // An explicit null is "not given".
    let c = edited(|m| {
        m.insert("num_key_value_heads".into(), Value::Null);
    })
    .unwrap();
    assert_eq!(c.num_key_value_heads, 32);

    // Newer transformers spell it `dtype`.
    let c = edited(|m| {
        m.remove("torch_dtype");
        m.insert("dtype".into(), json!("float16"));
    })
    .unwrap();
    assert_eq!(c.torch_dtype, TorchDtype::Float16);

    // head_dim given: hidden need not be heads * head_dim.
    let c = edited(|m| {
        m.insert("head_dim".into(), json!(96));
    })
    .unwrap();
    assert_eq!(c.q_dim(), 32 * 96);
}

#[test]
fn bad_configs_give_typed_errors_naming_field_and_value() {
    let e = edited(|m| {
        m.remove("hidden_size");
    })
    .unwrap_err();
    assert_eq!(e, HfError::MissingField("hidden_size"));
    assert!(e.to_string().contains("hidden_size"), "{e}");

    for field in [
        "rms_norm_eps",
        "vocab_size",
        "model_type",
        "max_position_embeddings",
    ] {
        let e = edited(|m| {
            m.remove(field);
        })
        .unwrap_err();
        assert_eq!(e, HfError::MissingField(field));
    }
    let e = edited(|m| {
        m.remove("torch_dtype");
    })
    .unwrap_err();
    assert_eq!(e, HfError::MissingField("torch_dtype"));

    let e = edited(|m| {
        m.insert("intermediate_size".into(), json!(0));
    })
    .unwrap_err();
    assert_eq!(e, HfError::Zero("intermediate_size"));
    assert!(e.to_string().contains("intermediate_size"), "{e}");
    let e = edited(|m| {
        m.insert("num_key_value_heads".into(), json!(0));
    })
    .unwrap_err();
    assert_eq!(e, HfError::Zero("num_key_value_heads"));

    let e = edited(|m| {
        m.insert("num_key_value_heads".into(), json!(5));
    })
    .unwrap_err();
    assert_eq!(
        e,
        HfError::HeadsNotDivisible {
            heads: 32,
            kv_heads: 5
        }
    );
    assert!(
        e.to_string().contains("32") && e.to_string().contains('5'),
        "{e}"
    );

    let e = edited(|m| {
        m.insert("hidden_size".into(), json!(4001));
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            HfError::HiddenNotDivisible {
                hidden: 4001,
                heads: 32
            }
        ),
        "{e:?}"
    );

    let e = edited(|m| {
        m.insert("model_type".into(), json!("mistral"));
    })
    .unwrap_err();
    assert_eq!(e, HfError::UnknownModelType("mistral".into()));
    assert!(e.to_string().contains("\"mistral\""), "{e}");

    let e = edited(|m| {
        m.insert("torch_dtype".into(), json!("int8"));
    })
    .unwrap_err();
    assert_eq!(e, HfError::UnknownDtype("int8".into()));

    let e = edited(|m| {
        m.insert("hidden_size".into(), json!("4096"));
    })
    .unwrap_err();
    assert!(
        matches!(&e, HfError::WrongType { field: "hidden_size", value, .. } if value == "\"4096\""),
        "{e:?}"
    );
    for bad in [json!(-1), json!(4096.5), json!(true), json!([4096])] {
        let e = edited(|m| {
            m.insert("num_hidden_layers".into(), bad.clone());
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                HfError::WrongType {
                    field: "num_hidden_layers",
                    ..
                }
            ),
            "{bad}: {e:?}"
        );
    }

    // Bounded so that no product overflows.
    let e = edited(|m| {
        m.insert("vocab_size".into(), json!(u64::MAX));
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            HfError::TooLarge {
                field: "vocab_size",
                value: u64::MAX,
                ..
            }
        ),
        "{e:?}"
    );
    let e = edited(|m| {
        m.insert("hidden_size".into(), json!(1u64 << 40));
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            HfError::TooLarge {
                field: "hidden_size",
                ..
            }
        ),
        "{e:?}"
    );

    for (field, bad) in [
        ("rms_norm_eps", json!(0.0)),
        ("rms_norm_eps", json!(-1e-5)),
        ("rms_norm_eps", json!(2.0)),
        ("rms_norm_eps", json!(1e-300)),
        ("rope_theta", json!(0.0)),
        ("rope_theta", json!(1e300)),
    ] {
        let e = edited(|m| {
            m.insert(field.into(), bad.clone());
        })
        .unwrap_err();
        assert!(
            matches!(e, HfError::OutOfRange { field: f, .. } if f == field),
            "{field}={bad}: {e:?}"
        );
    }
    let e = edited(|m| {
        m.insert("tie_word_embeddings".into(), json!("yes"));
    })
    .unwrap_err();
    assert!(matches!(
        e,
        HfError::WrongType {
            field: "tie_word_embeddings",
            ..
        }
    ));

    for text in ["", "{", "{\"hidden_size\": 1,}", "not json", "{} {}"] {
        let e = HfConfig::parse(text).unwrap_err();
        assert!(matches!(e, HfError::BadJson(_)), "{text:?}: {e:?}");
    }
    assert_eq!(
        HfConfig::parse("[1, 2]").unwrap_err(),
        HfError::NotAnObject("an array")
    );
}

#[test]
fn to_model_config_checks_its_own_arguments() {
    let c = HfConfig::preset("llama-3-8b").unwrap();
    assert_eq!(
        c.to_model_config(0, 16).unwrap_err(),
        HfError::Zero("max_seq")
    );
    assert_eq!(
        c.to_model_config(64, 0).unwrap_err(),
        HfError::Zero("block_size")
    );
    assert_eq!(
        c.to_model_config(8193, 16).unwrap_err(),
        HfError::SeqTooLong {
            max_seq: 8193,
            max_positions: 8192
        }
    );
    let m = c.to_model_config(8192, 16).unwrap();
    assert_eq!(
        (m.name, m.num_blocks, m.inputs_len()),
        ("llama-3-8b", 1024, 514)
    );
    let custom = HfConfig::parse(HfConfig::preset_text("llama-3-8b").unwrap()).unwrap();
    assert_eq!(custom.to_model_config(100, 16).unwrap().name, "custom");
}

// ---------------------------------------------------------------- safetensors

/// A tiny Llama (2 layers, hidden 64) in bf16.
fn tiny_bf16(tied: bool) -> HfConfig {
    HfConfig::parse(
        &json!({
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 128,
            "rms_norm_eps": 1e-5,
            "max_position_embeddings": 64,
            "torch_dtype": "bfloat16",
            "tie_word_embeddings": tied,
        })
        .to_string(),
    )
    .unwrap()
}

/// Deterministic, distinct bytes per tensor.
fn fill(seed: usize, len: usize) -> Vec<u8> {
    let mut x = (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

type Owned = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

fn layout_tensors(cfg: &HfConfig, dtype: Dtype) -> Owned {
    llama_layout(cfg)
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let len = shape.iter().product::<usize>() * dtype.size();
            (name, dtype, shape, fill(i, len))
        })
        .collect()
}

fn write(path: &std::path::Path, t: &Owned) -> Result<(), SafeTensorsError> {
    let refs: Vec<(&str, Dtype, &[usize], &[u8])> = t
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), *d, s.as_slice(), b.as_slice()))
        .collect();
    write_safetensors(path, &refs)
}

#[test]
fn llama_names_are_the_hf_names() {
    let n = llama_names(2, false);
    assert_eq!(n.len(), 1 + 2 * 9 + 2);
    assert_eq!(n[0], "model.embed_tokens.weight");
    assert_eq!(n[1], "model.layers.0.input_layernorm.weight");
    assert_eq!(n[2], "model.layers.0.self_attn.q_proj.weight");
    assert_eq!(n[5], "model.layers.0.self_attn.o_proj.weight");
    assert_eq!(n[6], "model.layers.0.post_attention_layernorm.weight");
    assert_eq!(n[9], "model.layers.0.mlp.down_proj.weight");
    assert_eq!(n[19], "model.norm.weight");
    assert_eq!(n[20], "lm_head.weight");
    assert_eq!(llama_names(2, true).len(), 20);
    assert!(!llama_names(2, true).contains(&"lm_head.weight".to_string()));

    let shapes: std::collections::HashMap<_, _> =
        llama_layout(&HfConfig::preset("llama-3-8b").unwrap())
            .into_iter()
            .collect();
    assert_eq!(
        shapes["model.layers.31.self_attn.q_proj.weight"],
        [4096, 4096]
    );
    assert_eq!(
        shapes["model.layers.0.self_attn.k_proj.weight"],
        [1024, 4096]
    );
    assert_eq!(shapes["model.layers.0.mlp.down_proj.weight"], [4096, 14336]);
    assert_eq!(shapes["lm_head.weight"], [128256, 4096]);
    // The layout's element count is the parameter count.
    let b8 = HfConfig::preset("llama-3-8b").unwrap();
    let total: u64 = llama_layout(&b8)
        .iter()
        .map(|(_, s)| s.iter().product::<usize>() as u64)
        .sum();
    assert_eq!(total, b8.params());
}

#[test]
fn tiny_llama_file_opens_checks_and_reads_back() {
    let dir = scratch("tiny");
    let cfg = tiny_bf16(false);
    let tensors = layout_tensors(&cfg, Dtype::BF16);
    let path = dir.join("model.safetensors");
    write(&path, &tensors).unwrap();

    let st = SafeTensors::open(&path).unwrap();
    assert_eq!(st.header_len() % 8, 0);
    assert_eq!(st.metadata().get("format").map(String::as_str), Some("pt"));
    assert_eq!(st.tensors().len(), tensors.len());
    check_llama(&st, &cfg).unwrap();
    let data: u64 = tensors.iter().map(|t| t.3.len() as u64).sum();
    assert_eq!(st.file_len(), 8 + st.header_len() + data);
    assert_eq!(data, cfg.weight_bytes());
    for (name, dtype, shape, bytes) in &tensors {
        let info = st.get(name).unwrap();
        assert_eq!((&info.dtype, &info.shape), (dtype, shape));
        assert_eq!(info.byte_len(), bytes.len() as u64);
        assert_eq!(&st.read(name).unwrap(), bytes, "{name}");
    }
    // Listed sorted by name.
    let names: Vec<_> = st.tensors().iter().map(|t| t.name.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(matches!(
        st.read("model.layers.9.mlp.up_proj.weight"),
        Err(SafeTensorsError::NotFound(_))
    ));

    // Untied config against the same file minus lm_head: names the missing tensor.
    let no_head: Owned = tensors
        .iter()
        .filter(|t| t.0 != "lm_head.weight")
        .cloned()
        .collect();
    let p2 = dir.join("tied.safetensors");
    write(&p2, &no_head).unwrap();
    let st2 = SafeTensors::open(&p2).unwrap();
    check_llama(&st2, &tiny_bf16(true)).unwrap();
    match check_llama(&st2, &cfg) {
        Err(SafeTensorsError::MissingTensor(n)) => assert_eq!(n, "lm_head.weight"),
        other => panic!("{other:?}"),
    }
    // Sharded: the tensors split across two files.
    let (a, b) = tensors.split_at(7);
    let (pa, pb) = (dir.join("a.safetensors"), dir.join("b.safetensors"));
    write(&pa, &a.to_vec()).unwrap();
    write(&pb, &b.to_vec()).unwrap();
    let (sa, sb) = (
        SafeTensors::open(&pa).unwrap(),
        SafeTensors::open(&pb).unwrap(),
    );
    check_llama_shards(&[&sa, &sb], &cfg).unwrap();
    assert!(check_llama(&sa, &cfg).is_err());
}

#[test]
fn check_llama_names_the_first_mismatch() {
    let dir = scratch("mismatch");
    let cfg = tiny_bf16(false);
    let mut tensors = layout_tensors(&cfg, Dtype::BF16);
    // Transposed k_proj in layer 1 ([in, out] instead of [out, in]).
    let k = tensors
        .iter_mut()
        .find(|t| t.0 == "model.layers.1.self_attn.k_proj.weight")
        .unwrap();
    k.2 = vec![64, 32];
    let path = dir.join("x.safetensors");
    write(&path, &tensors).unwrap();
    let st = SafeTensors::open(&path).unwrap();
    match check_llama(&st, &cfg) {
        Err(SafeTensorsError::WrongShape {
            tensor,
            expected,
            found,
        }) => {
            assert_eq!(tensor, "model.layers.1.self_attn.k_proj.weight");
            assert_eq!((expected, found), (vec![32, 64], vec![64, 32]));
        }
        other => panic!("{other:?}"),
    }

    // Right shapes, wrong dtype for the config.
    let f32s = layout_tensors(&cfg, Dtype::F32);
    write(&path, &f32s).unwrap();
    let st = SafeTensors::open(&path).unwrap();
    match check_llama(&st, &cfg) {
        Err(SafeTensorsError::WrongDtype {
            tensor,
            expected: Dtype::BF16,
            found: Dtype::F32,
        }) => assert_eq!(tensor, "model.embed_tokens.weight"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn writer_refuses_inconsistent_input() {
    let dir = scratch("writer");
    let p = dir.join("w.safetensors");
    let e = write_safetensors(&p, &[("a", Dtype::F32, &[2, 2], &[0u8; 15])]).unwrap_err();
    assert!(
        matches!(
            why(&p, &e),
            FileProblem::SizeMismatch {
                expected: 16,
                found: 15,
                ..
            }
        ),
        "{e:?}"
    );
    let e = write_safetensors(
        &p,
        &[("a", Dtype::U8, &[1], &[0]), ("a", Dtype::U8, &[1], &[0])],
    )
    .unwrap_err();
    assert!(matches!(why(&p, &e), FileProblem::DuplicateTensor(n) if n == "a"));
    let e = write_safetensors(&p, &[("__metadata__", Dtype::U8, &[1], &[0])]).unwrap_err();
    assert!(matches!(why(&p, &e), FileProblem::ReservedName(_)));
    let e = write_safetensors(&p, &[("big", Dtype::F64, &[1 << 32, 1 << 32], &[])]).unwrap_err();
    assert!(matches!(why(&p, &e), FileProblem::SizeOverflow { .. }));
    // Nothing was written by the refusals.
    assert!(!p.exists());
    // Names that need escaping, and a zero-sized tensor, round-trip.
    write_safetensors(
        &p,
        &[
            ("q\"uote\\d\u{e9}", Dtype::I64, &[1], &7i64.to_le_bytes()),
            ("empty", Dtype::F16, &[0, 3], &[]),
        ],
    )
    .unwrap();
    let st = SafeTensors::open(&p).unwrap();
    assert_eq!(st.read("q\"uote\\d\u{e9}").unwrap(), 7i64.to_le_bytes());
    assert_eq!(st.read("empty").unwrap(), Vec::<u8>::new());
}

/// A file of an 8-byte length `n`, then `header`, then `data`.
fn raw(dir: &std::path::Path, n: u64, header: &[u8], data: &[u8]) -> PathBuf {
    let p = dir.join("raw.safetensors");
    let mut b = n.to_le_bytes().to_vec();
    b.extend_from_slice(header);
    b.extend_from_slice(data);
    std::fs::write(&p, b).unwrap();
    p
}

/// Open a file whose header is `header` (its real length) followed by `data`.
fn open_header(
    dir: &std::path::Path,
    header: &str,
    data: &[u8],
) -> Result<SafeTensors, SafeTensorsError> {
    SafeTensors::open(raw(dir, header.len() as u64, header.as_bytes(), data))
}

/// What was wrong with the file at `path`, whose name the error's message must carry.
fn why<'e>(path: &std::path::Path, e: &'e SafeTensorsError) -> &'e FileProblem {
    assert!(
        e.to_string().starts_with(&path.display().to_string()),
        "{e} does not name {}",
        path.display()
    );
    e.problem()
        .unwrap_or_else(|| panic!("not a file problem: {e:?}"))
}

#[test]
fn hostile_files_give_typed_errors() {
    let dir = scratch("hostile");
    let at = dir.join("raw.safetensors");
    // The refusal of a file whose header is `h` and data `data`; its message is checked to name
    // the file, and (for each `needle`) to say what was wrong.
    let refuse = |h: &str, data: &[u8], needles: &[&str]| -> FileProblem {
        let e = open_header(&dir, h, data).unwrap_err();
        let msg = e.to_string();
        for n in needles {
            assert!(msg.contains(n), "{msg:?} lacks {n:?}");
        }
        let SafeTensorsError::File { problem, .. } = e else {
            panic!("{e:?}")
        };
        assert!(msg.starts_with(&at.display().to_string()), "{msg}");
        problem
    };

    // Too short for the length word.
    let short = dir.join("short");
    std::fs::write(&short, [1u8, 2, 3]).unwrap();
    let e = SafeTensors::open(&short).unwrap_err();
    assert!(matches!(why(&short, &e), FileProblem::TooShort { len: 3 }));
    // Missing file.
    assert!(matches!(
        SafeTensors::open(dir.join("nope")).unwrap_err(),
        SafeTensorsError::Io { .. }
    ));
    // Truncated header: N says 100, 20 bytes follow.
    let e = SafeTensors::open(raw(&dir, 100, &[b' '; 20], &[])).unwrap_err();
    assert!(
        matches!(
            why(&at, &e),
            FileProblem::HeaderPastEnd {
                len: 100,
                file_len: 28
            }
        ),
        "{e:?}"
    );
    // N huge: refused before anything is allocated.
    for n in [u64::MAX, MAX_HEADER_LEN + 1, 1 << 40] {
        let e = SafeTensors::open(raw(&dir, n, b"{}", &[])).unwrap_err();
        assert!(
            matches!(why(&at, &e), FileProblem::HeaderTooLarge { len, .. } if *len == n),
            "{e:?}"
        );
    }
    // Not UTF-8.
    let e = SafeTensors::open(raw(&dir, 4, b"{\xff\xfe}", &[])).unwrap_err();
    assert!(
        matches!(why(&at, &e), FileProblem::HeaderNotUtf8 { valid_up_to: 1 }),
        "{e:?}"
    );
    // Invalid JSON of several kinds.
    for h in [
        "",
        "{",
        "{\"a\":",
        "[]",
        "null",
        "{} trailing",
        "{\"a\" 1}",
        "{'a': 1}",
    ] {
        let e = refuse(h, &[], &["JSON"]);
        assert!(matches!(e, FileProblem::HeaderJson(_)), "{h:?}: {e:?}");
    }
    // Deep nesting: the crate reads the header through serde's buffered `Content`, which stops
    // at serde_json's recursion limit, so a deep value is refused even in a field nobody reads
    // (the hand-written reader skipped that one); in a field that is read, it is pinned there.
    let deep = format!(
        "{{\"t\":{{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":{}{}}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = refuse(&deep, &[5], &["recursion limit"]);
    assert!(matches!(e, FileProblem::HeaderJson(_)), "{e:?}");
    let deep_shape = format!(
        "{{\"t\":{{\"dtype\":\"U8\",\"shape\":{}{},\"data_offsets\":[0,1]}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = refuse(&deep_shape, &[5], &["\"t\"", "shape"]);
    assert!(
        matches!(&e, FileProblem::BadTensor { tensor, field, .. } if tensor == "t" && field.starts_with("shape")),
        "{e:?}"
    );

    let t = |body: &str| format!("{{\"w\":{body}}}");
    // Offsets past the end of the data section.
    let e = refuse(
        &t(r#"{"dtype":"F32","shape":[4],"data_offsets":[0,16]}"#),
        &[0; 12],
        &["\"w\"", "16", "12-byte"],
    );
    assert!(
        matches!(&e, FileProblem::PastEnd { tensor, end: 16, data_len: 12 } if tensor == "w"),
        "{e:?}"
    );
    let e = refuse(
        &t(
            r#"{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}"#,
        ),
        &[],
        &["\"w\""],
    );
    assert!(matches!(e, FileProblem::PastEnd { .. }), "{e:?}");
    // A chain of huge tensors whose last end is near usize::MAX, with a data section to match
    // on paper: refused by the check before the crate (whose own length check would overflow).
    let m = usize::MAX / 8;
    let chain: Vec<String> = (0..8)
        .map(|i| {
            format!(
                r#""t{i}":{{"dtype":"U8","shape":[{m}],"data_offsets":[{},{}]}}"#,
                i * m,
                (i + 1) * m
            )
        })
        .collect();
    let e = refuse(&format!("{{{}}}", chain.join(",")), &[], &["\"t0\""]);
    assert!(matches!(e, FileProblem::PastEnd { .. }), "{e:?}");
    // Reversed.
    let e = refuse(
        &t(r#"{"dtype":"U8","shape":[0],"data_offsets":[4,2]}"#),
        &[0; 8],
        &["\"w\"", "[4, 2]", "backwards"],
    );
    assert!(
        matches!(
            e,
            FileProblem::OffsetsReversed {
                begin: 4,
                end: 2,
                ..
            }
        ),
        "{e:?}"
    );
    // Overlapping: `b` begins inside `a`.
    let e = refuse(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
        &[0; 12],
        &["\"b\"", "\"a\"", "4", "8"],
    );
    assert!(
        matches!(&e, FileProblem::NotContiguous { tensor, begin: 4, expected: 8, after: Some(a) } if tensor == "b" && a == "a"),
        "{e:?}"
    );
    // A gap before the first tensor or between two (the hand-written reader allowed gaps; the
    // crate's rule is end to end, as its writer lays tensors out).
    let e = refuse(
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}"#,
        &[0, 0, 0, 0, 9, 8],
        &["\"a\"", "begin at 4"],
    );
    assert!(
        matches!(&e, FileProblem::NotContiguous { tensor, begin: 4, expected: 0, after: None } if tensor == "a"),
        "{e:?}"
    );
    let e = refuse(
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}"#,
        &[0; 4],
        &["\"b\""],
    );
    assert!(
        matches!(
            &e,
            FileProblem::NotContiguous {
                begin: 3,
                expected: 2,
                ..
            }
        ),
        "{e:?}"
    );
    // Bytes after the last tensor (allowed before; the crate wants the file exactly covered).
    let e = refuse(
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
        &[1, 2, 3],
        &["byte 2", "3-byte"],
    );
    assert!(
        matches!(
            e,
            FileProblem::DataLen {
                covered: 2,
                data_len: 3
            }
        ),
        "{e:?}"
    );
    // Shape x dtype disagrees with the offsets.
    let e = refuse(
        &t(r#"{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}"#),
        &[0; 12],
        &["\"w\"", "12 bytes", "8"],
    );
    assert!(
        matches!(&e, FileProblem::SizeMismatch { tensor, expected: 12, found: 8, .. } if tensor == "w"),
        "{e:?}"
    );
    // Shape whose byte count overflows.
    let e = refuse(
        &t(r#"{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}"#),
        &[],
        &["\"w\"", "4294967296"],
    );
    assert!(matches!(e, FileProblem::SizeOverflow { .. }), "{e:?}");
    // A dtype the format has and nothing here loads.
    let e = refuse(
        &t(r#"{"dtype":"C64","shape":[1],"data_offsets":[0,8]}"#),
        &[0; 8],
        &["\"w\"", "C64"],
    );
    assert!(matches!(e, FileProblem::UnsupportedDtype { .. }), "{e:?}");
    // Negative, fractional, string, nested, and null dimensions; shape not an array.
    for bad in [
        "[-1]", "[2.5]", "[1e3]", "[\"4\"]", "[[4]]", "[null]", "{}", "4", "\"[4]\"", "null",
    ] {
        let e = refuse(
            &t(&format!(
                r#"{{"dtype":"U8","shape":{bad},"data_offsets":[0,4]}}"#
            )),
            &[0; 4],
            &["\"w\"", "shape"],
        );
        assert!(
            matches!(&e, FileProblem::BadTensor { tensor, field, .. } if tensor == "w" && field.starts_with("shape")),
            "{bad}: {e:?}"
        );
    }
    // Too many dimensions.
    let many = format!("[{}]", vec!["1"; 65].join(","));
    let e = refuse(
        &t(&format!(
            r#"{{"dtype":"U8","shape":{many},"data_offsets":[0,1]}}"#
        )),
        &[0],
        &["\"w\"", "65"],
    );
    assert!(
        matches!(
            e,
            FileProblem::RankTooHigh {
                rank: 65,
                max: 64,
                ..
            }
        ),
        "{e:?}"
    );
    // Offsets of the wrong arity or kind.
    for bad in ["[0]", "[0,1,2]", "[0,-1]", "[0,1.5]", "\"0,1\""] {
        let e = refuse(
            &t(&format!(
                r#"{{"dtype":"U8","shape":[1],"data_offsets":{bad}}}"#
            )),
            &[0; 4],
            &["\"w\"", "data_offsets"],
        );
        assert!(
            matches!(&e, FileProblem::BadTensor { field, .. } if field.starts_with("data_offsets")),
            "{bad}: {e:?}"
        );
    }
    // Missing fields, unknown or mistyped dtype, a field given twice.
    for (body, needle) in [
        (
            r#"{"shape":[1],"data_offsets":[0,1]}"#,
            "missing field `dtype`",
        ),
        (
            r#"{"dtype":"U8","data_offsets":[0,1]}"#,
            "missing field `shape`",
        ),
        (
            r#"{"dtype":"U8","shape":[1]}"#,
            "missing field `data_offsets`",
        ),
        (
            r#"{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}"#,
            "Q4_K",
        ),
        (r#"{"dtype":16,"shape":[1],"data_offsets":[0,1]}"#, "dtype"),
        (
            r#"{"dtype":["U8"],"shape":[1],"data_offsets":[0,1]}"#,
            "dtype",
        ),
        (
            r#"{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}"#,
            "duplicate field `dtype`",
        ),
    ] {
        let e = refuse(&t(body), &[0], &["\"w\"", needle]);
        assert!(
            matches!(&e, FileProblem::BadTensor { tensor, .. } if tensor == "w"),
            "{body}: {e:?}"
        );
    }
    // A tensor that is not an object; a tensor named twice.
    for bad in ["[1]", "1", "\"x\"", "null", "true"] {
        let e = refuse(&t(bad), &[], &["\"w\""]);
        assert!(
            matches!(&e, FileProblem::BadTensor { tensor, .. } if tensor == "w"),
            "{bad}: {e:?}"
        );
    }
    // Named twice, as two ranges (the crate, keeping the last, would call it a gap) or as the
    // same one (which the crate accepts).
    for second in ["[1,2]", "[0,1]"] {
        let h = format!(
            r#"{{"w":{{"dtype":"U8","shape":[1],"data_offsets":[0,1]}},"w":{{"dtype":"U8","shape":[1],"data_offsets":{second}}}}}"#
        );
        let data = if second == "[0,1]" {
            &[0u8][..]
        } else {
            &[0, 0]
        };
        let e = refuse(&h, data, &["\"w\"", "twice"]);
        assert!(
            matches!(&e, FileProblem::DuplicateTensor(n) if n == "w"),
            "{e:?}"
        );
    }
    // Metadata that is not string to string.
    for bad in [r#"{"format":1}"#, r#"{"a":{"b":"c"}}"#, "[]", "\"pt\""] {
        let e = refuse(
            &format!("{{\"__metadata__\":{bad}}}"),
            &[],
            &["__metadata__"],
        );
        assert!(matches!(e, FileProblem::BadMetadata { .. }), "{bad}: {e:?}");
    }

    // What is allowed: an empty header, `"__metadata__": null`, unknown extra keys, trailing
    // spaces, and a tensor as the crate's `TensorInfo` reads a struct from an array.
    let st = open_header(&dir, "{}", &[]).unwrap();
    assert!(st.tensors().is_empty());
    let st = open_header(&dir, r#"{"__metadata__":null}"#, &[]).unwrap();
    assert!(st.metadata().is_empty());
    let st = open_header(
        &dir,
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":{"deep":[1,2,{"x":null}]}}}   "#,
        &[9, 8],
    )
    .unwrap();
    assert_eq!(st.read("a").unwrap(), [9, 8]);
    let st = open_header(&dir, r#"{"a":["I16",[1],[0,2]]}"#, &[1, 2]).unwrap();
    assert_eq!(st.get("a").unwrap().dtype, Dtype::I16);
}

#[test]
fn a_file_truncated_after_open_fails_to_read_rather_than_returning_short_data() {
    let dir = scratch("truncate");
    let p = dir.join("t.safetensors");
    write_safetensors(&p, &[("a", Dtype::F32, &[256], &[7u8; 1024])]).unwrap();
    let st = SafeTensors::open(&p).unwrap();
    let len = std::fs::metadata(&p).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    assert!(matches!(st.read("a"), Err(SafeTensorsError::Io { .. })));
}

#[test]
fn mutated_and_truncated_files_never_panic() {
    let dir = scratch("fuzz");
    let cfg = tiny_bf16(false);
    let good = dir.join("good.safetensors");
    // Small tensors so that every iteration is cheap: just the first layer's norms and the
    // final norm (the header is what matters).
    let tensors: Owned = layout_tensors(&cfg, Dtype::BF16)
        .into_iter()
        .filter(|t| t.2.len() == 1)
        .collect();
    write(&good, &tensors).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let p = dir.join("m.safetensors");
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut opened, mut refused) = (0, 0);
    for i in 0..3000 {
        let mut b = bytes.clone();
        match i % 4 {
            // Flip bytes in the header (mostly) or length word.
            0 | 1 => {
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % header_end;
                    b[at] = next() as u8;
                }
            }
            // Replace a header byte with a JSON-significant one.
            2 => {
                let at = 8 + (next() as usize) % (header_end - 8);
                b[at] = b"{}[]\",:-.0123456789e "[(next() as usize) % 21];
            }
            // Truncate anywhere.
            _ => b.truncate((next() as usize) % b.len()),
        }
        std::fs::write(&p, &b).unwrap();
        match SafeTensors::open(&p) {
            Ok(st) => {
                opened += 1;
                for t in st.tensors().to_vec() {
                    let data = st.read(&t.name).unwrap();
                    assert_eq!(data.len() as u64, t.byte_len());
                    assert!(t.range.end <= b.len() as u64);
                }
                let _ = check_llama(&st, &cfg);
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    assert!(
        opened > 0 && refused > 0,
        "{opened} opened, {refused} refused"
    );
}
