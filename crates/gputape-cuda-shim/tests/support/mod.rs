//! What the shim's tests and `gputape run`'s share (the root's tests include this file with
//! `#[path]`): the built shim, a fake driver and small C programs compiled at test time.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The shim cargo built for this profile. `cargo test` (at the workspace root, or of this
/// crate) builds it into `target/<profile>/deps/` before any test runs, and only `cargo build`
/// copies it up into `target/<profile>/`: so the test binary's own directory (`deps/`) first.
pub fn shim() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    for dir in exe.ancestors().skip(1).take(2) {
        let p = dir.join("libgputape_cuda_shim.so");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "libgputape_cuda_shim.so not found beside {}: build the workspace (`cargo test` or \
         `cargo build` at its root)",
        exe.display()
    );
}

/// `target/<profile>/`, from the test binary in its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// A directory of this test process's own, for `what`, emptied first.
pub fn scratch(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-shim-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `cc ARGS`, which must succeed.
pub fn cc(args: &[&dyn AsRef<std::ffi::OsStr>]) {
    let mut c = Command::new("cc");
    for a in args {
        c.arg(a);
    }
    let o = c.output().expect("a C compiler (cc) runs");
    assert!(
        o.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A C source of `support/c/`, written into `dir`.
fn source(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    // The types the fake driver and the programs share, beside every source that may include
    // it: written under a name of this process's and renamed into place, so a compiler that
    // another test process runs in the same directory never reads it half written.
    let header = dir.join("cuda_types.h");
    let tmp = dir.join(format!("cuda_types.h.{}", std::process::id()));
    std::fs::write(&tmp, include_str!("c/cuda_types.h")).unwrap();
    std::fs::rename(&tmp, &header).unwrap();
    p
}

/// The fake driver (`c/fake_libcuda.c`), compiled once per test process into
/// `target/<profile>/gputape-shim-tests/` (under a name of its own, then renamed into place, so
/// a process that has the previous one loaded keeps it).
pub fn fake_driver() -> &'static Path {
    static FAKE: OnceLock<PathBuf> = OnceLock::new();
    FAKE.get_or_init(|| {
        let d = profile_dir().join("gputape-shim-tests");
        std::fs::create_dir_all(&d).unwrap();
        let pid = std::process::id();
        let src = source(
            &d,
            &format!("fake_libcuda.{pid}.c"),
            include_str!("c/fake_libcuda.c"),
        );
        let tmp = d.join(format!("libfakecuda.so.{pid}"));
        cc(&[
            &"-shared",
            &"-fPIC",
            &"-O1",
            &"-Wl,-Bsymbolic",
            &"-o",
            &tmp,
            &src,
        ]);
        let out = d.join("libfakecuda.so");
        std::fs::rename(&tmp, &out).unwrap();
        std::fs::remove_file(&src).unwrap();
        out
    })
}

/// `c/dlopen_by_name.c` compiled into `dir`: loads `libcuda.so.1` by name, calls
/// cuDriverGetVersion, exits with its first argument.
pub fn dlopen_program(dir: &Path) -> PathBuf {
    let src = source(dir, "dlopen_by_name.c", include_str!("c/dlopen_by_name.c"));
    let out = dir.join("dlopen_by_name");
    cc(&[&"-O1", &"-o", &out, &src, &"-ldl"]);
    out
}

/// `c/records.c` compiled into `dir` and linked with `-lcuda` against the shim, as
/// `linked_program` is: a program that allocates, uploads, launches, reads back and frees.
pub fn records_program(dir: &Path) -> PathBuf {
    link_program(dir, "records", include_str!("c/records.c"))
}

/// `c/copies.c` compiled into `dir` and linked like `records_program`: 2D, 3D, generic and
/// peer copies, each read back.
pub fn copies_program(dir: &Path) -> PathBuf {
    link_program(dir, "copies", include_str!("c/copies.c"))
}

/// `c/globals.c` compiled into `dir` and linked like `records_program`: a module variable's
/// address asked of the driver, filled, and read back.
pub fn globals_program(dir: &Path) -> PathBuf {
    link_program(dir, "globals", include_str!("c/globals.c"))
}

/// `c/cooperative.c` compiled into `dir` and linked like `records_program`: one kernel
/// launched cooperatively by `cuLaunchCooperativeKernel`, then by `cuLaunchKernelEx` with the
/// cooperative attribute, and read back.
pub fn cooperative_program(dir: &Path) -> PathBuf {
    link_program(dir, "cooperative", include_str!("c/cooperative.c"))
}

/// `c/graph_nodes.c` compiled into `dir`, linked like `cooperative_program`: a graph built
/// node by node (memset, kernel and copy nodes), launched twice.
pub fn graph_nodes_program(dir: &Path) -> PathBuf {
    link_program(dir, "graph_nodes", include_str!("c/graph_nodes.c"))
}

/// `c/graph_update.c` compiled into `dir`, linked like `cooperative_program`: graphs
/// changed after they were made (new node parameters in a graph and in an executable, a node
/// turned off, an executable updated to a clone, a child graph, a host node).
pub fn graph_update_program(dir: &Path) -> PathBuf {
    link_program(dir, "graph_update", include_str!("c/graph_update.c"))
}

/// `c/batch_copies.c` compiled into `dir`, linked like `cooperative_program`: copies in
/// batches (`cuMemcpyBatchAsync_v2`) and a copy with attributes.
pub fn batch_copies_program(dir: &Path) -> PathBuf {
    link_program(dir, "batch_copies", include_str!("c/batch_copies.c"))
}

/// `c/mapped.c` compiled into `dir`, linked like `cooperative_program`: pinned host memory
/// the device reads and writes where it lies (allocated mapped, and registered with its device
/// address asked).
pub fn mapped_program(dir: &Path) -> PathBuf {
    link_program(dir, "mapped", include_str!("c/mapped.c"))
}

/// `c/launch_attrs.c` compiled into `dir`, linked like `cooperative_program`: a launch with
/// a priority, programmatic stream serialization and a completion event another stream waits
/// for.
pub fn launch_attrs_program(dir: &Path) -> PathBuf {
    link_program(dir, "launch_attrs", include_str!("c/launch_attrs.c"))
}

/// `c/capture_update.c` compiled into `dir`, linked like `cooperative_program`: a captured
/// graph's nodes given new parameters, in its executable and in the graph, and an update.
pub fn capture_update_program(dir: &Path) -> PathBuf {
    link_program(dir, "capture_update", include_str!("c/capture_update.c"))
}

/// `c/ipc.c` compiled into `dir`, linked like `cooperative_program`: an allocation shared
/// through an IPC handle and opened.
pub fn ipc_program(dir: &Path) -> PathBuf {
    link_program(dir, "ipc", include_str!("c/ipc.c"))
}

/// `c/ipc_fork.c` compiled into `dir`, linked like `cooperative_program`: a parent and the
/// child it forks sharing an allocation through an IPC handle.
pub fn ipc_fork_program(dir: &Path) -> PathBuf {
    link_program(dir, "ipc_fork", include_str!("c/ipc_fork.c"))
}

/// `c/vmm_fork.c` compiled into `dir`, linked like `cooperative_program`: a parent and its
/// child sharing physical memory through a file descriptor sent over a socket.
pub fn vmm_fork_program(dir: &Path) -> PathBuf {
    link_program(dir, "vmm_fork", include_str!("c/vmm_fork.c"))
}

/// `c/node_changes.c` compiled into `dir`, linked like `cooperative_program`: a graph node
/// destroyed, and an executable's child-graph node given another graph.
pub fn node_changes_program(dir: &Path) -> PathBuf {
    link_program(dir, "node_changes", include_str!("c/node_changes.c"))
}

/// `c/event_nodes.c` compiled into `dir`, linked like `cooperative_program`: a graph built
/// node by node that waits for an event and records one.
pub fn event_nodes_program(dir: &Path) -> PathBuf {
    link_program(dir, "event_nodes", include_str!("c/event_nodes.c"))
}

/// `c/stream_batch.c` compiled into `dir`, linked like `cooperative_program`: values written
/// and waited for in batches (`cuStreamBatchMemOp`).
pub fn stream_batch_program(dir: &Path) -> PathBuf {
    link_program(dir, "stream_batch", include_str!("c/stream_batch.c"))
}

/// `c/stream_values.c` compiled into `dir`, linked like `cooperative_program`: values written
/// on a stream, and a wait for one.
pub fn stream_values_program(dir: &Path) -> PathBuf {
    link_program(dir, "stream_values", include_str!("c/stream_values.c"))
}

/// `c/host_func.c` compiled into `dir`, linked like `cooperative_program`: a host function
/// and a stream callback queued after an async copy to the host.
pub fn host_func_program(dir: &Path) -> PathBuf {
    link_program(dir, "host_func", include_str!("c/host_func.c"))
}

/// `c/big_shared.c` compiled into `dir`, linked like `cooperative_program`: a launch with
/// 96 KiB of dynamic shared memory, its function's limit raised first.
pub fn big_shared_program(dir: &Path) -> PathBuf {
    link_program(dir, "big_shared", include_str!("c/big_shared.c"))
}

/// `c/capture_mode.c` compiled into `dir`, linked like `cooperative_program`: an allocation
/// made in relaxed capture mode while a capture is open.
pub fn capture_mode_program(dir: &Path) -> PathBuf {
    link_program(dir, "capture_mode", include_str!("c/capture_mode.c"))
}

/// `c/managed.c` compiled into `dir`, linked like `cooperative_program`: managed memory the
/// host writes and reads with plain stores and loads.
pub fn managed_program(dir: &Path) -> PathBuf {
    link_program(dir, "managed", include_str!("c/managed.c"))
}

/// `c/per_thread.c` compiled into `dir`, linked like `cooperative_program`: a program built
/// for per-thread default streams, its stream-taking calls the `_ptsz`/`_ptds` forms.
pub fn per_thread_program(dir: &Path) -> PathBuf {
    link_program(dir, "per_thread", include_str!("c/per_thread.c"))
}

/// `c/sites.c` compiled into `dir`, linked like `records_program` with `-rdynamic`, and
/// `c/sites_lib.c` beside it as `libcublas_sites.so` (which it links): calls made from main,
/// from a function of its own and from a library that launches for it.
pub fn sites_program(dir: &Path) -> PathBuf {
    let lib_src = source(dir, "sites_lib.c", include_str!("c/sites_lib.c"));
    let lib = dir.join("libcublas_sites.so");
    let cuda = dir.join("libcuda.so");
    let _ = std::fs::remove_file(&cuda);
    std::os::unix::fs::symlink(shim(), &cuda).unwrap();
    let l = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(&[
        &"-shared", &"-fPIC", &"-O1", &"-o", &lib, &lib_src, &l, &"-lcuda",
    ]);
    let src = source(dir, "sites.c", include_str!("c/sites.c"));
    let out = dir.join("sites");
    cc(&[
        &"-O1",
        &"-rdynamic",
        &"-o",
        &out,
        &src,
        &l,
        &rpath,
        &"-lcublas_sites",
        &"-lcuda",
        &"-ldl",
    ]);
    std::fs::remove_file(&cuda).unwrap();
    out
}

/// `c/faults.c` compiled into `dir` and linked like `records_program`: an engine-shaped loop
/// whose step FAULT runs a kernel off the end of device memory.
pub fn faults_program(dir: &Path) -> PathBuf {
    link_program(dir, "faults", include_str!("c/faults.c"))
}

/// `c/graphs.c` compiled into `dir` and linked like `records_program`: a step captured into a
/// graph and launched each step; step FAULT adds an eager launch that faults.
pub fn graphs_program(dir: &Path) -> PathBuf {
    link_program(dir, "graphs", include_str!("c/graphs.c"))
}

/// `c/linked.c` compiled into `dir` and linked with `-lcuda` against the shim (through a
/// `libcuda.so` link in `dir`): it needs `libcuda.so.1` to start at all.
pub fn linked_program(dir: &Path) -> PathBuf {
    link_program(dir, "linked", include_str!("c/linked.c"))
}

/// A C program `name` compiled into `dir` and linked with `-lcuda` against the shim.
pub fn link_program(dir: &Path, name: &str, text: &str) -> PathBuf {
    let src = source(dir, &format!("{name}.c"), text);
    let lib = dir.join("libcuda.so");
    let _ = std::fs::remove_file(&lib);
    std::os::unix::fs::symlink(shim(), &lib).unwrap();
    let out = dir.join(name);
    let l = format!("-L{}", dir.display());
    cc(&[&"-O1", &"-o", &out, &src, &l, &"-lcuda"]);
    std::fs::remove_file(&lib).unwrap();
    out
}
