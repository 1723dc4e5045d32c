//! The `gputape` binary: everything it does lives in the library's [`gputape::cli`], so an
//! engine can build the same command line with its own kernels (see `cli::main_with`).

fn main() -> std::process::ExitCode {
    gputape::cli::main()
}
