//! `TaskError`: why a migration's background task stopped, naming what it was doing and on which server.
//!
//! The message is logged and stored as the migration's `error`, shown by `GET .../migrations/{id}`; a Redis error
//! cannot be passed up without the command and server it belongs to (there is no `From<RedisError>`).

use redis::RedisError;

use crate::db::DbError;
use crate::tls::TlsError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskError {
    /// The task's own bookkeeping in Postgres (its row, its lock, the resources' URLs).
    #[error(transparent)]
    Db(#[from] DbError),
    /// A command (or the connection) failed on one server.
    #[error("{server}: {operation}: {cause}")]
    Redis {
        operation: &'static str,
        server: String,
        #[source]
        cause: RedisError,
    },
    /// No TCP connection to the server (refused, unreachable, timed out).
    #[error("{server}: connecting: {cause}")]
    Connect {
        server: String,
        #[source]
        cause: std::io::Error,
    },
    /// The TLS session with the server failed, or the resource's TLS options are unusable.
    #[error("{server}: {cause}")]
    Tls {
        server: String,
        #[source]
        cause: TlsError,
    },
    /// A server answered, but not as a healthy deployment does.
    #[error("{server}: {problem}")]
    Unexpected { server: String, problem: String },
    /// A resource URL the task cannot work with.
    #[error("{0}")]
    Unusable(String),
    /// A resource of one side of the migration could not be reached; the URL is shown without its password.
    #[error("{side} deployment: resource {url}: {cause}")]
    Resource {
        side: &'static str,
        url: String,
        #[source]
        cause: Box<TaskError>,
    },
    #[error("the route names resource '{0}', which no longer exists")]
    UnknownResource(String),
    #[error("migration {0}: the id does not fit the task lock's key")]
    LockKey(i64),
    #[error("encoding the task's cursor: {0}")]
    Cursor(#[source] serde_json::Error),
    /// The rollback repaired old but could not return the route to it (retried by the next run).
    #[error("returning the route to old: {0}")]
    Conclude(String),
}

pub(crate) type TaskResult<T> = Result<T, TaskError>;

impl TaskError {
    pub(crate) fn redis(operation: &'static str, server: &str, cause: RedisError) -> TaskError {
        TaskError::Redis {
            operation,
            server: server.to_string(),
            cause,
        }
    }

    /// `url` is shown as it is: mask its password first.
    pub(crate) fn resource(side: &'static str, url: String, cause: TaskError) -> TaskError {
        TaskError::Resource {
            side,
            url,
            cause: Box::new(cause),
        }
    }

    pub(crate) fn unexpected(server: &str, problem: impl Into<String>) -> TaskError {
        TaskError::Unexpected {
            server: server.to_string(),
            problem: problem.into(),
        }
    }
}
