//! `sglang-mock`: the command line is [`mock_server::cli`].

fn main() -> std::process::ExitCode {
    mock_server::cli::main()
}
