//! What the metadata cache ([`crate::k8s::enrich`]) attached to an event about its involved
//! object: the cluster's name, the object's labels and annotations (those whose keys the
//! configured globs select), the top owner reached through the controller `ownerReferences`,
//! and the node a Pod runs on with its labels.
//!
//! Serialised as the `"enrichment"` object beside `"event"` in the JSON-lines and webhook sinks:
//! `{"cluster", "labels", "annotations", "owner": {"kind","name","uid","apiVersion"}, "node":
//! {"name","labels"}}`; a key whose enrichment is not configured (or found nothing) is absent.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The enrichment of one event. Keys not configured are `None` (absent on the wire).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrichment {
    /// The cluster's name (`[enrich] cluster`, `--cluster-name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The involved object's labels whose keys match `[enrich] labels`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// The involved object's annotations whose keys match `[enrich] annotations`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// The top controller owner (`[enrich] owner = true`): the involved object's controller
    /// reference followed up to an object without one (Pod → ReplicaSet → Deployment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// A Pod's node (`[enrich] node_labels`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<Node>,
}

impl Enrichment {
    /// Nothing attached (no key configured found anything).
    pub fn is_empty(&self) -> bool {
        *self == Enrichment::default()
    }
}

/// An owner, as a `metav1.OwnerReference` names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    /// `kind` (`Deployment`).
    pub kind: String,
    /// `name`.
    pub name: String,
    /// `uid`.
    pub uid: String,
    /// `apiVersion` (`apps/v1`).
    pub api_version: String,
}

/// The node a Pod is scheduled on (`spec.nodeName`) and its labels matching
/// `[enrich] node_labels`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The node's name.
    pub name: String,
    /// Its selected labels (empty when the Node was not found).
    pub labels: BTreeMap<String, String>,
}

/// The enrichment an [`Event`](super::Event) carries beside it from the source through the
/// Broadcaster to the sinks: metadata about the event, not part of its value (any two compare
/// equal, never serialised with the event), so that the correlator's output stays as client-go's.
/// One pointer wide; `None` while enrichment is off or found nothing.
#[derive(Debug, Clone, Default)]
pub struct Enriched(Option<Arc<Enrichment>>);

impl Enriched {
    /// `enrichment`, shared.
    pub fn new(enrichment: Arc<Enrichment>) -> Self {
        Self(Some(enrichment))
    }

    /// The enrichment attached, if any.
    pub fn get(&self) -> Option<&Enrichment> {
        self.0.as_deref()
    }

    /// The enrichment as one line of JSON, as the publish tier carries it to the workers in a
    /// NATS header (`Eventpipe-Enrichment`); `None` without one.
    pub fn to_header(&self) -> Option<String> {
        self.get().map(|e| serde_json::to_string(e).expect("an enrichment serialises"))
    }

    /// The enrichment [`to_header`](Self::to_header) wrote.
    ///
    /// # Errors
    /// The JSON error of a text that is not one.
    pub fn from_header(text: &str) -> Result<Self, serde_json::Error> {
        Ok(Self::new(Arc::new(serde_json::from_str(text)?)))
    }
}

impl PartialEq for Enriched {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enrichment_goes_through_its_header_whole() {
        let enrichment = Enrichment {
            cluster: Some("prod-eu".into()),
            labels: Some(BTreeMap::from([("team".into(), "payments".into())])),
            annotations: None,
            owner: Some(Owner {
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "u1".into(),
                api_version: "apps/v1".into(),
            }),
            node: Some(Node { name: "node-7".into(), labels: BTreeMap::from([("zone".into(), "a".into())]) }),
        };
        let header = Enriched::new(Arc::new(enrichment.clone())).to_header().unwrap();
        assert!(!header.contains('\n'), "one header line: {header}");
        assert!(header.contains(r#""apiVersion":"apps/v1""#), "{header}");
        assert_eq!(Enriched::from_header(&header).unwrap().get(), Some(&enrichment));
        assert_eq!(Enriched::default().to_header(), None);
        assert!(Enriched::from_header("{not json").is_err());
    }
}
