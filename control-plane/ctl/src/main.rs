//! `switchyard-ctl`: the command line for Switchyard's control plane: tenants, credentials, resources, routes,
//! gateways, migrations, the audit log and the API's tokens, over its REST API. This file parses the command line and dispatches;
//! each noun has its own module, and every command goes through `session`.

mod audit;
mod client;
mod config;
mod credentials;
mod gateways;
mod migrations;
mod output;
mod probes;
mod resources;
mod routes;
mod session;
mod system;
mod tenants;
mod tokens;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::client::{Client, Outcome};
use crate::config::Given;
use crate::output::Format;
use crate::session::Session;

const AFTER_HELP: &str = "\
Examples:
  export SWITCHYARD_URL=http://127.0.0.1:8080 SWITCHYARD_ADMIN_TOKEN_FILE=~/.config/switchyard/admin.token
  switchyard-ctl tenants create shop
  switchyard-ctl resources create main redis://10.0.0.5:6379
  switchyard-ctl credentials create shop
  switchyard-ctl routes set shop --file route.json
  switchyard-ctl routes edit shop
  switchyard-ctl routes explain shop user:1 user:2
  switchyard-ctl migrations create shop --to new-main

Exit codes:
  0  success
  1  usage or local error (bad flags, a file that cannot be read or parsed, an edit that does not validate)
  2  not found (404)
  3  conflict or precondition failed (409, 412): the state does not allow it, or someone changed it meanwhile
  4  invalid request (400, 422)
  5  not authorized (401, 403)
  6  server error (5xx) or the control plane cannot be reached";

/// switchyard-ctl: operate a Switchyard control plane from the command line (tenants, credentials, resources,
/// routes, gateways, migrations, audit).
#[derive(Parser)]
#[command(name = "switchyard-ctl", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Accepted before or after the subcommand.
#[derive(Args)]
struct Global {
    /// The control plane's base URL [default: a profile's, else http://127.0.0.1:8080].
    #[arg(long, global = true, env = "SWITCHYARD_URL")]
    url: Option<String>,
    /// The bearer token: a start-up admin token or an API token of any role (visible to `ps`: prefer
    /// --admin-token-file).
    #[arg(
        long,
        global = true,
        env = "SWITCHYARD_ADMIN_TOKEN",
        hide_env_values = true
    )]
    admin_token: Option<String>,
    /// A file holding the bearer token.
    #[arg(long, global = true, env = "SWITCHYARD_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// CA certificates (PEM) to trust for an https:// URL, instead of the system's trust store.
    #[arg(long, global = true, env = "SWITCHYARD_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// A profile of the profile file [default: the file's "default"].
    #[arg(long, global = true, env = "SWITCHYARD_PROFILE")]
    profile: Option<String>,
    /// The profile file [default: ~/.config/switchyard/ctl.json].
    #[arg(long, global = true, env = "SWITCHYARD_CTL_CONFIG")]
    config: Option<PathBuf>,
    /// How to show answers: a table, or the API's body as JSON or YAML.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Check a change with the control plane and show what it would change, without changing anything.
    #[arg(long, global = true)]
    dry_run: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Tenants: list, get, create, update, delete.
    #[command(
        subcommand,
        after_help = "Examples:\n  switchyard-ctl tenants create shop\n  switchyard-ctl tenants list"
    )]
    Tenants(tenants::Tenants),
    /// A tenant's credentials: list, create (issue or import), delete (revoke).
    #[command(
        subcommand,
        after_help = "Examples:\n  switchyard-ctl credentials create shop\n  switchyard-ctl credentials list shop"
    )]
    Credentials(credentials::Credentials),
    /// Resources (the Redis deployments routes name): list, get, create, update, delete.
    #[command(
        subcommand,
        after_help = "Example:\n  switchyard-ctl resources create main redis://10.0.0.5:6379"
    )]
    Resources(resources::Resources),
    /// A tenant's route table: get, set, edit, versions, diff, rollback, explain.
    #[command(
        subcommand,
        after_help = "Examples:\n  switchyard-ctl routes set shop --file route.json\n  switchyard-ctl routes edit shop\n  switchyard-ctl routes diff shop 1 2"
    )]
    Routes(routes::Routes),
    /// The gateway fleet and the revision each serves.
    #[command(subcommand, after_help = "Example:\n  switchyard-ctl gateways list")]
    Gateways(gateways::Gateways),
    /// Tenant migrations: create, backfill, verify, cutover, finish, abort, watch.
    #[command(
        subcommand,
        after_help = "Examples:\n  switchyard-ctl migrations create shop --to new-main\n  switchyard-ctl migrations backfill shop 1 --watch"
    )]
    Migrations(migrations::Migrations),
    /// The audit log of every change.
    #[command(
        subcommand,
        after_help = "Example:\n  switchyard-ctl audit list --tenant shop"
    )]
    Audit(audit::Audit),
    /// The API's tokens and their roles: list, create, rotate, delete (revoke). Admin only.
    #[command(
        subcommand,
        after_help = "Examples:\n  switchyard-ctl tokens create dashboards --role viewer\n  switchyard-ctl tokens rotate 3"
    )]
    Tokens(tokens::Tokens),
    /// The token in use: its name, role and tenants.
    #[command(after_help = "Example:\n  switchyard-ctl whoami")]
    Whoami,
    /// Create many tenants with their credentials and routes in one change (a POST /v1/import body).
    #[command(after_help = "Example:\n  switchyard-ctl import --file tenants.json --dry-run")]
    Import {
        #[arg(long, short = 'f')]
        file: PathBuf,
    },
    /// Whether the control plane and its database answer.
    #[command(after_help = "Example:\n  switchyard-ctl health -o json")]
    Health,
    /// Print a shell completion script.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl completion bash > /etc/bash_completion.d/switchyard-ctl\n  \
        switchyard-ctl completion zsh > \"${fpath[1]}/_switchyard-ctl\"\n  \
        switchyard-ctl completion fish > ~/.config/fish/completions/switchyard-ctl.fish")]
    Completion { shell: clap_complete::Shell },
}

async fn run(cli: Cli) -> Outcome {
    if let Command::Completion { shell } = cli.command {
        return completion(shell);
    }
    let Global {
        url,
        admin_token,
        admin_token_file,
        ca_file,
        profile,
        config,
        output,
        dry_run,
    } = cli.global;
    let endpoint = Given {
        url,
        admin_token,
        admin_token_file,
        ca_file,
        profile,
        config,
    }
    .resolve()?;
    let session = Session {
        client: Client::new(&endpoint.url, endpoint.token, endpoint.ca_file.as_deref())?,
        format: output,
        dry_run,
    };
    match cli.command {
        Command::Tenants(command) => command.run(&session).await,
        Command::Credentials(command) => command.run(&session).await,
        Command::Resources(command) => command.run(&session).await,
        Command::Routes(command) => command.run(&session).await,
        Command::Gateways(command) => command.run(&session).await,
        Command::Migrations(command) => command.run(&session).await,
        Command::Audit(command) => command.run(&session).await,
        Command::Tokens(command) => command.run(&session).await,
        Command::Whoami => tokens::who_am_i(&session).await,
        Command::Import { file } => system::import(&session, &file).await,
        Command::Health => system::health(&session).await,
        Command::Completion { .. } => Ok(()),
    }
}

/// The completion script, written whole or until the reader stops: `completion bash | head` is not an error
/// (clap_complete's own writer panics on a closed pipe, so the script is made first).
fn completion(shell: clap_complete::Shell) -> Outcome {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "switchyard-ctl", &mut script);
    match std::io::Write::write_all(&mut std::io::stdout().lock(), &script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            // --help and --version are not errors; a usage error is the local class.
            return match error.use_stderr() {
                true => ExitCode::from(1),
                false => ExitCode::SUCCESS,
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {failure}");
            failure.exit_code()
        }
    }
}
