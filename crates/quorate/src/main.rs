//! `quorate`: etcd clusters described by etcd-druid's `Etcd` resource, run locally or on
//! Kubernetes. One binary; each subcommand is one program of the system.

mod agent_cmd;
mod backup_cmds;
mod backup_copy_cmd;
mod canary_cmd;
mod cli;
mod dispatch;
mod local_cmds;
mod progress;
mod signals;
mod watch_cmds;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    if invoked_as_kubectl_plugin() {
        let plugin = quorate_kubectl::PluginCli::parse();
        die_quietly_on_closed_pipe();
        init_tracing(None, cli::LogFormat::Text);
        return run_to_exit(dispatch::kube_plugin(plugin.args));
    }
    let cli = cli::Cli::parse();
    if !cli.command.is_long_running() {
        die_quietly_on_closed_pipe();
    }
    init_tracing(cli.log_level.as_deref(), cli.log_format);
    run_to_exit(dispatch::run(cli))
}

/// Whether this binary runs as kubectl's plugin: installed (copied or linked) as
/// `kubectl-quorate`, which `kubectl quorate …` executes.
fn invoked_as_kubectl_plugin() -> bool {
    std::env::args_os()
        .next()
        .as_deref()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .is_some_and(|name| name == "kubectl-quorate")
}

/// Runs a command to its exit code on a fresh runtime.
fn run_to_exit(
    command: impl std::future::Future<Output = Result<ExitCode, Box<dyn std::error::Error>>>,
) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = match runtime.block_on(command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    };
    // Dropping the runtime would wait for every blocking task without bound (a DNS lookup
    // of a name whose Service is gone, on a member pod being deleted): the work is done, so
    // the exit waits for none of them longer than this.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    code
}

/// How long the exit waits for blocking tasks still running once the command is done.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_millis(500);

/// A command whose output is piped into `head` ends silently when the reader goes away, as
/// every Unix tool does, instead of panicking in `println!` ("failed printing to stdout").
/// Rust starts programs with SIGPIPE ignored; the one-shot commands get the default back. The
/// long-running ones (agent, operator, supervisor, canary) keep it ignored: a peer closing a
/// socket or a pipe must be an error they handle, never their death (an etcd member restarting
/// under the canary's write killed the canary so, twice in CI).
fn die_quietly_on_closed_pipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: done first thing in main, before any thread exists; SIG_DFL runs no handler code.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

fn init_tracing(level: Option<&str>, format: cli::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("QUORATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.unwrap_or("info")));
    // Colours only for a person at a terminal: agents and supervisors log into files.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(terminal)
        .with_writer(std::io::stderr);
    match format {
        cli::LogFormat::Text => builder.init(),
        cli::LogFormat::Json => builder.json().init(),
    }
}
