//! What the control plane's route guard reports of a route change: how many of the tenant's keys it would leave
//! where the gateways no longer look for them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a change of `PUT .../route` or a rollback would look for the tenant's keys, against where they are kept
/// now. A change that moves keys is refused (409 `keys_would_move`) unless it says `force`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KeyMoves {
    /// The estimated fraction (0 to 1) of the tenant's keys that would no longer be found.
    pub fraction: f64,
    /// How the fraction was found: `exact` (over the whole hash space or every bucket), `sampled` (65,536 keys
    /// placed by both tables, when their hash algorithms or bucket counts differ), or `none` (no change of where
    /// keys live: a first route, or the same places).
    pub estimate: MoveEstimate,
    /// Each change of where keys are kept, the largest first.
    pub moves: Vec<KeyMove>,
    /// Databases the tenant would give up (`databases` made smaller, e.g. "2-3"): their keys are no longer
    /// reachable, whatever their number (not counted in `fraction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub databases_dropped: Option<String>,
}

impl KeyMoves {
    /// A change that moves nothing.
    pub fn none() -> KeyMoves {
        KeyMoves {
            fraction: 0.0,
            estimate: MoveEstimate::None,
            moves: Vec::new(),
            databases_dropped: None,
        }
    }

    /// Whether the change leaves any key where it is no longer found.
    pub fn strands_keys(&self) -> bool {
        !self.moves.is_empty() || self.databases_dropped.is_some()
    }

    /// One line for people: "17.5% of the tenant's keys would no longer be found (exact)".
    pub fn summary(&self) -> String {
        let mut text = match self.estimate {
            MoveEstimate::None => "no key would move".to_string(),
            estimate => format!(
                "{} of the tenant's keys would no longer be found ({})",
                percent(self.fraction),
                estimate.as_str()
            ),
        };
        if let Some(dropped) = &self.databases_dropped {
            text.push_str(&format!(
                "; the keys of databases {dropped} would no longer be reachable"
            ));
        }
        text
    }
}

/// A fraction as a percentage with one decimal, never rounding a moved key down to "0.0%" nor up to "100.0%".
pub fn percent(fraction: f64) -> String {
    let tenths = (fraction * 1000.0).round();
    let tenths = match tenths {
        t if t <= 0.0 && fraction > 0.0 => 1.0,
        t if t >= 1000.0 && fraction < 1.0 => 999.0,
        t => t,
    };
    format!("{:.1}%", tenths / 10.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MoveEstimate {
    Exact,
    Sampled,
    None,
}

impl MoveEstimate {
    pub fn as_str(self) -> &'static str {
        match self {
            MoveEstimate::Exact => "exact",
            MoveEstimate::Sampled => "sampled",
            MoveEstimate::None => "none",
        }
    }
}

/// Keys kept in `from` that the new table would look for in `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KeyMove {
    /// Where they are kept: `shard 'a': main` (the shard's first write resource; URLs without passwords).
    pub from: String,
    /// Where they would be looked for.
    pub to: String,
    /// Their fraction of all the tenant's keys.
    pub fraction: f64,
}
