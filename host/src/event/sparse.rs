//! [`Sparse`]: a field that costs one pointer while empty, for the rarely set parts of an
//! [`Event`](super::Event).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// A value that costs one null pointer while it is empty, which the rarely set parts of an
/// [`Event`](super::Event) almost always are (labels, annotations, the other metadata fields), and one box
/// once it holds something. An event is carried through every queue, cache and batch, so the
/// bytes it does not spend on what it does not hold are bytes no pass reads or frees.
///
/// Reads deref to the `T` (a shared empty one while unset); the first write through
/// [`DerefMut`](std::ops::DerefMut) boxes an empty `T`. Compares, prints and (de)serialises
/// as the `T` itself, so the wire form is unchanged; deserialising an empty `T` keeps it unset.
#[derive(Clone, Default)]
pub struct Sparse<T: Empty>(Option<Box<T>>);

/// A type with a shared empty value, for [`Sparse`].
pub trait Empty: Default + 'static {
    /// The empty value every unset [`Sparse`] derefs to.
    fn empty() -> &'static Self;
    /// Whether this value is empty (an unset [`Sparse`] and a [`Sparse`] of it are equal).
    fn is_empty_value(&self) -> bool;
}

impl Empty for BTreeMap<String, String> {
    fn empty() -> &'static Self {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        &EMPTY
    }

    fn is_empty_value(&self) -> bool {
        self.is_empty()
    }
}

impl Empty for serde_json::Map<String, serde_json::Value> {
    fn empty() -> &'static Self {
        static EMPTY: std::sync::LazyLock<serde_json::Map<String, serde_json::Value>> =
            std::sync::LazyLock::new(serde_json::Map::new);
        &EMPTY
    }

    fn is_empty_value(&self) -> bool {
        self.is_empty()
    }
}

impl<T: Empty> Sparse<T> {
    /// Whether the value is empty (unset, or set and emptied since).
    pub fn is_empty(&self) -> bool {
        self.0.as_deref().is_none_or(T::is_empty_value)
    }

    /// The value, an empty `T` when unset.
    pub fn into_inner(self) -> T {
        self.0.map_or_else(T::default, |b| *b)
    }
}

impl<T: Empty> From<T> for Sparse<T> {
    fn from(value: T) -> Self {
        Self((!value.is_empty_value()).then(|| Box::new(value)))
    }
}

impl<T: Empty + FromIterator<A>, A> FromIterator<A> for Sparse<T> {
    fn from_iter<I: IntoIterator<Item = A>>(iter: I) -> Self {
        Self::from(T::from_iter(iter))
    }
}

impl<T: Empty> std::ops::Deref for Sparse<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_deref().unwrap_or_else(|| T::empty())
    }
}

impl<T: Empty> std::ops::DerefMut for Sparse<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(Box::default)
    }
}

impl<'a, T: Empty> IntoIterator for &'a Sparse<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        (**self).into_iter()
    }
}

impl<T: Empty + PartialEq> PartialEq for Sparse<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Empty + std::fmt::Debug> std::fmt::Debug for Sparse<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: Empty + Serialize> Serialize for Sparse<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de, T: Empty + Deserialize<'de>> Deserialize<'de> for Sparse<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Self::from)
    }
}
