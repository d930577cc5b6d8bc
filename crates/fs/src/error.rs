//! An operation's failure: the errno its caller (the kernel, a command) gets and, for a
//! failure of the store underneath (I/O, damage, a full host), what failed. It is logged
//! once, where it leaves the engine (the FUSE adapter, the control socket), not where it is
//! made; refusals the caller expects (ENOENT, EEXIST, EROFS...) carry no context and are
//! not logged.

use std::fmt;

#[derive(Clone, Debug)]
pub struct FsError {
    errno: i32,
    context: Option<Box<str>>,
}

/// An engine operation's result.
pub type FsResult<T> = std::result::Result<T, FsError>;

impl FsError {
    /// A refusal with this errno and nothing more to say.
    pub const fn new(errno: i32) -> FsError {
        FsError { errno, context: None }
    }

    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// What failed, for a failure of the store underneath.
    pub fn context(&self) -> Option<&str> {
        self.context.as_deref()
    }

    /// The same errno, saying what failed.
    pub fn with(mut self, what: impl fmt::Display) -> FsError {
        self.context = Some(match self.context {
            Some(c) => format!("{what}: {c}").into(),
            None => what.to_string().into(),
        });
        self
    }
}

/// A failure of the store underneath: its errno, and its text as the context.
impl From<scion_store::Error> for FsError {
    fn from(e: scion_store::Error) -> FsError {
        FsError {
            errno: e.errno(),
            context: Some(e.to_string().into()),
        }
    }
}

/// Two failures are the same when their errnos are: the context says more to a person, not
/// something else to a program.
impl PartialEq for FsError {
    fn eq(&self, other: &FsError) -> bool {
        self.errno == other.errno
    }
}

impl Eq for FsError {}

impl PartialEq<i32> for FsError {
    fn eq(&self, other: &i32) -> bool {
        self.errno == *other
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.errno);
        // A context is a sentence of its own ("no snapshot named x of /a"): the errno's
        // text after it would only repeat it in the kernel's words.
        match &self.context {
            Some(c) => write!(f, "{c}"),
            None => write!(f, "{text}"),
        }
    }
}

/// A store error as an operation's failure (for `map_err`).
pub(crate) fn eio(e: scion_store::Error) -> FsError {
    FsError::from(e)
}

/// The errnos engine operations answer, as failures: `Err(errno::ENOENT)`.
pub mod errno {
    use super::FsError;
    macro_rules! errnos {
        ($($name:ident),*) => { $(pub const $name: FsError = FsError::new(libc::$name);)* };
    }
    errnos!(
        E2BIG,
        EACCES,
        EBADF,
        EBUSY,
        EEXIST,
        EFBIG,
        EINVAL,
        EIO,
        EISDIR,
        ELOOP,
        EMLINK,
        ENAMETOOLONG,
        ENODATA,
        ENOENT,
        ENOSPC,
        ENOSYS,
        ENOTDIR,
        ENOTEMPTY,
        ENXIO,
        EOPNOTSUPP,
        EPERM,
        ERANGE,
        EROFS,
        ESTALE,
        EXDEV,
        EOVERFLOW,
        ENOTSUP,
        EAGAIN,
        EPROTO,
        ENODEV
    );
}
