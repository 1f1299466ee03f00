//! Reading an object's metadata in one pass over its JSON, keeping positions
//! rather than copies.
//!
//! Each metadata string the cache keeps (name, namespace, uid,
//! resourceVersion, label keys and values, owner references) is a [`Span`]:
//! where it sits in the object's JSON, which is kept anyway. Only a string the
//! JSON escapes is copied, unescaped, into the object's side text. The same
//! pass notes where the parts a transform may strip are ([`Strippable`]).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::transform::Key;

/// Where a metadata string is: a range of the object's JSON or, with
/// [`Span::UNESCAPED`] set in `at`, of its unescaped side text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) at: u32,
    pub(super) len: u32,
}

impl Span {
    pub(super) const UNESCAPED: u32 = 1 << 31;

    /// The string this span names, in `json` or `unescaped`.
    pub(super) fn text<'a>(self, json: &'a str, unescaped: &'a str) -> &'a str {
        let (text, at) = if self.at & Self::UNESCAPED == 0 {
            (json, self.at)
        } else {
            (unescaped, self.at & !Self::UNESCAPED)
        };
        let at = at as usize;
        text.get(at..at + self.len as usize).unwrap_or_default()
    }

    /// The span once the sorted byte ranges `removals` are gone from the JSON
    /// before it; a span never lies inside a removal.
    pub(super) fn shifted(self, removals: &[Range<usize>]) -> Self {
        if self.at & Self::UNESCAPED != 0 {
            return self;
        }
        let at = self.at as usize;
        let removed: usize = removals
            .iter()
            .filter(|removal| removal.end <= at)
            .map(ExactSizeIterator::len)
            .sum();
        Self {
            at: (at - removed) as u32,
            len: self.len,
        }
    }
}

/// An owner reference, as spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Owner {
    pub(super) api_version: Span,
    pub(super) kind: Span,
    pub(super) name: Span,
    pub(super) uid: Span,
    pub(super) controller: bool,
}

/// The metadata the cache keeps, as spans.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub(super) name: Option<Span>,
    pub(super) namespace: Option<Span>,
    pub(super) uid: Option<Span>,
    pub(super) resource_version: Option<Span>,
    pub(super) generation: Option<i64>,
    pub(super) deletion_timestamp: Option<Span>,
    pub(super) labels: Vec<(Span, Span)>,
    pub(super) owners: Vec<Owner>,
    pub(super) strip: Strippable,
}

/// One parse of one object: its text, what was found so far, and the
/// unescaped copies of strings the text escapes.
pub(super) struct Parse<'j> {
    json: &'j str,
    pub(super) found: Parsed,
    pub(super) unescaped: String,
    /// The JSON is known to be well-formed: the parse ends with `metadata`.
    valid: bool,
    /// The parse ended with `metadata`, before the end of the text.
    ended: bool,
}

impl<'j> Parse<'j> {
    /// A parse of `json`, which it checks to its end.
    pub(super) fn new(json: &'j str) -> Self {
        Self {
            json,
            found: Parsed::default(),
            unescaped: String::new(),
            valid: false,
            ended: false,
        }
    }

    /// A parse of `json` already checked to be well-formed (a value the
    /// decoder of the API server's answer delimited): it reads no further than
    /// `metadata`, which servers write before `spec` and `status`, the bulk of
    /// an object.
    pub(super) fn of_valid(json: &'j str) -> Self {
        Self {
            valid: true,
            ..Self::new(json)
        }
    }

    /// Reads `json`'s metadata.
    ///
    /// # Errors
    ///
    /// When the JSON is malformed or has no `metadata` object.
    pub(super) fn run(mut self) -> Result<Self, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(self.json);
        match ObjectSeed(&mut self).deserialize(&mut deserializer) {
            // The seed stopped the parse once it had the metadata.
            Err(_) if self.ended => {}
            read => {
                read?;
                deserializer.end()?;
            }
        }
        Ok(self)
    }

    /// The span of `text`: where it is in the JSON when borrowed from it,
    /// else a copy in the unescaped side text.
    fn span(&mut self, text: &str) -> Span {
        let offset = (text.as_ptr() as usize).wrapping_sub(self.json.as_ptr() as usize);
        if offset.checked_add(text.len()).is_some_and(|end| end <= self.json.len()) {
            return Span {
                at: offset as u32,
                len: text.len() as u32,
            };
        }
        let at = self.unescaped.len() as u32 | Span::UNESCAPED;
        self.unescaped.push_str(text);
        Span {
            at,
            len: text.len() as u32,
        }
    }

    /// The text of a span found so far.
    pub(super) fn text(&self, span: Span) -> &str {
        span.text(self.json, &self.unescaped)
    }
}

/// Parses an object's top level, reading only `metadata`.
struct ObjectSeed<'p, 'j>(&'p mut Parse<'j>);

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut metadata = false;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.as_str() == "metadata" {
                map.next_value_seed(MetadataSeed(&mut *self.0))?;
                if self.0.valid {
                    self.0.ended = true;
                    return Err(de::Error::custom("parse ended after the metadata"));
                }
                metadata = true;
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        if metadata {
            Ok(())
        } else {
            Err(de::Error::missing_field("metadata"))
        }
    }
}

/// Parses `metadata`: the spans the cache keeps, and where in the whole
/// object's text its strippable parts are.
struct MetadataSeed<'p, 'j>(&'p mut Parse<'j>);

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let parse = self.0;
        let json = parse.json;
        let mut fields = Positions::new(json);
        let mut managed_fields = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            fields.field(&key);
            match key.as_str() {
                "name" => parse.found.name = map.next_value_seed(OrNull(Text(parse)))?,
                "namespace" => parse.found.namespace = map.next_value_seed(OrNull(Text(parse)))?,
                "uid" => parse.found.uid = map.next_value_seed(OrNull(Text(parse)))?,
                "resourceVersion" => parse.found.resource_version = map.next_value_seed(OrNull(Text(parse)))?,
                "deletionTimestamp" => parse.found.deletion_timestamp = map.next_value_seed(OrNull(Text(parse)))?,
                "generation" => parse.found.generation = map.next_value()?,
                "labels" => map.next_value_seed(OrNull(LabelsSeed(parse))).map(drop)?,
                "ownerReferences" => map.next_value_seed(OrNull(OwnersSeed(parse))).map(drop)?,
                "managedFields" => {
                    let raw: &RawValue = map.next_value()?;
                    managed_fields = Some((fields.starts.len() - 1, fields.end(raw)));
                }
                "annotations" => {
                    let mut entries = Positions::new(json);
                    let annotations: Annotations<'_> = map.next_value_seed(AnnotationsSeed(&mut entries))?;
                    parse.found.strip.annotations = annotations
                        .0
                        .into_iter()
                        .enumerate()
                        .filter_map(|(index, (name, end))| {
                            let name = name?;
                            let at = entries.offset(name)?;
                            Some((at..at + name.len(), entries.removal(index, end?)?))
                        })
                        .collect();
                    if entries.starts.iter().any(Option::is_none) {
                        parse.found.strip.unknown = true;
                    }
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let strip = &mut parse.found.strip;
        if fields.starts.iter().any(Option::is_none) {
            strip.unknown = true;
        }
        if let Some((index, end)) = managed_fields {
            strip.managed_fields = end.and_then(|end| fields.removal(index, end));
            strip.unknown |= strip.managed_fields.is_none();
        }
        Ok(())
    }
}

/// What `S` reads, or `None` for `null`.
struct OrNull<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OrNull<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OrNull<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(deserializer).map(Some)
    }
}

/// A string, as a span.
struct Text<'p, 'j>(&'p mut Parse<'j>);

impl<'de> DeserializeSeed<'de> for Text<'_, '_> {
    type Value = Span;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Span, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Text<'_, '_> {
    type Value = Span;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Span, E> {
        Ok(self.0.span(text))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Span, E> {
        Ok(self.0.span(text))
    }
}

/// `metadata.labels`, into the parse's label spans, sorted by key with the
/// last of a repeated key kept.
struct LabelsSeed<'p, 'j>(&'p mut Parse<'j>);

impl<'de> DeserializeSeed<'de> for LabelsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LabelsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("labels")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let parse = self.0;
        let mut labels = Vec::with_capacity(map.size_hint().unwrap_or(4));
        while let Some(key) = map.next_key_seed(Text(&mut *parse))? {
            if let Some(value) = map.next_value_seed(OrNull(Text(&mut *parse)))? {
                labels.push((key, value));
            }
        }
        // Stable: of a repeated key, the last one written stays last.
        labels.sort_by(|(a, _), (b, _)| parse.text(*a).cmp(parse.text(*b)));
        labels.reverse();
        labels.dedup_by(|(a, _), (b, _)| parse.text(*a) == parse.text(*b));
        labels.reverse();
        parse.found.labels = labels;
        Ok(())
    }
}

/// `metadata.ownerReferences`, into the parse's owners.
struct OwnersSeed<'p, 'j>(&'p mut Parse<'j>);

impl<'de> DeserializeSeed<'de> for OwnersSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for OwnersSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("owner references")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let parse = self.0;
        let mut owners = Vec::with_capacity(seq.size_hint().unwrap_or(1));
        while let Some(owner) = seq.next_element_seed(OwnerSeed(&mut *parse))? {
            owners.push(owner);
        }
        parse.found.owners = owners;
        Ok(())
    }
}

/// One owner reference.
struct OwnerSeed<'p, 'j>(&'p mut Parse<'j>);

impl<'de> DeserializeSeed<'de> for OwnerSeed<'_, '_> {
    type Value = Owner;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Owner, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for OwnerSeed<'_, '_> {
    type Value = Owner;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an owner reference")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Owner, A::Error> {
        let parse = self.0;
        let mut owner = Owner::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let field = match key.as_str() {
                "apiVersion" => &mut owner.api_version,
                "kind" => &mut owner.kind,
                "name" => &mut owner.name,
                "uid" => &mut owner.uid,
                "controller" => {
                    owner.controller = map.next_value::<Option<bool>>()?.unwrap_or(false);
                    continue;
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                    continue;
                }
            };
            *field = map.next_value_seed(OrNull(Text(&mut *parse)))?.unwrap_or_default();
        }
        Ok(owner)
    }
}

/// Where, in an object's JSON, the parts a [`Transform`](super::Transform) may strip are: found
/// while the metadata is parsed, so stripping them is a copy around the removals,
/// with no second parse. Each removal is the field with one of its separating
/// commas, so what is left is valid JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Strippable {
    /// The byte range that removes `metadata.managedFields`.
    pub(super) managed_fields: Option<Range<usize>>,
    /// Each annotation: its key's text, and the byte range that removes it.
    pub(super) annotations: Vec<(Range<usize>, Range<usize>)>,
    /// A name was escaped, so positions are unknown: strip by parsing.
    pub(super) unknown: bool,
}

/// Byte positions of the fields of one JSON object, read from the borrowed
/// field names and raw values of a parse of `json`.
struct Positions<'j> {
    json: &'j str,
    /// Each field's name start (its opening quote); `None` when escaped.
    starts: Vec<Option<usize>>,
}

impl<'j> Positions<'j> {
    fn new(json: &'j str) -> Self {
        Self {
            json,
            starts: Vec::new(),
        }
    }

    /// Where `part` (borrowed from the parsed JSON) starts; `None` if it is not
    /// a slice of it.
    fn offset(&self, part: &str) -> Option<usize> {
        let offset = (part.as_ptr() as usize).checked_sub(self.json.as_ptr() as usize)?;
        (offset + part.len() <= self.json.len()).then_some(offset)
    }

    /// Notes the next field's name.
    fn field(&mut self, key: &Key<'_>) {
        let start = match &key.0 {
            Cow::Borrowed(name) => self.offset(name).and_then(|at| at.checked_sub(1)),
            Cow::Owned(_) => None,
        };
        self.starts.push(start);
    }

    /// The byte range that removes field `index`, whose value ends at `end`: up to the
    /// next field's name, or from the comma before it when it is the last.
    fn removal(&self, index: usize, end: usize) -> Option<Range<usize>> {
        let start = self.starts.get(index).copied().flatten()?;
        if let Some(next) = self.starts.get(index + 1) {
            return Some(start..(*next)?);
        }
        if index == 0 {
            return Some(start..end);
        }
        let before = self.json[..start].trim_end_matches([' ', '\t', '\n', '\r']);
        before.ends_with(',').then(|| before.len() - 1..end)
    }

    /// Where a borrowed raw value ends.
    fn end(&self, raw: &RawValue) -> Option<usize> {
        self.offset(raw.get()).map(|at| at + raw.get().len())
    }
}

/// Annotations in order: each one's name (borrowed, when unescaped) and where
/// its value ends.
struct Annotations<'de>(Vec<(Option<&'de str>, Option<usize>)>);

struct AnnotationsSeed<'p, 'j>(&'p mut Positions<'j>);

impl<'de> de::DeserializeSeed<'de> for AnnotationsSeed<'_, '_> {
    type Value = Annotations<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Annotations<'de>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AnnotationsSeed<'_, '_> {
    type Value = Annotations<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("annotations")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Annotations<'de>, A::Error> {
        let mut found = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            self.0.field(&key);
            let raw: &RawValue = map.next_value()?;
            let name = match key.0 {
                Cow::Borrowed(name) => Some(name),
                Cow::Owned(_) => None,
            };
            found.push((name, self.0.end(raw)));
        }
        Ok(Annotations(found))
    }
}
