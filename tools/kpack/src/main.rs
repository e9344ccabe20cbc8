//! `kpack`: split GPU device code out of fat binaries, pack it per arch,
//! recombine CI shards and check the result. Thin wiring only: the logic
//! lives in the `rocpack-*` library crates.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Split, pack, recombine and inspect HIP fat binaries and `.kpack` archives.
#[derive(Debug, Parser)]
#[command(name = "kpack", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Describe any fat binary, static archive, bundle, CCOB or `.kpack` file.
    Inspect(cmd::inspect::InspectArgs),
    /// Write one file per code object found in FILE.
    Unbundle(cmd::unbundle::UnbundleArgs),
    /// Build a `.kpack` archive from code objects.
    Pack(cmd::pack::PackArgs),
    /// Extract every code object of a `.kpack` archive.
    Unpack(cmd::unpack::UnpackArgs),
    /// Split an artifact directory into host-only and per-arch artifacts.
    Split(cmd::split::SplitArgs),
    /// Split a fat Python wheel into a host wheel and per-target device wheels.
    SplitWheel(cmd::split_wheel::SplitWheelArgs),
    /// Rebuild a fat binary from a split host binary and its `.kpack` files.
    Reassemble(cmd::reassemble::ReassembleArgs),
    /// Recombine split CI shards into per-architecture-group packages.
    Recombine(cmd::recombine::RecombineArgs),
    /// Check a split or recombined artifact tree.
    Verify(cmd::verify::VerifyArgs),
    /// Print the architecture group a device needs.
    SelectFamily(cmd::select_family::SelectFamilyArgs),
}

/// Inputs are memory-mapped; one truncated by another process while kpack
/// reads it raises `SIGBUS`. Turn that into a usage/input error (exit 2
/// with a message) instead of a crash. Outputs are written to temporary
/// files and renamed, so none is left half-written.
#[allow(unsafe_code)]
fn exit_2_on_sigbus() {
    extern "C" fn on_sigbus(_: libc::c_int) {
        const MSG: &[u8] = b"kpack: an input file was truncated while it was being read (SIGBUS)\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(2);
        }
    }
    // SAFETY: a zeroed sigaction with a plain handler and an empty mask is
    // valid; installing it has no other effect.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

fn main() -> ExitCode {
    exit_2_on_sigbus();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { 2 } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Unbundle(a) => cmd::unbundle::run(a),
        Command::Pack(a) => cmd::pack::run(a),
        Command::Unpack(a) => cmd::unpack::run(a),
        Command::Split(a) => cmd::split::run(a),
        Command::SplitWheel(a) => cmd::split_wheel::run(a),
        Command::Reassemble(a) => cmd::reassemble::run(a),
        Command::Recombine(a) => cmd::recombine::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::SelectFamily(a) => cmd::select_family::run(a),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("kpack: error: {}", error_line(&err));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, each cause only once: error types
/// that already print their source (`{path}: {source}`) would otherwise
/// repeat the OS message.
fn error_line(err: &anyhow::Error) -> String {
    let mut line = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !line.contains(&c) {
            line.push_str(": ");
            line.push_str(&c);
        }
    }
    line
}
