//! `switchyard-ctl gateways`: the fleet, the revision each gateway serves, and whether all live ones are current
//! (`/v1/gateways`).

use clap::Subcommand;
use serde_json::Value;

use crate::client::{Call, Outcome};
use crate::output::{self, View};
use crate::session::Session;

#[derive(Subcommand)]
pub(crate) enum Gateways {
    /// Every gateway heard from, and whether every live one serves the current revision.
    #[command(after_help = "Example:\n  switchyard-ctl gateways list -o json")]
    List,
}

fn fleet(body: &Value) -> String {
    let rows = View::Rows {
        list: "/gateways",
        columns: &[
            ("ID", "/id"),
            ("ADDRESS", "/address"),
            ("REVISION", "/revision"),
            ("LIVE", "/live"),
            ("UP TO DATE", "/up_to_date"),
            ("LAST SEEN", "/last_seen"),
            ("VERSION", "/version"),
        ],
    };
    format!(
        "revision {}, converged {}\n{}",
        output::cell(body.get("revision")),
        output::cell(body.get("converged")),
        output::render(output::Format::Table, body, &rows)
    )
}

impl Gateways {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        match self {
            Gateways::List => {
                session
                    .show(Call::get("/v1/gateways"), &View::Text(fleet))
                    .await
            }
        }
    }
}
