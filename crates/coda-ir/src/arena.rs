//! A typed arena: values are appended once and named by [`Handle`]s.
//!
//! Handles are plain indices, so they are `Copy`, hashable and ordered; a
//! handle from one arena must not be used with another (the verifier checks
//! range, not provenance). Spans live in a side table beside the items.

use coda_diagnostics::Span;
use std::fmt;
use std::marker::PhantomData;

/// An index into an [`Arena<T>`].
pub struct Handle<T> {
    index: u32,
    marker: PhantomData<fn() -> T>,
}

impl<T> Handle<T> {
    /// The handle of the `index`-th item.
    pub fn from_index(index: usize) -> Self {
        Handle { index: u32::try_from(index).unwrap_or(u32::MAX), marker: PhantomData }
    }

    /// The position in the arena.
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Handle<T> {}
impl<T> PartialEq for Handle<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}
impl<T> Eq for Handle<T> {}
impl<T> PartialOrd for Handle<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Handle<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.index.cmp(&other.index)
    }
}
impl<T> std::hash::Hash for Handle<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.index.hash(state);
    }
}
impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.index)
    }
}
impl<T> fmt::Display for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.index)
    }
}

/// Append-only storage with a span per item.
#[derive(Debug, Clone)]
pub struct Arena<T> {
    items: Vec<T>,
    spans: Vec<Span>,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena { items: Vec::new(), spans: Vec::new() }
    }
}

impl<T> Arena<T> {
    /// Appends an item and returns its handle.
    pub fn append(&mut self, item: T, span: Span) -> Handle<T> {
        self.items.push(item);
        self.spans.push(span);
        Handle::from_index(self.items.len() - 1)
    }

    /// The item behind a handle. Panics on a foreign handle, which is a bug.
    pub fn get(&self, handle: Handle<T>) -> &T {
        &self.items[handle.index()]
    }

    /// The item behind a handle, if the handle is in range.
    pub fn try_get(&self, handle: Handle<T>) -> Option<&T> {
        self.items.get(handle.index())
    }

    /// The span recorded with an item.
    pub fn span(&self, handle: Handle<T>) -> Span {
        self.spans.get(handle.index()).copied().unwrap_or_default()
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items with their handles, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle<T>, &T)> {
        self.items.iter().enumerate().map(|(i, item)| (Handle::from_index(i), item))
    }
}

impl<T> std::ops::Index<Handle<T>> for Arena<T> {
    type Output = T;
    fn index(&self, handle: Handle<T>) -> &T {
        self.get(handle)
    }
}
