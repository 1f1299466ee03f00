//! `kinformer crds`: the Handler and ClusterHandler CRDs, as YAML.

/// Print the CustomResourceDefinitions of `Handler` (a tenant's handler,
/// namespaced) and `ClusterHandler` (the platform team's), for
/// `kubectl apply -f -`; `kinformer run --handlers` runs them.
#[derive(Debug, clap::Args)]
pub(crate) struct Crds {}

impl Crds {
    #[expect(clippy::unused_self, reason = "every command runs from its arguments, even none")]
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        print!("{}", kinformer::handlers::CRDS);
        Ok(0)
    }
}
