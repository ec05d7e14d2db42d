//! A job's published configuration ([`Published`]): entries sorted by key in one shared
//! list, so that every welcome of every round carries the same copy (a reference count, not
//! the job's megabytes once per member); an entry published while welcomes still hold the
//! list copies it once, and later welcomes share the new one.

use std::sync::Arc;

/// The entries, sorted by key.
pub(crate) type Entries = Arc<Vec<(String, Vec<u8>)>>;

/// A job's published configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct Published {
    entries: Entries,
    /// Keys and values, bytes.
    bytes: usize,
}

impl Published {
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// Entry `key`'s value.
    pub(crate) fn get(&self, key: &str) -> Option<&[u8]> {
        self.find(key).ok().map(|i| self.entries[i].1.as_slice())
    }

    /// How many entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Keys and values, bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The keys, sorted.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// Sets entry `key` (copying the list first only while a welcome still holds it).
    pub(crate) fn insert(&mut self, key: String, value: Vec<u8>) {
        let at = self.find(&key);
        let list = Arc::make_mut(&mut self.entries);
        match at {
            Ok(i) => {
                self.bytes = self.bytes - list[i].1.len() + value.len();
                list[i].1 = value;
            }
            Err(i) => {
                self.bytes += key.len() + value.len();
                list.insert(i, (key, value));
            }
        }
    }

    /// The list to put in a welcome (shared).
    pub(crate) fn shared(&self) -> Entries {
        self.entries.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welcomes_share_one_copy_until_an_entry_changes() {
        let mut p = Published::default();
        p.insert("b".into(), vec![2; 10]);
        p.insert("a".into(), vec![1; 5]);
        assert_eq!(p.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((p.len(), p.bytes()), (2, 17));
        let w1 = p.shared();
        let w2 = p.shared();
        assert!(Arc::ptr_eq(&w1, &w2));
        // Replacing a value while welcomes hold the list: they keep theirs.
        p.insert("a".into(), vec![9; 3]);
        assert_eq!(p.get("a"), Some(&[9u8; 3][..]));
        assert_eq!(w1[0].1, vec![1; 5]);
        assert_eq!(p.bytes(), 15);
        assert!(!Arc::ptr_eq(&w1, &p.shared()));
        // Nothing holds it now: changed in place.
        drop((w1, w2));
        let before = Arc::as_ptr(&p.entries);
        p.insert("c".into(), vec![]);
        assert_eq!(Arc::as_ptr(&p.entries), before);
        assert_eq!(p.get("z"), None);
    }
}
