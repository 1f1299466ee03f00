//! Who a plugin acts as on the API server: the host itself, or a tenant's
//! ServiceAccount by impersonation.

/// A user the host impersonates for one plugin's writes, Events and uncached
/// reads (`Impersonate-User`), so the API server's RBAC bounds the plugin as
/// well as its grant. Set by an embedder (a namespaced `Handler`), never by a
/// manifest's text.
///
/// No `Impersonate-Group` is sent: kube-apiserver gives an impersonated
/// ServiceAccount that names no group exactly the groups its token would
/// have ([`Identity::groups`]). Naming them would need `impersonate` on each
/// group by name, one per tenant namespace, where this needs it on
/// ServiceAccounts only.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    user: String,
    groups: Vec<String>,
}

impl Identity {
    /// The ServiceAccount `name` of `namespace`, with the groups
    /// kube-apiserver gives a ServiceAccount's token.
    #[must_use]
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
        }
    }

    /// The user's name (`Impersonate-User`).
    #[must_use]
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The groups the API server gives it.
    #[must_use]
    pub fn groups(&self) -> &[String] {
        &self.groups
    }

    /// Adds the impersonation header to `request`.
    ///
    /// # Errors
    ///
    /// When the name is not a valid header value (it holds a control
    /// character).
    pub fn impersonate<B>(&self, request: &mut http::Request<B>) -> Result<(), http::header::InvalidHeaderValue> {
        let user = http::HeaderValue::from_str(&self.user)?;
        request.headers_mut().insert("impersonate-user", user);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_is_impersonated_by_name_and_gets_the_groups_of_its_token() {
        let identity = Identity::service_account("shop", "handlers");
        let mut request = http::Request::new(());
        identity.impersonate(&mut request).unwrap();
        assert_eq!(
            request.headers()["impersonate-user"],
            "system:serviceaccount:shop:handlers"
        );
        assert!(request.headers().get("impersonate-group").is_none());
        assert_eq!(
            identity.groups(),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:shop",
                "system:authenticated"
            ]
        );
    }
}
