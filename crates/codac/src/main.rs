//! `codac`: the command-line face of the compiler.
//!
//! This binary is the only place that touches the terminal, reads files named
//! on the command line, picks colours and exit codes: 0 success, 1 an error
//! in the user's program or invocation (diagnostics printed), 2 an internal
//! compiler error (a bug in codac).

mod bench_cmd;
mod cli;
mod commands;
mod compile_cmd;
mod grad_cmd;
mod interp;
mod npy;
mod overrides;
mod run_cmd;

use clap::Parser;

/// Exit code for errors in the user's program or command line.
const EXIT_USER: i32 = 1;
/// Exit code for internal compiler errors.
const EXIT_INTERNAL: i32 = 2;

fn main() {
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
    let color = match args.color {
        cli::ColorArg::Auto => coda::ColorChoice::Auto,
        cli::ColorArg::Never => coda::ColorChoice::Never,
    };
    let code = match commands::run(args) {
        Ok(commands::Outcome::Success) => 0,
        Ok(commands::Outcome::UserError) => EXIT_USER,
        Err(err) if is_closed_stdout_error(&err) => EXIT_CLOSED_STDOUT,
        Err(err) if err.downcast_ref::<interp::Located>().is_some() => render_located(&err, color),
        Err(err) => {
            let is_bug = err.downcast_ref::<coda::InternalError>().is_some()
                || err.downcast_ref::<coda_bench::BenchError>().is_some_and(coda_bench::BenchError::is_bug);
            if is_bug {
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

/// Renders an error that is a located diagnostic; its exit code.
fn render_located(err: &anyhow::Error, color: coda::ColorChoice) -> i32 {
    let Some(located) = err.downcast_ref::<interp::Located>() else { return EXIT_INTERNAL };
    if located.is_bug {
        eprintln!("internal compiler error: this is a bug in codac {}", env!("CARGO_PKG_VERSION"));
    }
    coda::render(&located.source, std::slice::from_ref(&located.diagnostic), color);
    if located.is_bug {
        EXIT_INTERNAL
    } else {
        EXIT_USER
    }
}

/// Exit code when standard output was closed early (`codac explain f.coda |
/// head -1`): what a shell reports for a program that SIGPIPE killed, as it
/// kills `cat` or `grep`, 128 + 13.
const EXIT_CLOSED_STDOUT: i32 = 141;

/// Whether `message` is the standard library's panic of `print!` on a
/// standard output whose reader has gone (`EPIPE`).
fn is_closed_stdout_panic(message: &str) -> bool {
    message.starts_with("failed printing to stdout")
        && message.ends_with(&std::io::Error::from_raw_os_error(libc::EPIPE).to_string())
}

/// Whether an error is a write to a standard output whose reader has gone.
fn is_closed_stdout_error(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// A panic is always a bug: say so, with the version, and exit with code 2.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        // Rust ignores SIGPIPE, so a closed standard output makes `print!`
        // panic; end quietly, as a program SIGPIPE killed would.
        if info.payload_as_str().is_some_and(is_closed_stdout_panic) {
            std::process::exit(EXIT_CLOSED_STDOUT);
        }
        eprintln!("internal compiler error: this is a bug in codac {}", env!("CARGO_PKG_VERSION"));
        eprintln!("{info}");
        eprintln!("please report it with the input file and the command line that triggered it");
        std::process::exit(EXIT_INTERNAL);
    }));
}
