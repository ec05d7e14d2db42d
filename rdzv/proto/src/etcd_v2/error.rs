//! etcd's v2 error codes, messages and HTTP statuses, as etcd 3.4's `v2error` package has them.

/// One of etcd's v2 error codes (the `errorCode` of an error body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorCode {
    /// 100: the key does not exist.
    KeyNotFound,
    /// 101: `prevValue` or `prevIndex` did not match.
    TestFailed,
    /// 102: the key is a directory where a file was needed.
    NotFile,
    /// 104: a path component is a file where a directory was needed.
    NotDir,
    /// 105: `prevExist=false` (or a create) on a key that exists.
    NodeExist,
    /// 107: the root cannot be written or deleted.
    RootReadOnly,
    /// 108: a non-recursive delete of a directory with children.
    DirNotEmpty,
    /// 110: the request carried no valid credential.
    Unauthorized,
    /// 201: `prevValue` was given but empty.
    PrevValueRequired,
    /// 202: `ttl` is not a number.
    TtlNaN,
    /// 203: `prevIndex` or `waitIndex` is not a number.
    IndexNaN,
    /// 209: a field has a malformed value (a bool that is not one, a key or value past a limit).
    InvalidField,
    /// 211: a refresh carried a value.
    RefreshValue,
    /// 212: a refresh carried no TTL.
    RefreshTtlRequired,
    /// 300: the server could not apply the write (here: a quota).
    RaftInternal,
    /// 401: `waitIndex` is older than the event history kept.
    EventIndexCleared,
}

impl ErrorCode {
    /// The number etcd sends.
    pub fn number(self) -> u32 {
        match self {
            Self::KeyNotFound => 100,
            Self::TestFailed => 101,
            Self::NotFile => 102,
            Self::NotDir => 104,
            Self::NodeExist => 105,
            Self::RootReadOnly => 107,
            Self::DirNotEmpty => 108,
            Self::Unauthorized => 110,
            Self::PrevValueRequired => 201,
            Self::TtlNaN => 202,
            Self::IndexNaN => 203,
            Self::InvalidField => 209,
            Self::RefreshValue => 211,
            Self::RefreshTtlRequired => 212,
            Self::RaftInternal => 300,
            Self::EventIndexCleared => 401,
        }
    }

    /// etcd's message for the code, word for word.
    pub fn message(self) -> &'static str {
        match self {
            Self::KeyNotFound => "Key not found",
            Self::TestFailed => "Compare failed",
            Self::NotFile => "Not a file",
            Self::NotDir => "Not a directory",
            Self::NodeExist => "Key already exists",
            Self::RootReadOnly => "Root is read only",
            Self::DirNotEmpty => "Directory not empty",
            Self::Unauthorized => "The request requires user authentication",
            Self::PrevValueRequired => "PrevValue is Required in POST form",
            Self::TtlNaN => "The given TTL in POST form is not a number",
            Self::IndexNaN => "The given index in POST form is not a number",
            Self::InvalidField => "Invalid field",
            Self::RefreshValue => "Value provided on refresh",
            Self::RefreshTtlRequired => "A TTL must be provided on refresh",
            Self::RaftInternal => "Raft Internal Error",
            Self::EventIndexCleared => "The event in requested index is outdated and cleared",
        }
    }

    /// The HTTP status etcd answers with (400 unless etcd maps the code otherwise).
    pub fn http_status(self) -> u16 {
        match self {
            Self::KeyNotFound => 404,
            Self::NotFile | Self::DirNotEmpty => 403,
            Self::TestFailed | Self::NodeExist => 412,
            Self::Unauthorized => 401,
            Self::RaftInternal => 500,
            _ => 400,
        }
    }
}

/// An error as etcd's v2 API reports it: `{"errorCode", "message", "cause", "index"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("etcd v2 error {} ({}): {cause} [index {index}]", code.number(), code.message())]
pub struct V2Error {
    /// What went wrong.
    pub code: ErrorCode,
    /// etcd's `cause`: the key, or what was wrong with the request.
    pub cause: String,
    /// The store's index when it happened (0 for a request refused before the store saw it).
    pub index: u64,
}

impl V2Error {
    /// An error about the store at `index`.
    pub fn new(code: ErrorCode, cause: impl Into<String>, index: u64) -> Self {
        Self {
            code,
            cause: cause.into(),
            index,
        }
    }

    /// An error in the request itself (index 0, as etcd sends for a request it did not apply).
    pub fn request(code: ErrorCode, cause: impl Into<String>) -> Self {
        Self::new(code, cause, 0)
    }
}
