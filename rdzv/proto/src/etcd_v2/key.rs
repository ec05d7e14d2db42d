//! Keys as etcd's v2 store cleans them, and their path components.

/// Go's `path.Clean("/" + key)`: one leading slash, no empty, `.` or `..` components.
pub fn clean_key(key: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in key.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The names along a cleaned key, root first (none for the root).
pub(crate) fn components(key: &str) -> Vec<&str> {
    key.split('/').filter(|c| !c.is_empty()).collect()
}

/// The last name of a cleaned key (empty for the root).
pub(crate) fn last_name(key: &str) -> String {
    components(key)
        .last()
        .map(|c| (*c).to_owned())
        .unwrap_or_default()
}
