//! The `lserve` command line: generate, score, devices. Errors end the process with a message
//! and a non-zero exit (1 for runtime errors, 2 for bad flags, as clap does).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
