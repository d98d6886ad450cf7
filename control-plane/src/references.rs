//! A route table's references to registered resources: listing them, and inlining their URLs for gateways.
//!
//! A reference without `://` is a resource name; anything else is an inline URL and is left alone.

use std::collections::{BTreeSet, HashMap};

use switchyard_schemas::{RouteTable, SplitTarget, Target};

pub(crate) fn is_name(reference: &str) -> bool {
    !reference.contains("://")
}

fn references_mut(target: &mut Target) -> Vec<&mut String> {
    match target {
        Target::Resource(reference) => vec![reference],
        Target::Split(SplitTarget { read, write }) => write
            .resources
            .iter_mut()
            .chain(read.iter_mut().flat_map(|r| r.resources.iter_mut()))
            .collect(),
    }
}

/// Every resource name the table refers to, sorted and without repeats.
pub(crate) fn names(route: &RouteTable) -> Vec<String> {
    route
        .targets()
        .into_iter()
        .flat_map(|t| t.write_resources().iter().chain(t.read_resources()))
        .filter(|r| is_name(r))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Replaces every resource name by its URL; `Err` names the first reference `urls` does not know.
pub(crate) fn inline(route: &mut RouteTable, urls: &HashMap<String, String>) -> Result<(), String> {
    for target in route.targets_mut() {
        for reference in references_mut(target) {
            if is_name(reference) {
                *reference = urls
                    .get(reference.as_str())
                    .ok_or(reference.clone())?
                    .clone();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_inlines_names() {
        let mut route: RouteTable = serde_json::from_str(
            r#"{"type":"sharded","shards":[
                {"name":"a","target":"main"},
                {"name":"b","target":{"read":{"resources":["replicas","redis://h:2"]},"write":{"resources":["main","backup"]}}}]}"#,
        )
        .unwrap();
        assert_eq!(names(&route), vec!["backup", "main", "replicas"]);
        let urls: HashMap<String, String> = [("main", "redis://m:1"), ("backup", "redis://b:1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            inline(&mut route.clone(), &urls),
            Err("replicas".to_string())
        );
        let mut urls = urls;
        urls.insert("replicas".into(), "redis-cluster-slaves://r:1".into());
        inline(&mut route, &urls).unwrap();
        let json = serde_json::to_string(&route).unwrap();
        assert!(
            !json.contains("\"main\"")
                && json.contains("redis://b:1")
                && json.contains("redis://h:2")
        );
    }
}
