//! The service kinds relayd knows: the built-ins, and any a custom build registers.
//!
//! A kind maps to a builder that parses the `[service.NAME]` options (with the line of
//! any bad value) and makes the service's factory.

use relay_core::{Kept, ServiceConfig, ServiceFactory};
use relay_svc_builtin::{AcceptConfig, DropConfig, DumpConfig, MarkConfig};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why a service section could not be turned into a factory.
#[derive(Debug)]
pub enum BuildError {
    /// An option is missing, unknown or of the wrong type (carries its position).
    Options(toml::de::Error),
    /// The options parse but make no sense together.
    Invalid(String),
}

type Builder = for<'i> fn(
    toml::de::ValueDeserializer<'i>,
    &str,
    &Kept,
) -> Result<Arc<dyn ServiceFactory>, BuildError>;

fn build<C: ServiceConfig>(
    de: toml::de::ValueDeserializer<'_>,
    name: &str,
    kept: &Kept,
) -> Result<Arc<dyn ServiceFactory>, BuildError> {
    let cfg = <C as serde::Deserialize>::deserialize(de).map_err(BuildError::Options)?;
    cfg.into_factory_kept(name, kept)
        .map_err(|e| BuildError::Invalid(e.to_string()))
}

/// Service kinds by name, and the state they keep from one configuration to the next
/// ([`Kept`]: shared by the registry's clones, so one registry serves a daemon's life).
#[derive(Clone)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Builder>,
    kept: Arc<Kept>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::with_builtins()
    }
}

impl Registry {
    /// An empty registry.
    pub fn empty() -> Registry {
        Registry {
            kinds: BTreeMap::new(),
            kept: Arc::new(Kept::new()),
        }
    }

    /// The kinds relayd ships: `accept`, `drop`, `dump`, `mark`, `compress`, `decompress`,
    /// `encrypt`, `decrypt`, `delay`, `tcpsplit`, `mpls-encap`, `mpls-decap`, `ids`.
    pub fn with_builtins() -> Registry {
        let mut r = Registry::empty();
        r.register::<AcceptConfig>();
        r.register::<DropConfig>();
        r.register::<DumpConfig>();
        r.register::<MarkConfig>();
        r.register::<relay_svc_compress::CompressConfig>();
        r.register::<relay_svc_compress::DecompressConfig>();
        r.register::<relay_svc_crypto::EncryptConfig>();
        r.register::<relay_svc_crypto::DecryptConfig>();
        r.register::<relay_svc_delay::DelayConfig>();
        r.register::<relay_svc_tcpsplit::TcpSplitConfig>();
        r.register::<relay_svc_mpls::EncapConfig>();
        r.register::<relay_svc_mpls::DecapConfig>();
        r.register::<relay_svc_ids::IdsConfig>();
        r
    }

    /// State kept across reloads and shared by the services and the daemon (the ESP
    /// services' SA table that the IKE daemon fills lives here).
    pub fn kept(&self) -> &Arc<Kept> {
        &self.kept
    }

    /// Adds (or replaces) the kind `C::KIND`. This is how a custom service joins relayd.
    pub fn register<C: ServiceConfig + 'static>(&mut self) -> &mut Self {
        self.kinds.insert(C::KIND, build::<C>);
        self
    }

    /// True if `kind` is known.
    pub fn has(&self, kind: &str) -> bool {
        self.kinds.contains_key(kind)
    }

    /// The known kinds, sorted.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.kinds.keys().copied()
    }

    /// Builds the factory of `kind` from its options.
    pub fn build(
        &self,
        kind: &str,
        name: &str,
        options: toml::de::ValueDeserializer<'_>,
    ) -> Option<Result<Arc<dyn ServiceFactory>, BuildError>> {
        self.kinds.get(kind).map(|b| b(options, name, &self.kept))
    }

    /// Builds `kind` with no options at all (a built-in named directly in a chain).
    pub fn build_default(&self, kind: &str) -> Option<Result<Arc<dyn ServiceFactory>, BuildError>> {
        let de = toml::de::ValueDeserializer::parse("{}").ok()?;
        self.build(kind, kind, de)
    }
}
