//! What kube-controller-manager puts in every namespace: the `default` ServiceAccount (the service account controller) and the `kube-root-ca.crt` ConfigMap (the root CA publisher).

use serde_json::json;

use crate::resources::ids;
use crate::status::Result;
use crate::store::Transaction;

/// The name of the ConfigMap holding the cluster's CA bundle.
pub(crate) const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// The CA bundle published in every namespace. The emulation serves plain
/// HTTP and signs nothing with it: it is there for clients that read the
/// ConfigMap, as pods mount it, and verifies no server.
const ROOT_CA: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAjMSEwHwYDVQQDDBhrdWJlcm5l\n\
dGVzLWVtdWxhdGlvbi1jYTAeFw0yNjAxMDEwMDAwMDBaFw0zNjAxMDEwMDAwMDBa\n\
-----END CERTIFICATE-----\n";

/// Creates the namespace's `default` ServiceAccount and `kube-root-ca.crt`
/// ConfigMap when they are missing and the namespace is not being deleted.
///
/// # Errors
///
/// When the store refuses a write.
pub(crate) fn publish(transaction: &mut Transaction<'_>, namespace: &str) -> Result<()> {
    match transaction.get(&ids::namespaces(), None, namespace) {
        Ok(found) if found.value["metadata"].get("deletionTimestamp").is_none() => {}
        Ok(_) => return Ok(()),
        Err(error) if error.code == 404 => return Ok(()),
        Err(error) => return Err(error),
    }
    if transaction
        .get(&ids::serviceaccounts(), Some(namespace), "default")
        .is_err()
    {
        transaction.create(
            &ids::serviceaccounts(),
            Some(namespace),
            json!({"metadata": {"name": "default"}}),
        )?;
    }
    if transaction
        .get(&ids::configmaps(), Some(namespace), ROOT_CA_CONFIGMAP)
        .is_err()
    {
        transaction.create(
            &ids::configmaps(),
            Some(namespace),
            json!({
                "metadata": {"name": ROOT_CA_CONFIGMAP, "annotations": {
                    "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
                }},
                "data": {"ca.crt": ROOT_CA},
            }),
        )?;
    }
    Ok(())
}
