//! The name and version a component was stamped with, so logs can say which
//! build runs on a shard and not only its hash. They are the outermost
//! component's `component-name` section and `version` custom section, as
//! `wasm-tools metadata add --name NAME --version VERSION` writes them (the
//! OCI-style metadata of the WebAssembly tool chain).

use wasmparser::{ComponentName, KnownCustom, Parser, Payload};

/// What the component says about itself; either part may be missing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComponentMetadata {
    /// The `component-name` section.
    pub name: Option<String>,
    /// The `version` section.
    pub version: Option<String>,
}

impl ComponentMetadata {
    /// Reads the outermost component's sections; nested modules and
    /// components (the ones the tool chain adds) are skipped. A malformed
    /// binary gives what was read before the fault: the load checks report it.
    pub fn read(bytes: &[u8]) -> Self {
        let mut metadata = Self::default();
        // 1 while in the outermost component; each nested module or component adds one.
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(bytes) {
            let Ok(payload) = payload else { break };
            match payload {
                Payload::Version { .. } => depth += 1,
                Payload::End(_) => depth = depth.saturating_sub(1),
                Payload::CustomSection(section) if depth == 1 => match section.as_known() {
                    KnownCustom::ComponentName(names) => {
                        let component = names.into_iter().flatten().find_map(|name| match name {
                            ComponentName::Component { name, .. } => Some(name.to_owned()),
                            _ => None,
                        });
                        metadata.name = component.or(metadata.name);
                    }
                    KnownCustom::Unknown if section.name() == "version" => {
                        metadata.version = std::str::from_utf8(section.data()).ok().map(str::to_owned);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        metadata
    }

    /// `name@version`, `name`, or `@version`; `None` when the component has neither.
    pub fn label(&self) -> Option<String> {
        match (&self.name, &self.version) {
            (None, None) => None,
            (name, version) => Some(format!(
                "{}{}",
                name.as_deref().unwrap_or(""),
                version.as_deref().map(|v| format!("@{v}")).unwrap_or_default()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component with `version` and `component-name` sections, and a
    /// nested module that has a name of its own.
    fn stamped(name: &str, version: &str) -> Vec<u8> {
        let mut bytes = wat::parse_str(r#"(component (core module $inner))"#).unwrap();
        // custom section: id 0, size, name, payload
        let section = |name: &str, payload: &[u8]| {
            let mut body = vec![name.len() as u8];
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(payload);
            let mut out = vec![0u8, body.len() as u8];
            out.extend(body);
            out
        };
        // component-name: subsection 0 (the component's own name), size, name
        let mut names = vec![0u8, (name.len() + 1) as u8, name.len() as u8];
        names.extend_from_slice(name.as_bytes());
        bytes.extend(section("component-name", &names));
        bytes.extend(section("version", version.as_bytes()));
        bytes
    }

    #[test]
    fn the_outer_components_name_and_version_are_read() {
        let metadata = ComponentMetadata::read(&stamped("counter", "2.1.0"));
        assert_eq!(metadata, ComponentMetadata { name: Some("counter".into()), version: Some("2.1.0".into()) });
        assert_eq!(metadata.label().as_deref(), Some("counter@2.1.0"));
    }

    #[test]
    fn a_component_without_metadata_has_no_label() {
        let bare = wat::parse_str(r#"(component (core module $m (@custom "version" "9.9.9")))"#).unwrap();
        let metadata = ComponentMetadata::read(&bare);
        assert_eq!(metadata, ComponentMetadata::default(), "a nested module's section is not the component's");
        assert_eq!(metadata.label(), None);
        assert_eq!(ComponentMetadata::read(b"not wasm"), ComponentMetadata::default());
    }
}
