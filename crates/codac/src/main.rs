//! `codac`: the command-line face of the compiler.
//!
//! This binary is the only place that touches the terminal, reads files named
//! on the command line, picks colours and exit codes: 0 success, 1 an error
//! in the user's program or invocation (diagnostics printed), 2 an internal
//! compiler error (a bug in codac).

mod bench_cmd;
mod bench_report;
mod bench_rig;
mod bench_vendor;
mod cli;
mod commands;
mod compile_cmd;
mod grad_cmd;
mod npy;
mod overrides;
mod run_cmd;
mod tune;

use clap::Parser;

/// Exit code for errors in the user's program or command line.
const EXIT_USER: i32 = 1;
/// Exit code for internal compiler errors.
const EXIT_INTERNAL: i32 = 2;

fn main() {
    restore_sigpipe();
    install_panic_hook();
    // Usage errors are user errors (exit 1); exit 2 is reserved for bugs.
    let args = match cli::Cli::try_parse() {
        Ok(args) => args,
        Err(err) => {
            let code = if err.use_stderr() { EXIT_USER } else { 0 };
            let _ = err.print();
            std::process::exit(code);
        }
    };
    let code = match commands::run(args) {
        Ok(commands::Outcome::Success) => 0,
        Ok(commands::Outcome::UserError) => EXIT_USER,
        Err(err) => {
            if err.downcast_ref::<coda::InternalError>().is_some() {
                eprintln!("internal compiler error: this is a bug in codac {}\n{err:#}", env!("CARGO_PKG_VERSION"));
                EXIT_INTERNAL
            } else {
                eprintln!("error: {err:#}");
                EXIT_USER
            }
        }
    };
    std::process::exit(code);
}

/// Lets a closed standard output end codac the way it ends `cat` or
/// `grep`: killed by SIGPIPE, quietly (the shell reports 141). Rust ignores
/// SIGPIPE by default, which turns `codac explain f.coda | head -1` into a
/// failed `println!`, i.e. a panic reported as an internal compiler error.
/// codac writes to no pipe other than its standard output and error, so the
/// default action cannot stop it anywhere else.
#[allow(unsafe_code)] // the binary's only unsafe call: libc has no safe `signal`
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in `main`, before any thread is started;
    // setting a signal's action to its default has no other effect.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// A panic is always a bug: say so, with the version, and exit with code 2.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("internal compiler error: this is a bug in codac {}", env!("CARGO_PKG_VERSION"));
        eprintln!("{info}");
        eprintln!("please report it with the input file and the command line that triggered it");
        std::process::exit(EXIT_INTERNAL);
    }));
}
