//! `gputape inspect`: look at a buffer's contents after any call (replayed on any backend),
//! as a summary line or a file numpy, PyTorch and JAX read (`.npy`, `.safetensors`).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{open_trace, write_out};
use super::{Ctx, Exit};
use crate::backend::ElemType;
use crate::trace::BufferId;

#[derive(clap::Args)]
pub struct Args {
    /// The trace.
    trace: PathBuf,
    /// The call after which to look (its seq, as `show` numbers calls).
    #[arg(long)]
    at: u64,
    /// The buffer to look at (`buf12`); repeatable. Without it, `--writes` names them.
    #[arg(long = "buffer", value_name = "BUF", value_parser = super::replay::parse_buffer)]
    buffers: Vec<BufferId>,
    /// Every buffer call N may write (a launch's non-const pointers, a copy's destination).
    #[arg(long)]
    writes: bool,
    /// Read the bytes as f32, f16 or bf16 (default: what the kernels using the buffer say;
    /// raw bytes where none does).
    #[arg(long)]
    dtype: Option<String>,
    /// The array's shape (`32,4096`); its elements must number the buffer's. Default: flat.
    #[arg(long, value_delimiter = ',')]
    shape: Vec<u64>,
    /// Write to FILE: `.npy` (numpy has no bf16: bf16 widens to f32, exactly, and says so) or
    /// `.safetensors` (bf16 kept). With several buffers, one file each (`FILE` gains
    /// `.bufK` before its extension) for `.npy`, one file for `.safetensors`.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The backend to replay on.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    on: Backend,
    /// Print the summaries as JSON.
    #[arg(long)]
    json: bool,
}

/// One buffer's values, decoded.
struct Array {
    buf: BufferId,
    elem: Option<ElemType>,
    bytes: Vec<u8>,
    shape: Vec<u64>,
}

impl Array {
    fn len(&self) -> u64 {
        self.bytes.len() as u64 / self.elem.map_or(1, |e| e.size())
    }

    /// Each element as f64 (exact for all three types).
    fn values(&self) -> Vec<f64> {
        match self.elem {
            None => self.bytes.iter().map(|b| *b as f64).collect(),
            Some(e) => self
                .bytes
                .chunks_exact(e.size() as usize)
                .filter_map(|c| e.decode(c).map(|(v, _)| v))
                .collect(),
        }
    }

    fn summary(&self) -> serde_json::Value {
        let v = self.values();
        let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        let nan = v.iter().filter(|x| x.is_nan()).count();
        let inf = v.iter().filter(|x| x.is_infinite()).count();
        let (min, max) = finite
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(*x), b.max(*x))
            });
        let mean = (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64);
        serde_json::json!({
            "buffer": self.buf.to_string(),
            "dtype": self.elem.map_or("u8 (raw bytes)", |e| e.name()),
            "elements": self.len(),
            "shape": self.shape,
            "min": (!finite.is_empty()).then_some(min),
            "max": (!finite.is_empty()).then_some(max),
            "mean": mean,
            "nan": nan,
            "inf": inf,
        })
    }
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let t = open_trace(ctx, &a.trace)?;
    let call = t
        .calls
        .iter()
        .find(|c| c.seq == a.at)
        .with_context(|| format!("{} has no call #{}", a.trace.display(), a.at))?;
    let mut bufs = a.buffers.clone();
    if a.writes {
        for b in crate::trace::written_through(&t, call) {
            if !bufs.contains(&b) {
                bufs.push(b);
            }
        }
    }
    anyhow::ensure!(
        !bufs.is_empty(),
        "nothing to inspect: name a buffer (--buffer bufK) or ask for what call #{} writes (--writes){}",
        a.at,
        if a.writes { ", which is nothing" } else { "" }
    );
    let dtype = match a.dtype.as_deref() {
        Some(s) => Some(
            ElemType::parse(s)
                .with_context(|| format!("{s:?} is not an element type (f32, f16, bf16)"))?,
        ),
        None => None,
    };
    let opened = backends::open(ctx, a.on, Want::replay())?;
    let load = |m: &crate::backend::ModuleCode| opened.load_trace_code(m);
    let mut r = crate::replayer::Replayer::new(&t);
    if a.on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let read = r.inspect(opened.gpu.as_ref(), a.at, &bufs, Some(&load))?;
    let mut arrays = Vec::new();
    for (buf, bytes) in read {
        let elem = dtype.or_else(|| crate::trace::elem_of(&t, buf, a.at));
        let mut arr = Array {
            buf,
            elem,
            bytes,
            shape: Vec::new(),
        };
        arr.shape = match a.shape.as_slice() {
            [] => vec![arr.len()],
            s => {
                let n = s.iter().try_fold(1u64, |p, d| p.checked_mul(*d));
                anyhow::ensure!(
                    n == Some(arr.len()),
                    "--shape {:?} has {} elements; {buf} holds {} {}",
                    s,
                    n.map_or("too many".into(), |n| n.to_string()),
                    arr.len(),
                    arr.elem.map_or("bytes", |e| e.name())
                );
                s.to_vec()
            }
        };
        arrays.push(arr);
    }
    let summaries: Vec<serde_json::Value> = arrays.iter().map(Array::summary).collect();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.inspect.v1",
                "at": a.at,
                "buffers": summaries,
            }))?
        );
    } else {
        let num = |v: &serde_json::Value| match v.as_f64() {
            Some(x) => format!("{x}"),
            None => "-".into(),
        };
        for s in &summaries {
            println!(
                "{} after call #{}: {} {} elements; min {} max {} mean {} (finite values); {} NaN, {} Inf",
                s["buffer"].as_str().unwrap_or_default(),
                a.at,
                s["elements"],
                s["dtype"].as_str().unwrap_or_default(),
                num(&s["min"]),
                num(&s["max"]),
                num(&s["mean"]),
                s["nan"],
                s["inf"]
            );
        }
    }
    if let Some(out) = &a.output {
        write_arrays(out, &arrays)?;
    }
    Ok(Exit::Pass)
}

fn write_arrays(out: &Path, arrays: &[Array]) -> Result<()> {
    match out.extension().and_then(|e| e.to_str()) {
        Some("npy") => {
            for arr in arrays {
                let path = match arrays.len() {
                    1 => out.to_path_buf(),
                    _ => out.with_extension(format!("{}.npy", arr.buf)),
                };
                let bytes = npy(arr)?;
                if write_out(&path, &bytes)? {
                    let widened = match arr.elem {
                        Some(ElemType::Bf16) | Some(ElemType::F16) => {
                            format!(
                                " ({} widened to f32: numpy has no bf16; exact)",
                                arr.elem.map_or("", |e| e.name())
                            )
                        }
                        _ => String::new(),
                    };
                    eprintln!(
                        "wrote {} ({} {:?}){widened}",
                        path.display(),
                        arr.buf,
                        arr.shape
                    );
                }
            }
            Ok(())
        }
        Some("safetensors") => {
            let bytes = safetensors_bytes(arrays)?;
            if write_out(out, &bytes)? {
                eprintln!(
                    "wrote {} ({} tensor(s), named by buffer)",
                    out.display(),
                    arrays.len()
                );
            }
            Ok(())
        }
        _ => anyhow::bail!(
            "{}: write .npy or .safetensors (the extension says which)",
            out.display()
        ),
    }
}

/// `.npy` bytes: f32 for every float type (bf16 and f16 widen exactly), u8 for raw bytes.
fn npy(arr: &Array) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    match arr.elem {
        None => {
            use npyz::WriterBuilder;
            let mut w = npyz::WriteOptions::<u8>::new()
                .default_dtype()
                .shape(&arr.shape)
                .writer(&mut out)
                .begin_nd()?;
            w.extend(arr.bytes.iter().copied())?;
            w.finish()?;
        }
        Some(_) => {
            use npyz::WriterBuilder;
            let mut w = npyz::WriteOptions::<f32>::new()
                .default_dtype()
                .shape(&arr.shape)
                .writer(&mut out)
                .begin_nd()?;
            w.extend(arr.values().into_iter().map(|v| v as f32))?;
            w.finish()?;
        }
    }
    Ok(out)
}

/// A `.safetensors` file of every array, each named by its buffer, in its own type.
fn safetensors_bytes(arrays: &[Array]) -> Result<Vec<u8>> {
    use safetensors::tensor::{Dtype, TensorView};
    let mut views = Vec::new();
    for arr in arrays {
        let dtype = match arr.elem {
            None => Dtype::U8,
            Some(ElemType::F32) => Dtype::F32,
            Some(ElemType::F16) => Dtype::F16,
            Some(ElemType::Bf16) => Dtype::BF16,
        };
        let shape: Vec<usize> = arr.shape.iter().map(|d| *d as usize).collect();
        views.push((
            arr.buf.to_string(),
            TensorView::new(dtype, shape, &arr.bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e:?}", arr.buf))?,
        ));
    }
    safetensors::serialize(views, None).map_err(|e| anyhow::anyhow!("safetensors: {e:?}"))
}
