//! Reading an [`ObjectMeta`] (`metadata`) in one pass: its typed fields, and every other key
//! into [`ObjectMeta::other`].

use serde::{Deserialize, Deserializer};

use super::{CompactString, ObjectMeta, Time, deserialize_time};

impl<'de> Deserialize<'de> for ObjectMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectMetaVisitor)
    }
}

/// A key of `metadata`: one of [`ObjectMeta`]'s typed fields (its index in [`FIELDS`]), or any
/// other (kept in `other`).
enum MetaKey {
    Typed(usize),
    Other(String),
}

/// [`ObjectMeta`]'s typed fields.
#[derive(Clone, Copy)]
enum MetaField {
    Name,
    GenerateName,
    Namespace,
    Uid,
    ResourceVersion,
    CreationTimestamp,
    Labels,
    Annotations,
}

/// Each typed field with its wire name, in wire order: the one table of both. A field's index
/// here is its bit in the visitor's "seen" mask.
const FIELDS: [(&str, MetaField); 8] = [
    ("name", MetaField::Name),
    ("generateName", MetaField::GenerateName),
    ("namespace", MetaField::Namespace),
    ("uid", MetaField::Uid),
    ("resourceVersion", MetaField::ResourceVersion),
    ("creationTimestamp", MetaField::CreationTimestamp),
    ("labels", MetaField::Labels),
    ("annotations", MetaField::Annotations),
];

fn typed_field(key: &str) -> Option<usize> {
    FIELDS.iter().position(|(name, _)| *name == key)
}

impl<'de> Deserialize<'de> for MetaKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = MetaKey;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a metadata field name")
            }

            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<MetaKey, E> {
                Ok(typed_field(key).map_or_else(|| MetaKey::Other(key.to_owned()), MetaKey::Typed))
            }

            fn visit_string<E: serde::de::Error>(self, key: String) -> Result<MetaKey, E> {
                Ok(typed_field(&key).map_or(MetaKey::Other(key), MetaKey::Typed))
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

/// A `metav1.Time` value read as [`super::metav1_time::deserialize`] reads it.
struct WireTime(Option<Time>);

impl<'de> Deserialize<'de> for WireTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_time(d).map(WireTime)
    }
}

struct ObjectMetaVisitor;

impl<'de> serde::de::Visitor<'de> for ObjectMetaVisitor {
    type Value = ObjectMeta;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("struct ObjectMeta")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ObjectMeta, A::Error> {
        let mut meta = ObjectMeta::default();
        let mut seen = 0u8;
        while let Some(key) = map.next_key::<MetaKey>()? {
            let index = match key {
                MetaKey::Typed(index) => index,
                MetaKey::Other(key) => {
                    let value = map.next_value::<serde_json::Value>()?;
                    meta.other.insert(key, value);
                    continue;
                }
            };
            let (name, field) = FIELDS[index];
            let bit = 1u8 << index;
            if seen & bit != 0 {
                return Err(serde::de::Error::duplicate_field(name));
            }
            seen |= bit;
            let string =
                |map: &mut A| Ok::<_, A::Error>(map.next_value::<Option<CompactString>>()?.unwrap_or_default());
            match field {
                MetaField::Name => meta.name = string(&mut map)?,
                MetaField::GenerateName => meta.generate_name = string(&mut map)?,
                MetaField::Namespace => meta.namespace = string(&mut map)?,
                MetaField::Uid => meta.uid = string(&mut map)?,
                MetaField::ResourceVersion => meta.resource_version = string(&mut map)?,
                MetaField::CreationTimestamp => meta.creation_timestamp = map.next_value::<WireTime>()?.0,
                MetaField::Labels => meta.labels = map.next_value::<Option<_>>()?.unwrap_or_default(),
                MetaField::Annotations => meta.annotations = map.next_value::<Option<_>>()?.unwrap_or_default(),
            }
        }
        Ok(meta)
    }
}
