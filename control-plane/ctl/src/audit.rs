//! `switchyard-ctl audit`: the log of every change, newest first (`/v1/audit`).

use clap::Subcommand;

use crate::client::{Call, Outcome};
use crate::output::View;
use crate::session::Session;

#[derive(Subcommand)]
pub(crate) enum Audit {
    /// Changes, newest first.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl audit list --tenant shop --limit 20\n  \
        switchyard-ctl audit list --since 2026-01-01T00:00:00Z -o json")]
    List {
        /// Only changes to this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Only changes at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Only entries with a smaller id (the next page).
        #[arg(long)]
        before: Option<i64>,
        /// At most this many (default 100).
        #[arg(long)]
        limit: Option<i64>,
    },
}

impl Audit {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        let Audit::List {
            tenant,
            since,
            before,
            limit,
        } = self;
        let call = Call::get("/v1/audit")
            .query("tenant", tenant)
            .query("since", since)
            .query("before", before)
            .query("limit", limit);
        let view = View::Rows {
            list: "/entries",
            columns: &[
                ("ID", "/id"),
                ("REVISION", "/revision"),
                ("AT", "/at"),
                ("ACTOR", "/actor"),
                ("ACTION", "/action"),
                ("OBJECT", "/object"),
            ],
        };
        session.show(call, &view).await
    }
}
