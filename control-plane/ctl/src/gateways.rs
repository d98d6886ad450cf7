//! `switchyard-ctl gateways`: the fleet, the revision each gateway serves, and whether all live ones are current
//! (`/v1/gateways`).

use clap::Subcommand;
use serde_json::Value;

use reqwest::Method;

use crate::client::{Call, Outcome};
use crate::output::{self, View};
use crate::session::{Change, Session};

#[derive(Subcommand)]
pub(crate) enum Gateways {
    /// Every gateway heard from, and whether every live one serves the current revision.
    #[command(after_help = "Example:\n  switchyard-ctl gateways list -o json")]
    List,
    /// Forget a gateway at once (one that is gone for good), instead of waiting for its retention to pass.
    #[command(after_help = "Example:\n  switchyard-ctl gateways delete gw-1 --dry-run")]
    Delete { id: String },
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
            ("FOLLOWING", "/following/url"),
            ("AT", "/following/address"),
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
            Gateways::Delete { id } => {
                let call = Call::new(Method::DELETE, format!("/v1/gateways/{id}"));
                session
                    .change(Change::new(call, View::deleted()))
                    .await
                    .map(drop)
            }
        }
    }
}
