use std::fmt;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the block store. `Corrupt` is the one that matters most: it names what was
/// found damaged and where, and the layers above turn it into EIO for the operations that
/// needed the damaged data, never into a crash.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("corrupt {what} at {location}: {detail}")]
    Corrupt {
        what: &'static str,
        location: String,
        detail: String,
    },
    #[error("{0}")]
    Format(String),
    #[error("{0}")]
    InUse(String),
    #[error("no space left on the host filesystem: {0}")]
    NoSpace(String),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        let context = context.into();
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return Error::NoSpace(context);
        }
        Error::Io { context, source }
    }
    pub fn corrupt(what: &'static str, location: impl fmt::Display, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            what,
            location: location.to_string(),
            detail: detail.into(),
        }
    }
    /// The errno an operation that hit this error should return.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NoSpace(_) => libc::ENOSPC,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        }
    }
}
